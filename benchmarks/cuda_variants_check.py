"""Two choices of swinlite's training step, each against the other and timm, on the device that runs it: the MLP's
GELU recomputed in backward (``FastMlp.recompute_act``, the default) or kept as autograd keeps it, and the windows'
token gather with its own backward (the inverse gather, the default) or autograd's (a zero fill and a scatter).

Both choices were measured on CPUs (benchmarks/kernels.md); on a GPU at batch 1 and 2, where swinlite's step was
0.82-0.97x timm's on an H200 and the step waits on kernel launches, each costs a Python autograd Function per block
and the recompute one more kernel. This check says whether they pay there: per batch and precision, the median of
interleaved train steps (cross-entropy, backward, SGD) and each variant's peak memory. ``benchmarks/gpu_run.sh`` runs
it as its part ``cuda_variants``.

    python benchmarks/cuda_variants_check.py                       # CUDA, Swin-T at 224², batch 1 and 64
    python benchmarks/cuda_variants_check.py --device cpu --batches 2 --img-size 64 --repeats 3
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import timm
import torch

import swinlite.fast.blocks as fast_blocks

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.swin import _synced, make_step, peak_memory_bytes  # noqa: E402
from swinbench.timing import interleaved_median_seconds  # noqa: E402


def autograd_gather(x: torch.Tensor, rows: torch.Tensor, inverse_rows: torch.Tensor) -> torch.Tensor:
    """``fast_blocks.gather_tokens`` with autograd's own backward of ``index_select``."""
    return fast_blocks._take_tokens(x, rows)


def with_gather(step: Callable[[], None], gather: Callable[..., torch.Tensor]) -> Callable[[], None]:
    """``step`` run with ``gather`` as the blocks' token gather (the original restored after each step)."""

    def run() -> None:
        original = fast_blocks.gather_tokens
        fast_blocks.gather_tokens = gather
        try:
            step()
        finally:
            fast_blocks.gather_tokens = original

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda[:i] or cpu (default: %(default)s)")
    parser.add_argument("--batches", default="1,64", help="comma-separated batch sizes (default: %(default)s)")
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=11, help="interleaved rounds; the median counts")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():  # was a traceback from the first model moved there
        print(f"error: --device {args.device} needs CUDA, and torch.cuda.is_available() is False here; on the CPU: "
              "--device cpu", file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    torch.manual_seed(0)
    reference = timm.create_model("swin_tiny_patch4_window7_224", img_size=args.img_size, drop_path_rate=0.0)
    lite = timm.create_model("swinlite_tiny_patch4_window7_224", img_size=args.img_size, drop_path_rate=0.0)
    lite.load_state_dict(reference.state_dict())  # converted on load
    plain = copy.deepcopy(lite)
    for module in plain.modules():
        if isinstance(module, fast_blocks.FastMlp):
            module.recompute_act = False
    models = {name: m.to(device) for name, m in (("lite", lite), ("plain", plain), ("timm", reference))}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"Swin-T train step at {args.img_size}², {name}, torch {torch.__version__}, timm {timm.__version__}; "
          f"median of {args.repeats} interleaved rounds, peak memory of one step")  # fmt: skip
    for batch in (int(b) for b in args.batches.split(",")):
        x = torch.randn(batch, 3, args.img_size, args.img_size, device=device)
        for precision in ("fp32", "bf16"):
            steps = {
                "swinlite": make_step(models["lite"], x, "train", precision),
                "MLP without the recompute": make_step(models["plain"], x, "train", precision),
                "gather with autograd's backward": with_gather(
                    make_step(models["lite"], x, "train", precision), autograd_gather
                ),
                "timm": make_step(models["timm"], x, "train", precision),
            }
            runs = [_synced(step, args.device) for step in steps.values()]
            medians = dict(zip(steps, interleaved_median_seconds(runs, warmup=3, repeats=args.repeats), strict=True))
            memory = {n: peak_memory_bytes(step, args.device) / 2**20 for n, step in steps.items()}
            timm_s = medians["timm"]
            cases = [f"{n} {s * 1e3:.1f} ms ({timm_s / s:.2f}x timm, {memory[n]:.0f} MB)" for n, s in medians.items()]
            print(f"batch {batch} {precision}: {', '.join(cases)}")


if __name__ == "__main__":
    main()
