"""Linear layers through PyTorch's BLAS (MKL on x86; ``addmm``) and through oneDNN, on Swin-T's shapes and in the
model, against timm, timed alternately.

The model rows switch by patching a rule of the dispatch table (swinlite/fast/blocks.py, linear_grad.py), so the
swinlite rows run the same weights: ``ONEDNN_FP32_ON_THIS_CPU`` (fp32 modes; compiled, one model copy per setting is
compiled with inductor's freezing, the rule being read while tracing), ``ONEDNN_INPUT_GRAD_ROWS`` (``input-grad``: the
fp32 train step's input gradients by oneDNN at any size, or by the BLAS below that many rows) and ``ONEDNN_BF16``
(``bf16``: row blocks under bf16 autocast, one model copy per setting, as the converted weights are kept per
weight in one form). Figures: benchmarks/kernels.md, "fp32 linear layers through oneDNN" and "bf16 linear layers of
the row blocks".

    python benchmarks/linear_library_check.py                    # shapes, eager and compiled inference, train step
    python benchmarks/linear_library_check.py --modes shapes,eager
    python benchmarks/linear_library_check.py --modes input-grad,bf16 --batch 1
    python benchmarks/linear_library_check.py --modes compiled-train    # the train step through torch.compile
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import timm
import torch

import swinlite.fast.blocks as fast_blocks
from swinlite.fast import linear_grad
from swinlite.fast.row_blocks import ONEDNN_LINEAR, onednn_linear

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.choices import parse_modes  # noqa: E402
from swinbench.compiled import compiled_by_first_call, frozen_compiled_step  # noqa: E402
from swinbench.swin import make_step  # noqa: E402
from swinbench.timing import line_with_setting, shuffled_seconds  # noqa: E402

ROUNDS, SHAPE_ROUNDS, TRAIN_ROUNDS = 11, 15, 7
MODES = ("shapes", "eager", "compiled", "train", "input-grad", "bf16", "compiled-train")
TOKENS = (3136, 784, 196, 49)  # per image at 224², stages 1-4
WIDTHS = (96, 192, 384, 768)


def swin_t_shapes(batch: int) -> list[tuple[int, int, int]]:
    """(rows, in, out) of Swin-T's linear layers per stage (qkv, proj, fc1, fc2) at ``batch`` images of 224²."""
    return [
        (batch * tokens, k, n)
        for tokens, c in zip(TOKENS, WIDTHS, strict=True)
        for k, n in ((c, 3 * c), (c, c), (c, 4 * c), (4 * c, c))
    ]


def shapes(batch: int) -> None:
    """Each shape by ``torch.addmm`` (BLAS) and by :func:`onednn_linear`, a new output each call, in random order."""
    total = {"blas": 0.0, "onednn": 0.0}
    for m, k, n in swin_t_shapes(batch):
        x, weight, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        steps = {"blas": partial(torch.addmm, bias, x, weight.t()), "onednn": partial(onednn_linear, x, weight, bias)}
        times = shuffled_seconds(steps, lambda name: None, warmup=2, repeats=SHAPE_ROUNDS)
        median = {name: statistics.median(t) for name, t in times.items()}
        rates = ", ".join(f"{name} {2 * m * k * n / s / 1e9:.0f}" for name, s in median.items())
        print(f"  {m} x {k} -> {n}: GFLOP/s {rates}", flush=True)
        for name, s in median.items():
            total[name] += s
    print(
        f"Swin-T's linears at batch {batch}, fp32, {torch.get_num_threads()} threads, median of {SHAPE_ROUNDS}: "
        f"BLAS {total['blas'] * 1e3:.0f} ms, oneDNN {total['onednn'] * 1e3:.0f} ms "
        f"({total['blas'] / total['onednn']:.2f}x)"
    )


def compiled_step(name: str, model: torch.nn.Module, x: torch.Tensor, onednn: bool) -> Callable[[], object]:
    """Compiled inference (freezing) whose every call, the compiling first one too, runs under the rule ``onednn``."""
    return frozen_compiled_step(name, model, x, before=partial(setattr, fast_blocks, "ONEDNN_FP32_ON_THIS_CPU", onednn))


