"""The dispatch table of swinlite.kernels.dispatch, row by row, and what a block runs in each situation."""

import pytest
import torch

from swinlite.kernels import dispatch
from swinlite.kernels.dispatch import select_attention_kernel
from swinlite.layers.swin_block import WindowAttention

F32, BF16 = torch.float32, torch.bfloat16


@pytest.mark.parametrize(
    "fast,device,dtype,bias_grad,dropout,expected",
    [
        (False, "cpu", F32, True, False, "explicit"),  # fast=False: the reference, everywhere
        (False, "cuda", F32, False, False, "explicit"),
        (True, "cpu", F32, False, False, "sdpa"),  # eval / no_grad / frozen bias
        (True, "cuda", BF16, False, False, "sdpa"),
        (True, "cpu", F32, True, False, "recomputed"),  # CPU fp32 train
        (True, "cpu", F32, True, True, "explicit"),  # ... with attention dropout
        (True, "cpu", BF16, True, False, "explicit"),  # CPU bf16 train
        (True, "cuda", F32, True, False, "sdpa"),  # CUDA train: bias + mask as SDPA's attn_mask
        (True, "cuda", BF16, True, True, "sdpa"),
    ],
)
def test_dispatch_table(fast, device, dtype, bias_grad, dropout, expected):
    assert select_attention_kernel(fast, device, dtype, bias_grad, dropout) == expected


def test_without_the_private_cpu_flash_op_cpu_training_is_explicit(monkeypatch):
    monkeypatch.setattr(dispatch.window_sdpa, "CPU_FLASH_WITH_LSE", False)
    assert select_attention_kernel(True, "cpu", F32, True, False) == "explicit"


def test_torchscript_runs_sdpa_or_explicit():
    scripted = torch.jit.script(select_attention_kernel)
    assert scripted(True, "cpu", F32, False, False) == "sdpa"
    assert scripted(True, "cpu", F32, True, False) == "explicit"  # no autograd Functions in TorchScript


@pytest.mark.parametrize(
    "fast,grad,expected", [(True, False, "sdpa"), (True, True, "recomputed"), (False, True, "explicit")]
)
def test_window_attention_runs_the_selected_kernel(monkeypatch, fast, grad, expected):
    """The layer asks the dispatcher with its own state (grad mode, device, dtype) and runs its answer."""
    calls = []

    def spy(*args):
        calls.append(select_attention_kernel(*args))
        return calls[-1]

    monkeypatch.setattr("swinlite.layers.swin_block.select_attention_kernel", spy)
    attn = WindowAttention(8, 2, (2, 3), fast=fast)
    with torch.set_grad_enabled(grad):
        attn(torch.randn(2, 3, 6, 8))
    assert calls == [expected]
