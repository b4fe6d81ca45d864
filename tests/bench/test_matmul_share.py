"""benchmarks/matmul_share_check.py times the matmuls of one Swin-T forward: the list must be that forward's."""

from __future__ import annotations

import timm
import torch
from matmul_share_check import flops, swin_t_matmuls
from torch.utils.flop_counter import FlopCounterMode


def test_the_matmuls_timed_are_those_of_a_forward() -> None:
    # the reference path, whose ops the counter sees on every CPU (the fast path's CPU flash kernels it does not)
    model = timm.create_model("swinlite_tiny_patch4_window7_224", fast=False).eval()
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 3, 224, 224))
    counts = counter.get_flop_counts()["Global"]
    matmuls = sum(v for op, v in counts.items() if str(op) != "aten.convolution")  # the patch embedding is not timed
    assert flops(*swin_t_matmuls(1, 224)) == matmuls
