"""Double backward (``create_graph=True``, then backward) on the fast path raises swinlite's error naming
``fast=False`` (swinlite.fast.first_order), from every gradient kernel that computes first derivatives only, before
any ``out=`` op of theirs fails with torch's own message; ``fast=False`` runs it."""

import re

import pytest
import timm
import torch

from swinlite.fast import blocks, window_triton
from swinlite.fast.first_order import DOUBLE_BACKWARD_ERROR
from swinlite.fast.gelu_linear import gelu_linear
from swinlite.fast.linear_grad import onednn_linear_with_grad
from swinlite.fast.row_blocks import ONEDNN_LINEAR
from swinlite.fast.window_sdpa import CPU_FLASH_WITH_LSE, recomputed_window_attention

REFUSED = re.escape(DOUBLE_BACKWARD_ERROR)
NAME = "swinlite_pico_patch2_window4_32"


def _input_gradient_with_graph(model: torch.nn.Module) -> torch.Tensor:
    x = torch.randn(1, 3, 32, 32, requires_grad=True)
    (grad,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    return grad


def test_the_fast_model_refuses_double_backward_naming_fast_false():
    torch.manual_seed(0)
    with pytest.raises(RuntimeError, match=REFUSED):
        _input_gradient_with_graph(timm.create_model(NAME).train()).sum().backward()


def test_the_reference_model_runs_double_backward():
    torch.manual_seed(0)
    model = timm.create_model(NAME, fast=False).train()
    _input_gradient_with_graph(model).square().sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(g.isfinite().all() for g in grads)


@pytest.mark.skipif(not CPU_FLASH_WITH_LSE, reason="no CPU flash op with its log-sum-exp")
def test_a_second_backward_through_one_graph_gives_the_reference_gradients(monkeypatch):
    """``backward(retain_graph=True)`` then ``backward()`` again at batch 1 with a 1x1 last stage map (one window of
    one token): the recomputed attention's backward wrote into the qkv it saved (``.contiguous()`` returned that
    already contiguous view, not a copy), and the second backward raised "modified by an inplace operation"."""
    monkeypatch.setattr(blocks, "RECOMPUTED_ON_THIS_CPU", True)  # the recomputed kernel on an AVX2 CPU too
    torch.manual_seed(0)
    fast, reference = timm.create_model(NAME).train(), timm.create_model(NAME, fast=False).train()
    reference.load_state_dict(fast.state_dict())
    x = torch.randn(1, 3, 16, 16)  # stage maps 8, 4, 2, 1
    grads = []
    for model in (fast, reference):
        loss = model(x).square().sum()
        loss.backward(retain_graph=True)
        first = [p.grad.clone() for p in model.parameters()]
        loss.backward()
        grads.append(first + [p.grad for p in model.parameters()])  # the second accumulates twice the first
    for ours, theirs in zip(*grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def _gelu_linear(onednn: bool) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.randn(5, 8, requires_grad=True)
    return gelu_linear(h, torch.randn(4, 8), torch.randn(4), onednn=onednn), h


def _onednn_linear() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(5, 8, requires_grad=True)
    return onednn_linear_with_grad(x, torch.randn(4, 8), torch.randn(4)), x


def _recomputed_attention() -> tuple[torch.Tensor, torch.Tensor]:
    qkv = torch.randn(2, 4, 3, 2, 8, requires_grad=True)  # (B*nW, N, 3, heads, hd)
    return recomputed_window_attention(qkv, torch.randn(2, 4, 4), None, 2, 8**-0.5), qkv


needs_onednn = pytest.mark.skipif(not ONEDNN_LINEAR, reason="PyTorch built without oneDNN")
KERNELS = [
    pytest.param(lambda: _gelu_linear(False), id="gelu_recompute"),
    pytest.param(lambda: _gelu_linear(True), id="gelu_recompute_onednn", marks=needs_onednn),
    pytest.param(_onednn_linear, id="onednn_linear", marks=needs_onednn),
    pytest.param(
        _recomputed_attention,
        id="recomputed_attention",
        marks=pytest.mark.skipif(not CPU_FLASH_WITH_LSE, reason="no CPU flash op with its log-sum-exp"),
    ),
]


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_kernel_refuses_a_gradient_with_graph_and_gives_one_without(kernel):
    out, x = kernel()
    (grad,) = torch.autograd.grad(out.sum(), x, retain_graph=True)
    assert grad.isfinite().all()
    with pytest.raises(RuntimeError, match=REFUSED):
        torch.autograd.grad(out.sum(), x, create_graph=True)


@pytest.mark.skipif(not window_triton.TRITON_AVAILABLE, reason="no Triton")
def test_the_triton_kernels_backward_refuses_before_launching():
    with torch.enable_grad(), pytest.raises(RuntimeError, match=REFUSED):  # as autograd runs it for create_graph
        window_triton._backward(None, torch.zeros(1), None)
