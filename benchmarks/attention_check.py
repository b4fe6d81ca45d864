"""swinlite's CPU fp32 attention kernels, each against the other candidate on the same model and against timm,
timed alternately: the train step with the recomputed kernel and with the explicit one, and inference (row blocks)
with SDPA's flash kernel and with the explicit softmax.

Training switches by patching ``swinlite.fast.blocks.RECOMPUTED_ON_THIS_CPU`` (the rule of the dispatch table in
swinlite/fast/blocks.py); inference by handing ``swinlite.fast.row_blocks`` an ``F`` whose
``scaled_dot_product_attention`` is the explicit formula written into reused tensors. Figures: benchmarks/kernels.md.

    python benchmarks/attention_check.py
"""

from __future__ import annotations

import argparse
import sys
import types
from functools import partial
from pathlib import Path

import timm
import torch
import torch.nn.functional as F

import swinlite.fast.blocks as fast_blocks
import swinlite.fast.row_blocks as row_blocks

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.timing import line_with_setting  # noqa: E402

BATCH, TRAIN_ROUNDS, INFERENCE_ROUNDS = 8, 9, 11  # 224², fp32


def train_step(model: torch.nn.Module, x: torch.Tensor) -> None:
    """One forward + cross-entropy + backward."""
    F.cross_entropy(model(x), torch.zeros(x.shape[0], dtype=torch.long)).backward()
    model.zero_grad(set_to_none=True)


@torch.inference_mode()
def inference(model: torch.nn.Module, x: torch.Tensor) -> None:
    model(x)


def explicit_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """softmax(q kᵀ · scale + attn_mask) v, the logits scaled and masked in place: (windows, heads, N, hd)."""
    logits = torch.matmul(q, k.transpose(-2, -1))  # (windows, heads, N, N)
    return torch.matmul(logits.mul_(scale).add_(attn_mask).softmax(-1), v)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options: --help, typos exit 2
    rule = fast_blocks.RECOMPUTED_ON_THIS_CPU
    torch.manual_seed(0)
    lite = timm.create_model("swinlite_tiny_patch4_window7_224", drop_path_rate=0.0)
    reference = timm.create_model("swin_tiny_patch4_window7_224", drop_path_rate=0.0)
    threads = torch.get_num_threads()
    explicit = types.SimpleNamespace(scaled_dot_product_attention=explicit_attention)
    for batch in (BATCH, 1):
        x = torch.randn(batch, 3, 224, 224)
        cases = {"sdpa": (partial(inference, lite.eval(), x), F), "explicit": (partial(inference, lite, x), explicit)}
        cases["timm"] = (partial(inference, reference.eval(), x), F)
        line = line_with_setting(row_blocks, "F", cases, 2, INFERENCE_ROUNDS, "timm")
        print(f"inference, batch {batch} at 224x224, fp32, {threads} threads, median of {INFERENCE_ROUNDS}: {line}")
    x = torch.randn(BATCH, 3, 224, 224)
    lite_step, timm_step = partial(train_step, lite.train(), x), partial(train_step, reference.train(), x)
    cases = {"recomputed": (lite_step, True), "explicit": (lite_step, False), "timm": (timm_step, rule)}
    line = line_with_setting(fast_blocks, "RECOMPUTED_ON_THIS_CPU", cases, 1, TRAIN_ROUNDS, "timm")
    print(f"train step, batch {BATCH} at 224x224, fp32, {threads} threads, median of {TRAIN_ROUNDS}: {line}")
    print(f"this CPU ({torch.backends.cpu.get_cpu_capability()}) trains with: {'recomputed' if rule else 'explicit'}")


if __name__ == "__main__":
    main()
