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
from pathlib import Path

import timm
import torch

import swinlite.fast.blocks as fast_blocks

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.sizes import build_timm  # noqa: E402
from swinbench.swin import make_step  # noqa: E402
from swinbench.timing import line_with_setting  # noqa: E402

CASES = [(8, (224, 224), 9), (2, (800, 1333), 5)]  # batch, (H, W), timed rounds
MAP_MIB_PER_THREAD = (1.0, 2.0, 4.0, None)  # --map-bytes: the values timed (None: unbounded)
MAP_ROUNDS = 15


def map_bytes() -> None:
    """Swin-T batch 8 at 224², each bound on the attention's maps per row block against timm."""
    lite = timm.create_model("swinlite_tiny_patch4_window7_224").eval()
    reference = timm.create_model("swin_tiny_patch4_window7_224").eval()
    x = torch.randn(8, 3, 224, 224)
    rule = fast_blocks.ATTENTION_MAP_BYTES_PER_THREAD
    for precision in ("bf16", "fp32"):
        run_lite = make_step(lite, x, "inference", precision)
        cases = {
            "unbounded" if mib is None else f"{mib:g} MiB": (run_lite, 2**62 if mib is None else int(mib * 2**20))
            for mib in MAP_MIB_PER_THREAD
        }
        cases["timm"] = (make_step(reference, x, "inference", precision), rule)
        line = line_with_setting(fast_blocks, "ATTENTION_MAP_BYTES_PER_THREAD", cases, 1, MAP_ROUNDS, "timm")
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
        run_lite = make_step(lite, x, "inference", "fp32")
        cases = {
            "row blocks": (run_lite, row_blocks_for),
            "whole batch": (run_lite, lambda *args: None),
            "timm": (make_step(reference, x, "inference", "fp32"), row_blocks_for),
        }
        line = line_with_setting(fast_blocks, "row_blocks_for", cases, 1, rounds, "timm")
        print(f"batch {batch} at {size[0]}x{size[1]}, median of {rounds}: {line}")


if __name__ == "__main__":
    main()
