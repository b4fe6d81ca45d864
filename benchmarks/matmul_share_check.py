"""How much of the matmul ceiling Swin-T's own matmuls reach on this CPU, with nothing else timed.

Issue 24 asks for fp32 inference at 85 % of the machine's matmul ceiling (a 2048³ matmul) and bf16 inference at 75 %
of the bf16 one. This times exactly the matmuls of one Swin-T inference forward (every linear layer, the patch
merging and head, and the windows' two attention products), alone, interleaved with the 2048³ ceiling of the same
dtype, in two forms: each linear as one whole-batch ``addmm`` into a fresh output (the plain eager path, timm's under
autocast in bf16) and in row blocks as swinlite's row blocks take them on this CPU (``addmm`` into a reused output,
or oneDNN's linear where the row blocks' plan says: fp32 on AMD, bf16 where oneDNN computes it, with the weight in
its packed layout). Their share of the ceiling bounds what a whole model built on these matmuls can reach; the
model's own forward, timed in the same rounds, shows how much time everything else takes. Figures:
docs/performance.md ("CPU without AVX-512", "CPU with AVX-512 BF16").

    python benchmarks/matmul_share_check.py --batch 8
    python benchmarks/matmul_share_check.py --batch 8 --precision bf16
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import timm
import torch

from swinlite.device import cpu_computes_bf16
from swinlite.fast.blocks import row_blocks_for
from swinlite.fast.row_blocks import RowBlocks

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.swin import matmul_step  # noqa: E402
from swinbench.timing import interleaved_seconds  # noqa: E402

Linear = tuple[int, int, int, int, int]  # (rows M, in K, out N, times, rows per row block in the model)


def inference_plan(dtype: torch.dtype, width: int) -> RowBlocks:
    """The row blocks of CPU inference computing in ``dtype`` (fp32, or bf16 autocast) for a widest buffer of
    ``width`` channels, as :func:`~swinlite.fast.blocks.row_blocks_for` gives them to the model."""
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, enabled=dtype == torch.bfloat16):
        plan = row_blocks_for(False, torch.empty(0), width)
    assert plan is not None  # CPU, no autograd, eager
    return plan


def swin_t_matmuls(
    batch: int, size: int, dtype: torch.dtype = torch.float32
) -> tuple[list[Linear], list[tuple[int, int, int, int]]]:
    """The linear layers (M, K, N, times, row block) and attention products (windows x heads, N tokens, head dim,
    times) of one inference forward of swinlite's Swin-T at ``size``² (a multiple of 32 times the window: no
    padding). A block's linears take the row blocks :func:`~swinlite.fast.blocks.row_blocks_for` gives the model
    computing in ``dtype`` (its widest buffer: the MLP's hidden layer); patch merging and the head run whole (M
    rows)."""
    model = timm.create_model("swinlite_tiny_patch4_window7_224", img_size=size)
    linears: list[Linear] = []
    attention = []
    side = size // 4
    for i, stage in enumerate(model.layers):
        if i > 0:  # patch merging: 4C -> 2C on a quarter of the tokens
            side //= 2
            width = model.feature_info[i - 1]["num_chs"]
            merged = batch * side * side
            linears.append((merged, 4 * width, 2 * width, 1, merged))
        width, depth = model.feature_info[i]["num_chs"], len(stage.blocks)
        tokens = batch * side * side
        heads = stage.blocks[0].attn.num_heads
        window = stage.blocks[0].window
        n = window[0] * window[1]
        rows = inference_plan(dtype, 4 * width).rows
        linears += [(tokens, width, 3 * width, depth, rows), (tokens, width, width, depth, rows)]
        linears += [(tokens, width, 4 * width, depth, rows), (tokens, 4 * width, width, depth, rows)]
        attention.append((tokens // n * heads, n, width // heads, depth))
    linears.append((batch, model.num_features, model.num_classes, 1, batch))
    return linears, attention


def flops(linears: list[Linear], attention: list[tuple[int, int, int, int]]) -> int:
    """Multiply-adds x 2 of the linears and of both attention products (q·kᵀ and attention·v)."""
    total = sum(2 * m * k * n * times for m, k, n, times, _ in linears)
    return total + sum(2 * 2 * b * n * n * d * times for b, n, d, times in attention)


def all_matmuls(
    linears: list[Linear], attention: list[tuple[int, int, int, int]], row_blocks: bool, dtype: torch.dtype
) -> Callable[[], None]:
    """One call runs every matmul of a forward in ``dtype``: whole-batch ``addmm`` into fresh outputs, or each linear
    in its row blocks as the model takes them (:func:`inference_plan`): ``addmm`` into a reused output, or oneDNN's
    linear into a new output per row block, in bf16 with the weight in oneDNN's packed layout (the row blocks keep
    their converted weights so)."""
    onednn = row_blocks and inference_plan(dtype, 1).onednn
    cases = []
    for m, k, n, times, rows in linears:
        x, weight, bias = (torch.randn(*shape, dtype=dtype) for shape in ((m, k), (n, k), (n,)))
        if onednn and dtype == torch.bfloat16:
            weight = torch.ops.mkldnn._reorder_linear_weight(weight)  # (n, k), oneDNN's layout
        block = min(rows, m)
        cases.append((x, weight, bias, torch.empty(block, n, dtype=dtype), block, times))
    products = []
    for b, n, d, times in attention:
        q, k = torch.randn(b, n, d, dtype=dtype), torch.randn(b, n, d, dtype=dtype)
        products.append((q, k, torch.empty(b, n, n, dtype=dtype), torch.empty(b, n, d, dtype=dtype), times))

    def run() -> None:
        for x, weight, bias, out, block, times in cases:
            for _ in range(times):
                if not row_blocks:
                    torch.addmm(bias, x, weight.t())
                    continue
                for start in range(0, x.shape[0], block):
                    part = x[start : start + block]
                    if onednn:
                        torch.ops.mkldnn._linear_pointwise(part, weight, bias, "none", [], "")
                    else:
                        torch.addmm(bias, part, weight.t(), out=out[: part.shape[0]])
        for q, k, scores, out, times in products:
            for _ in range(times):
                torch.bmm(q, k.transpose(1, 2), out=scores)
                torch.bmm(scores, q, out=out)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="dtype of every matmul")
    args = parser.parse_args()
    if args.batch < 1 or args.rounds < 1:
        parser.error(f"--batch and --rounds must be at least 1, got {args.batch} and {args.rounds}")
    if args.size < 224 or args.size % 224:
        parser.error(f"--size must be a multiple of 224 (32 x the window of 7: no padding), got {args.size}")
    if args.precision == "bf16" and not cpu_computes_bf16():
        parser.error(  # emulated: a 2048³ ceiling matmul took a minute (0.3 GFLOP/s), and the shares read 4850 %
            "--precision bf16 needs a CPU that computes bf16 (AVX-512 BF16 or AMX); this one emulates it, so its "
            "ceiling means nothing"
        )
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    linears, attention = swin_t_matmuls(args.batch, args.size, dtype)
    ceiling, ceiling_flops = matmul_step("cpu", dtype)
    work = flops(linears, attention)
    model = timm.create_model("swinlite_tiny_patch4_window7_224", img_size=args.size).eval()
    x = torch.randn(args.batch, 3, args.size, args.size)

    def forward() -> None:  # the whole model, as scripts/benchmark.py times its inference
        with torch.autocast("cpu", torch.bfloat16, enabled=dtype == torch.bfloat16):
            model(x)

    with torch.inference_mode():
        times = interleaved_seconds(
            [
                ceiling,
                all_matmuls(linears, attention, False, dtype),
                all_matmuls(linears, attention, True, dtype),
                forward,
            ],
            warmup=1,
            repeats=args.rounds,
        )
    medians = [sorted(t)[len(t) // 2] for t in times]
    rate = ceiling_flops / medians[0]
    print(
        f"Swin-T batch {args.batch} at {args.size}², {args.precision}, {torch.get_num_threads()} threads: its matmuls "
        f"are {work / args.batch / 1e9:.2f} GFLOP per image; ceiling {rate / 1e9:.0f} GFLOP/s (2048³, same rounds)"
    )
    library = "oneDNN" if inference_plan(dtype, 1).onednn else "addmm"
    for name, seconds in (("whole-batch addmm", medians[1]), (f"row blocks ({library})", medians[2])):
        print(f"  {name}: {seconds * 1e3:.0f} ms, {work / seconds / 1e9:.0f} GFLOP/s = {work / seconds / rate:.0%}")
    model_seconds, rest = medians[3], medians[3] - medians[2]
    print(
        f"  swinlite's whole forward: {model_seconds * 1e3:.0f} ms = {work / model_seconds / rate:.0%} of the ceiling; "
        f"all but the row blocks' matmuls {rest * 1e3:.0f} ms ({rest / medians[2]:.0%} of them)"
    )


if __name__ == "__main__":
    main()
