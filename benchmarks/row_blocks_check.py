"""swinlite's CPU inference with and without its row-block kernel, against timm, timed alternately.

The row blocks are switched off by patching ``swinlite.fast.blocks.row_blocks_for`` (the one decision, in the
table of swinlite/fast/blocks.py), so both swinlite rows run the same model. Figures: benchmarks/kernels.md.

    python benchmarks/row_blocks_check.py
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
from swinbench.sizes import build_timm  # noqa: E402
from swinbench.timing import line_with_setting  # noqa: E402

CASES = [(8, (224, 224), 9), (2, (800, 1333), 5)]  # batch, (H, W), timed rounds


def forward(model: torch.nn.Module, x: torch.Tensor) -> None:
    """One inference forward."""
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
            "row blocks": (partial(forward, lite, x), row_blocks_for),
            "whole batch": (partial(forward, lite, x), lambda *args: None),
            "timm": (partial(forward, reference, x), row_blocks_for),
        }
        line = line_with_setting(fast_blocks, "row_blocks_for", cases, 1, rounds, "timm")
        print(f"batch {batch} at {size[0]}x{size[1]}, median of {rounds}: {line}")


if __name__ == "__main__":
    main()
