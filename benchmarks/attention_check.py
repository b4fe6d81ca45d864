"""swinlite's CPU attention kernels, each against the other candidate on the same model and against timm,
timed alternately: the fp32 train step with the recomputed kernel and with the explicit one, and inference (row
blocks), fp32 and under bf16 autocast, with SDPA's flash kernel and with the explicit softmax.

Training switches by patching ``swinlite.fast.blocks.RECOMPUTED_ON_THIS_CPU`` (the rule of the dispatch table in
swinlite/fast/blocks.py); inference by patching ``swinlite.fast.blocks.CPU_FLASH_DTYPES`` (the dtypes in which CPU
inference runs the flash kernel). Figures: benchmarks/kernels.md.

    python benchmarks/attention_check.py                  # fp32 and bf16 inference, fp32 train step
    python benchmarks/attention_check.py --no-train       # inference only
    python benchmarks/attention_check.py --whole-batch    # bf16 inference off the row blocks: Swin-V2-T and
                                                          # Swin-T with frozen weights in grad mode
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import timm
import torch

import swinlite.fast.blocks as fast_blocks

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.swin import make_step  # noqa: E402
from swinbench.timing import line_with_setting  # noqa: E402

BATCH, TRAIN_ROUNDS, INFERENCE_ROUNDS = 8, 9, 11  # 224²
PRECISIONS = ("fp32", "bf16")  # inference: bf16 under autocast


def frozen_forward(model: torch.nn.Module, x: torch.Tensor) -> None:
    """A bf16 forward in grad mode of a model whose weights need no gradient: the whole-batch path, no row blocks."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(x)


def whole_batch(threads: int) -> None:
    """bf16 inference where the row blocks do not run (grad mode, frozen weights), with the flash kernel and with the
    explicit softmax."""
    torch.manual_seed(0)
    pairs = {
        "Swin-V2-T at 256x256": ("swinlite_v2_tiny_window8_256", "swinv2_tiny_window8_256", 256),
        "Swin-T at 224x224": ("swinlite_tiny_patch4_window7_224", "swin_tiny_patch4_window7_224", 224),
    }
    for setting, (lite_name, timm_name, size) in pairs.items():
        lite, reference = (timm.create_model(n).eval().requires_grad_(False) for n in (lite_name, timm_name))
        x = torch.randn(BATCH, 3, size, size)
        run_lite, run_timm = partial(frozen_forward, lite, x), partial(frozen_forward, reference, x)
        flash, explicit = fast_blocks.cpu_flash_dtypes(True), fast_blocks.cpu_flash_dtypes(False)
        cases = {"sdpa": (run_lite, flash), "explicit": (run_lite, explicit), "timm": (run_timm, explicit)}
        line = line_with_setting(fast_blocks, "CPU_FLASH_DTYPES", cases, 2, INFERENCE_ROUNDS, "timm")
        setting += f", frozen weights, grad mode, batch {BATCH}, bf16, {threads} threads, median of {INFERENCE_ROUNDS}"
        print(f"{setting}: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-train", action="store_true", help="time inference only")
    parser.add_argument("--whole-batch", action="store_true", help="only bf16 inference off the row blocks")
    args = parser.parse_args()
    threads = torch.get_num_threads()
    if args.whole_batch:
        whole_batch(threads)
        return
    rule = fast_blocks.RECOMPUTED_ON_THIS_CPU
    torch.manual_seed(0)
    lite = timm.create_model("swinlite_tiny_patch4_window7_224", drop_path_rate=0.0)
    reference = timm.create_model("swin_tiny_patch4_window7_224", drop_path_rate=0.0)
    every, none = (torch.float32, torch.bfloat16), ()
    for precision in PRECISIONS:
        for batch in (BATCH, 1):
            x = torch.randn(batch, 3, 224, 224)
            run_lite, run_timm = (make_step(m, x, "inference", precision) for m in (lite, reference))
            cases = {"sdpa": (run_lite, every), "explicit": (run_lite, none), "timm": (run_timm, every)}
            line = line_with_setting(fast_blocks, "CPU_FLASH_DTYPES", cases, 2, INFERENCE_ROUNDS, "timm")
            setting = f"batch {batch} at 224x224, {precision}, {threads} threads, median of {INFERENCE_ROUNDS}"
            print(f"inference, {setting}: {line}")
    print(f"CPU inference runs the flash kernel in: {', '.join(str(d) for d in fast_blocks.CPU_FLASH_DTYPES)}")
    if args.no_train:
        return
    x = torch.randn(BATCH, 3, 224, 224)
    lite_step, timm_step = (make_step(m, x, "train", "fp32", optimizer=False) for m in (lite, reference))
    cases = {"recomputed": (lite_step, True), "explicit": (lite_step, False), "timm": (timm_step, rule)}
    line = line_with_setting(fast_blocks, "RECOMPUTED_ON_THIS_CPU", cases, 1, TRAIN_ROUNDS, "timm")
    print(f"train step, batch {BATCH} at 224x224, fp32, {threads} threads, median of {TRAIN_ROUNDS}: {line}")
    print(f"this CPU ({torch.backends.cpu.get_cpu_capability()}) trains with: {'recomputed' if rule else 'explicit'}")


if __name__ == "__main__":
    main()
