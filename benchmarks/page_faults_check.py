"""Minor page faults per call of swinlite's and timm's Swin-T on CPU, next to their times, timed alternately.

A tensor the allocator has to map afresh (glibc maps large blocks with mmap and returns them on free) is
page-faulted in on first write, one fault per 4 KiB page; memory reused from the process's heap is not.
The count comes from ``getrusage`` (Linux/Unix) around each call. Both models hold the same weights
(timm's, converted) and run the steps of ``scripts/benchmark.py``. Figures: benchmarks/kernels.md.

    python benchmarks/page_faults_check.py
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import timm
import torch

from swinlite.convert import convert_state_dict

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.swin import make_step  # noqa: E402
from swinbench.timing import interleaved_seconds  # noqa: E402

CASES = [("inference", 9), ("train", 5)]  # task, timed rounds
WARMUP = 2  # untimed calls of each step first


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def counted(step: Callable[[], None], faults: list[int]) -> Callable[[], None]:
    """``step``, appending the minor page faults of each call to ``faults``."""

    def run() -> None:
        before = minor_faults()
        step()
        faults.append(minor_faults() - before)

    return run


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options: --help, typos exit 2
    torch.manual_seed(0)
    reference = timm.create_model("swin_tiny_patch4_window7_224", drop_path_rate=0.0)
    lite = timm.create_model("swinlite_tiny_patch4_window7_224", drop_path_rate=0.0)
    lite.load_state_dict(convert_state_dict(reference.state_dict(), lite))
    x = torch.randn(8, 3, 224, 224)
    for task, rounds in CASES:
        steps = {"swinlite": make_step(lite, x, task, "fp32"), "timm": make_step(reference, x, task, "fp32")}
        faults: dict[str, list[int]] = {name: [] for name in steps}  # every call's, warm-up calls first
        seconds = interleaved_seconds([counted(step, faults[name]) for name, step in steps.items()], WARMUP, rounds)
        cells = ", ".join(
            f"{name} {statistics.median(t) * 1e3:.0f} ms, {statistics.median(faults[name][WARMUP:]):.0f} faults "
            f"({statistics.median(faults[name][WARMUP:]) * 4 / 1024:.0f} MiB)"
            for name, t in zip(steps, seconds, strict=True)
        )
        print(f"{task}, Swin-T batch 8 at 224x224, fp32, median of {rounds}: {cells}")


if __name__ == "__main__":
    main()
