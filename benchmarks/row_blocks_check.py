"""swinlite's CPU inference with and without its row-block kernel, against timm, timed alternately.

The row blocks are switched off by patching ``swinlite.fast.blocks.row_blocks_for`` (the one decision, in the
table of swinlite/fast/blocks.py), so both swinlite rows run the same model; ``--map-bytes`` instead times the
bound on the attention's maps per row block (``ATTENTION_MAP_BYTES_PER_THREAD``) at several values, fp32 and under
bf16 autocast. Figures: benchmarks/kernels.md.

    python benchmarks/row_blocks_check.py
    python benchmarks/row_blocks_check.py --map-bytes
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
MAP_MIB_PER_THREAD = (1.0, 2.0, 4.0, None)  # --map-bytes: the values timed (None: unbounded)
MAP_ROUNDS = 15


def forward(model: torch.nn.Module, x: torch.Tensor, bf16: bool = False) -> None:
    """One inference forward, in fp32 or under bf16 autocast."""
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        model(x)


def map_bytes() -> None:
    """Swin-T batch 8 at 224², each bound on the attention's maps per row block against timm."""
    lite = timm.create_model("swinlite_tiny_patch4_window7_224").eval()
    reference = timm.create_model("swin_tiny_patch4_window7_224").eval()
    x = torch.randn(8, 3, 224, 224)
    rule = fast_blocks.ATTENTION_MAP_BYTES_PER_THREAD
    for bf16 in (True, False):
        cases = {
            "unbounded" if mib is None else f"{mib:g} MiB": (
                partial(forward, lite, x, bf16),
                2**62 if mib is None else int(mib * 2**20),
            )
            for mib in MAP_MIB_PER_THREAD
        }
        cases["timm"] = (partial(forward, reference, x, bf16), rule)
        line = line_with_setting(fast_blocks, "ATTENTION_MAP_BYTES_PER_THREAD", cases, 1, MAP_ROUNDS, "timm")
        precision = "bf16" if bf16 else "fp32"
        print(f"{precision}, batch 8 at 224x224, {torch.get_num_threads()} threads, median of {MAP_ROUNDS}: {line}")
    print(f"the rule: {rule / 2**20:g} MiB of maps per thread")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--map-bytes", action="store_true", help="time the bound on the attention's maps instead")
    if parser.parse_args().map_bytes:
        map_bytes()
        return
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