def compiled_train_step(name: str, model: torch.nn.Module, x: torch.Tensor, onednn: bool) -> Callable[[], None]:
    """The fp32 train step (no optimizer) of ``model`` through ``torch.compile`` (inductor, no freezing: the
    linears as the ops ``swinlite::onednn_linear`` / ``swinlite::onednn_input_grad`` under the rule, else
    ``F.linear``), every call, the compiling first one too, under the rule ``onednn``; prints the compile time."""
    run = make_step(torch.compile(model, dynamic=False), x, "train", "fp32", optimizer=False)

    def step() -> None:
        fast_blocks.ONEDNN_FP32_ON_THIS_CPU = onednn
        run()

    return compiled_by_first_call(name, step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES[:4]), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--batch", type=int, default=8, help="images per batch (default: 8)")
    args = parser.parse_args()
    try:
        modes = parse_modes(args.modes, MODES)
    except ValueError as e:
        parser.error(str(e))
    if args.batch < 1:
        parser.error(f"--batch must be at least 1, got {args.batch}")
    batch = args.batch
    if not ONEDNN_LINEAR:
        sys.exit("error: this PyTorch has no oneDNN linear op (torch.ops.mkldnn._linear_pointwise)")
    threads, rule = torch.get_num_threads(), fast_blocks.ONEDNN_FP32_ON_THIS_CPU
    if "shapes" in modes:
        shapes(batch)
    torch.manual_seed(0)
    lite = timm.create_model("swinlite_tiny_patch4_window7_224").eval()
    reference = timm.create_model("swin_tiny_patch4_window7_224").eval()
    x = torch.randn(batch, 3, 224, 224)
    setting = f"Swin-T batch {batch} at 224x224, fp32, {threads} threads, median of {ROUNDS}"
    if "eager" in modes:
        run_lite = make_step(lite, x, "inference", "fp32")
        cases = {"BLAS": (run_lite, False), "oneDNN": (run_lite, True)}
        cases["timm"] = (make_step(reference, x, "inference", "fp32"), rule)
        line = line_with_setting(fast_blocks, "ONEDNN_FP32_ON_THIS_CPU", cases, 1, ROUNDS, "timm")
        print(f"eager inference, {setting}: {line}", flush=True)
    if "compiled" in modes:
        try:
            steps = {"BLAS": compiled_step("BLAS", copy.deepcopy(lite), x, False)}
            steps["oneDNN"] = compiled_step("oneDNN", copy.deepcopy(lite), x, True)
            steps["timm"] = compiled_step("timm", reference, x, rule)
            with torch.inference_mode():
                expected = lite(x)
            difference = max((steps[n]() - expected).abs().max().item() for n in ("BLAS", "oneDNN"))
            times = shuffled_seconds(steps, lambda name: None, warmup=1, repeats=ROUNDS)
        finally:
            fast_blocks.ONEDNN_FP32_ON_THIS_CPU = rule
        ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        line = ", ".join(f"{name} {t:.0f} ms ({ms['timm'] / t:.2f}x timm)" for name, t in ms.items())
        print(f"compiled inference (freezing), {setting}: {line}; max |logit - eager| {difference:.1e}")
    if {"train", "input-grad", "compiled-train"} & set(modes):
        train = timm.create_model("swinlite_tiny_patch4_window7_224", drop_path_rate=0.0)
        run_lite = make_step(train, x, "train", "fp32", optimizer=False)
        run_timm = make_step(reference, x, "train", "fp32", optimizer=False)
        train_setting = f"Swin-T batch {batch} at 224x224, fp32, {threads} threads, median of {TRAIN_ROUNDS}"
    if "train" in modes:
        cases = {"BLAS": (run_lite, False), "oneDNN": (run_lite, True), "timm": (run_timm, rule)}
        line = line_with_setting(fast_blocks, "ONEDNN_FP32_ON_THIS_CPU", cases, 1, TRAIN_ROUNDS, "timm")
        print(f"train step, {train_setting}: {line}", flush=True)
    if "input-grad" in modes:  # under this CPU's rule; the input gradients' library by their rows
        rows = linear_grad.ONEDNN_INPUT_GRAD_ROWS
        cases = {f"BLAS below {rows} rows": (run_lite, rows), "oneDNN at any size": (run_lite, 0)}
        cases["timm"] = (run_timm, rows)
        line = line_with_setting(linear_grad, "ONEDNN_INPUT_GRAD_ROWS", cases, 1, TRAIN_ROUNDS, "timm")
        print(f"train step, input gradients, {train_setting}: {line}", flush=True)
    if "compiled-train" in modes:
        try:
            steps = {"BLAS": compiled_train_step("BLAS", copy.deepcopy(train), x, False)}
            steps["oneDNN"] = compiled_train_step("oneDNN", copy.deepcopy(train), x, True)
            steps["timm"] = compiled_train_step("timm", copy.deepcopy(reference), x, rule)
            times = shuffled_seconds(steps, lambda name: None, warmup=1, repeats=TRAIN_ROUNDS)
        finally:
            fast_blocks.ONEDNN_FP32_ON_THIS_CPU = rule
        ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        line = ", ".join(f"{name} {t:.0f} ms ({ms['timm'] / t:.2f}x timm)" for name, t in ms.items())
        print(f"compiled train step, {train_setting}: {line}", flush=True)
    if "bf16" in modes:
        cases = {"addmm": (make_step(copy.deepcopy(lite), x, "inference", "bf16"), False)}
        cases["oneDNN"] = (make_step(lite, x, "inference", "bf16"), True)
        cases["timm"] = (make_step(reference, x, "inference", "bf16"), fast_blocks.ONEDNN_BF16)
        line = line_with_setting(fast_blocks, "ONEDNN_BF16", cases, 1, ROUNDS, "timm")
        print(f"eager inference (row blocks), {setting.replace('fp32', 'bf16 autocast')}: {line}", flush=True)
    print(
        f"this CPU ({fast_blocks.cpu_vendor() or 'vendor unknown'}) runs fp32 linears through: "
        f"{'oneDNN' if rule else 'its BLAS'}; bf16 row blocks through: "
        f"{'oneDNN' if fast_blocks.ONEDNN_BF16 else 'addmm'}"
    )


if __name__ == "__main__":
    main()
