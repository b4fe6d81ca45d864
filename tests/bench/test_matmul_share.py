"""benchmarks/matmul_share_check.py times the matmuls of one Swin-T forward: the list must be that forward's."""

from __future__ import annotations

import sys

import pytest
import timm
import torch
from matmul_share_check import flops, inference_plan, main, swin_t_matmuls
from torch.utils.flop_counter import FlopCounterMode


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_matmuls_timed_are_those_of_a_forward(dtype: torch.dtype) -> None:
    # the reference path, whose ops the counter sees on every CPU (the fast path's CPU flash kernels it does not)
    model = timm.create_model("swinlite_tiny_patch4_window7_224", fast=False).eval()
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 3, 224, 224))
    counts = counter.get_flop_counts()["Global"]
    matmuls = sum(v for op, v in counts.items() if str(op) != "aten.convolution")  # the patch embedding is not timed
    assert flops(*swin_t_matmuls(1, 224, dtype)) == matmuls


def test_bf16_run_reports_both_forms_and_the_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["matmul_share_check.py", "--batch", "1", "--rounds", "1", "--precision", "bf16"])
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():  # an emulated ceiling (2 min here, shares of 4850 %)
        with pytest.raises(SystemExit):
            main()
        assert "--precision bf16 needs a CPU that computes bf16" in capsys.readouterr().err
        return
    main()
    lines = capsys.readouterr().out.splitlines()
    assert ", bf16, " in lines[0]
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "whole-batch addmm",
        f"row blocks ({'oneDNN' if inference_plan(torch.bfloat16, 1).onednn else 'addmm'})",
        "swinlite's whole forward",
    ]
    assert all(line.rstrip().endswith("%") for line in lines[1:3])
    assert lines[3].rstrip().endswith("% of them)")
