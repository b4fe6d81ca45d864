"""swinlite's CPU fp32 train step with the recomputed attention kernel and with the explicit one, against timm,
timed alternately.

The kernel is switched by patching ``swinlite.fast.blocks.RECOMPUTED_ON_THIS_CPU`` (the rule of the dispatch table
in swinlite/fast/blocks.py), so both swinlite rows run the same model. Figures: benchmarks/kernels.md.

    python benchmarks/train_attention_check.py
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import timm
import torch
import torch.nn.functional as F

import swinlite.fast.blocks as fast_blocks

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.timing import line_with_setting  # noqa: E402

BATCH, ROUNDS = 8, 9  # 224², fp32


def train_step(model: torch.nn.Module, x: torch.Tensor) -> None:
    """One forward + cross-entropy + backward."""
    F.cross_entropy(model(x), torch.zeros(x.shape[0], dtype=torch.long)).backward()
    model.zero_grad(set_to_none=True)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options: --help, typos exit 2
    rule = fast_blocks.RECOMPUTED_ON_THIS_CPU
    torch.manual_seed(0)
    lite = timm.create_model("swinlite_tiny_patch4_window7_224", drop_path_rate=0.0).train()
    reference = timm.create_model("swin_tiny_patch4_window7_224", drop_path_rate=0.0).train()
    x = torch.randn(BATCH, 3, 224, 224)
    lite_step, timm_step = partial(train_step, lite, x), partial(train_step, reference, x)
    cases = {"recomputed": (lite_step, True), "explicit": (lite_step, False), "timm": (timm_step, rule)}
    line = line_with_setting(fast_blocks, "RECOMPUTED_ON_THIS_CPU", cases, 1, ROUNDS, "timm")
    print(f"train step, batch {BATCH} at 224x224, fp32, {torch.get_num_threads()} threads, median of {ROUNDS}: {line}")
    print(f"this CPU ({torch.backends.cpu.get_cpu_capability()}) runs: {'recomputed' if rule else 'explicit'}")


if __name__ == "__main__":
    main()
