"""swinlite's CPU bf16-autocast inference with its kept weight copies and with a conversion per call, against timm,
timed alternately.

The per-call conversion is restored by patching ``swinlite.fast.row_blocks._cast`` (the one place the row blocks
convert weights), so both swinlite rows run the same model. Figures: benchmarks/cpu_bf16_weight_copies.md.

    python benchmarks/weight_copies_check.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import timm
import torch

import swinlite.fast.row_blocks as row_blocks

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.timing import interleaved_line  # noqa: E402

CASES = [(1, 25), (8, 9)]  # batch, timed rounds (224², bf16 autocast)


def per_call(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The conversion before the kept copies: every weight, every call."""
    return None if t is None else t.to(dtype)


def forward(model: torch.nn.Module, x: torch.Tensor, cast: Callable[..., object]) -> None:
    """One bf16-autocast inference forward with ``cast`` as the row blocks' weight conversion."""
    row_blocks._cast = cast
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
        cases = {"kept copies": (lite, kept), "per call": (lite, per_call), "timm": (reference, kept)}
        try:
            line = interleaved_line({n: partial(forward, m, x, c) for n, (m, c) in cases.items()}, 2, rounds, "timm")
        finally:
            row_blocks._cast = kept
        print(f"batch {batch} at 224x224, bf16 autocast, median of {rounds}: {line}")


if __name__ == "__main__":
    main()
