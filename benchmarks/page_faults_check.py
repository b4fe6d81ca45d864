"""Minor page faults per call of swinlite's and timm's Swin-T on CPU, next to their times, timed alternately.

A tensor the allocator has to map afresh (glibc maps large blocks with mmap and returns them on free) is
page-faulted in on first write, one fault per 4 KiB page; memory reused from the process's heap is not.
The count comes from ``getrusage`` (Linux/Unix) around each call (``swinbench.timing.FaultCounted``, as in
``scripts/benchmark.py``'s tables), in a freshly started process. Both models hold the same weights (timm's,
converted) and run the steps of ``scripts/benchmark.py``. Figures: benchmarks/kernels.md, docs/performance.md.

    python benchmarks/page_faults_check.py                    # fp32
    python benchmarks/page_faults_check.py --precision bf16   # under bf16 autocast
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import timm
import torch

from swinlite.convert import convert_state_dict

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.swin import make_step  # noqa: E402
from swinbench.timing import FaultCounted, interleaved_seconds  # noqa: E402

CASES = [("inference", 9), ("train", 5)]  # task, timed rounds
WARMUP = 2  # untimed calls of each step first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="bf16: under CPU autocast")
    precision = parser.parse_args().precision
    torch.manual_seed(0)
    reference = timm.create_model("swin_tiny_patch4_window7_224", drop_path_rate=0.0)
    lite = timm.create_model("swinlite_tiny_patch4_window7_224", drop_path_rate=0.0)
    lite.load_state_dict(convert_state_dict(reference.state_dict(), lite))
    x = torch.randn(8, 3, 224, 224)
    for task, rounds in CASES:
        steps = {
            name: FaultCounted(make_step(m, x, task, precision))
            for name, m in (("swinlite", lite), ("timm", reference))
        }
        seconds = dict(zip(steps, interleaved_seconds(list(steps.values()), WARMUP, rounds), strict=True))
        faults = {name: step.median(rounds) for name, step in steps.items()}
        cells = ", ".join(
            f"{name} {statistics.median(t) * 1e3:.0f} ms, {faults[name]:.0f} faults ({faults[name] * 4 / 1024:.0f} MiB)"
            for name, t in seconds.items()
        )
        ratio = statistics.median(seconds["timm"]) / statistics.median(seconds["swinlite"])
        print(
            f"{task}, Swin-T batch 8 at 224x224, {precision}, median of {rounds}: {cells}; swinlite {ratio:.2f}x timm"
        )


if __name__ == "__main__":
    main()
