"""swinlite's CPU inference with and without its row-block kernel, against timm, timed alternately.

The row blocks are switched off by patching ``swinlite.fast.blocks.row_blocks_for`` (the one decision, in the
table of swinlite/fast/blocks.py), so both swinlite rows run the same model. Figures: benchmarks/kernels.md.

    python benchmarks/row_blocks_check.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import timm
import torch

import swinlite.fast.blocks as fast_blocks

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.sizes import build_timm  # noqa: E402
from swinbench.timing import interleaved_line  # noqa: E402

CASES = [(8, (224, 224), 9), (2, (800, 1333), 5)]  # batch, (H, W), timed rounds


def forward(model: torch.nn.Module, x: torch.Tensor, choice: Callable[..., object]) -> None:
    """One inference forward with ``choice`` as the row-block decision."""
    fast_blocks.row_blocks_for = choice
    with torch.inference_mode():
        model(x)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options: --help, typos exit 2
    row_blocks_for = fast_blocks.row_blocks_for
    for batch, size, rounds in CASES:
        lite = timm.create_model("swinlite_tiny_patch4_window7_224", img_size=size).eval()
        reference = build_timm("swin_tiny_patch4_window7_224", size).eval()
        x = torch.randn(batch, 3, *size)
        cases = {
            "row blocks": (lite, row_blocks_for),
            "whole batch": (lite, lambda *args: None),
            "timm": (reference, row_blocks_for),
        }
        try:
            line = interleaved_line({n: partial(forward, m, x, c) for n, (m, c) in cases.items()}, 1, rounds, "timm")
        finally:
            fast_blocks.row_blocks_for = row_blocks_for
        print(f"batch {batch} at {size[0]}x{size[1]}, median of {rounds}: {line}")


if __name__ == "__main__":
    main()
