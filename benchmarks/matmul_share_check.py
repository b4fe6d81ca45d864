"""How much of the matmul ceiling Swin-T's own matmuls reach on this CPU, with nothing else timed.

Issue 24 asks for fp32 inference at 85 % of the machine's matmul ceiling (a 2048³ matmul). This times exactly the
matmuls of one Swin-T inference forward (every linear layer, the patch merging and head, and the windows' two
attention products), alone, interleaved with the 2048³ ceiling, in two forms: each linear as one whole-batch
``addmm`` into a fresh output (the plain eager path) and in row blocks into a reused output (as swinlite's row blocks
take them). Their share of the ceiling bounds what a whole model built on these matmuls can reach. Figures:
docs/performance.md ("CPU without AVX-512").

    python benchmarks/matmul_share_check.py --batch 8
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import timm
import torch

from swinlite.fast.blocks import row_blocks_for

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.swin import matmul_step  # noqa: E402
from swinbench.timing import interleaved_seconds  # noqa: E402

Linear = tuple[int, int, int, int, int]  # (rows M, in K, out N, times, rows per row block in the model)


def swin_t_matmuls(batch: int, size: int) -> tuple[list[Linear], list[tuple[int, int, int, int]]]:
    """The linear layers (M, K, N, times, row block) and attention products (windows x heads, N tokens, head dim,
    times) of one inference forward of swinlite's Swin-T at ``size``² (a multiple of 32 times the window: no
    padding). A block's linears take the row blocks :func:`~swinlite.fast.blocks.row_blocks_for` gives the model
    (its widest buffer: the MLP's hidden layer); patch merging and the head run whole (M rows)."""
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
        with torch.no_grad():  # the rule of CPU inference
            rows = row_blocks_for(False, torch.empty(0), 4 * width).rows
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
    linears: list[Linear], attention: list[tuple[int, int, int, int]], row_blocks: bool
) -> Callable[[], None]:
    """One call runs every matmul of a forward: whole-batch ``addmm`` into fresh outputs, or ``addmm`` in each linear's
    row blocks into a reused output."""
    cases = []
    for m, k, n, times, rows in linears:
        x, weight, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        block = min(rows, m)
        cases.append((x, weight, bias, torch.empty(block, n), block, times))
    products = []
    for b, n, d, times in attention:
        q, k = torch.randn(b, n, d), torch.randn(b, n, d)
        products.append((q, k, torch.empty(b, n, n), torch.empty(b, n, d), times))

    def run() -> None:
        for x, weight, bias, out, block, times in cases:
            for _ in range(times):
                if row_blocks:
                    for start in range(0, x.shape[0], block):
                        part = x[start : start + block]
                        torch.addmm(bias, part, weight.t(), out=out[: part.shape[0]])
                else:
                    torch.addmm(bias, x, weight.t())
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
    args = parser.parse_args()
    if args.batch < 1 or args.rounds < 1:
        parser.error(f"--batch and --rounds must be at least 1, got {args.batch} and {args.rounds}")
    if args.size < 224 or args.size % 224:
        parser.error(f"--size must be a multiple of 224 (32 x the window of 7: no padding), got {args.size}")
    linears, attention = swin_t_matmuls(args.batch, args.size)
    ceiling, ceiling_flops = matmul_step("cpu")
    work = flops(linears, attention)
    with torch.inference_mode():
        times = interleaved_seconds(
            [ceiling, all_matmuls(linears, attention, False), all_matmuls(linears, attention, True)],
            warmup=1,
            repeats=args.rounds,
        )
    medians = [sorted(t)[len(t) // 2] for t in times]
    rate = ceiling_flops / medians[0]
    print(
        f"Swin-T batch {args.batch} at {args.size}², {torch.get_num_threads()} threads: its matmuls are "
        f"{work / args.batch / 1e9:.2f} GFLOP per image; ceiling {rate / 1e9:.0f} GFLOP/s (2048³, same rounds)"
    )
    for name, seconds in (("whole-batch addmm", medians[1]), ("row blocks", medians[2])):
        print(f"  {name}: {seconds * 1e3:.0f} ms, {work / seconds / 1e9:.0f} GFLOP/s = {work / seconds / rate:.0%}")


if __name__ == "__main__":
    main()
