"""swinlite's CPU bf16-autocast inference with its kept weight copies and with a conversion per call, against timm,
timed alternately.

The per-call conversion is restored by patching ``swinlite.fast.row_blocks._cast`` (the one place the row blocks
convert weights), so both swinlite rows run the same model. Figures: benchmarks/cpu_bf16_weight_copies.md.

    python benchmarks/weight_copies_check.py
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import timm
import torch

import swinlite.fast.row_blocks as row_blocks

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.timing import line_with_setting  # noqa: E402

CASES = [(1, 25), (8, 9)]  # batch, timed rounds (224², bf16 autocast)


def per_call(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The conversion before the kept copies: every weight, every call."""
    return None if t is None else t.to(dtype)


def forward(model: torch.nn.Module, x: torch.Tensor) -> None:
    """One bf16-autocast inference forward."""
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(x)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options: --help, typos exit 2
    kept = row_blocks._cast
    torch.manual_seed(0)
    lite = timm.create_model("swinlite_tiny_patch4_window7_224").eval()
    reference = timm.create_model("swin_tiny_patch4_window7_224").eval()
    for batch, rounds in CASES:
        x = torch.randn(batch, 3, 224, 224)
        lite_step, timm_step = partial(forward, lite, x), partial(forward, reference, x)
        cases = {"kept copies": (lite_step, kept), "per call": (lite_step, per_call), "timm": (timm_step, kept)}
        line = line_with_setting(row_blocks, "_cast", cases, 2, rounds, "timm")
        print(f"batch {batch} at 224x224, bf16 autocast, median of {rounds}: {line}")


if __name__ == "__main__":
    main()
