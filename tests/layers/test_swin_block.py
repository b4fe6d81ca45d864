"""SwinBlock against a naive per-window, per-query loop that removes padded keys explicitly, and its fast path
(swinlite.kernels) against its reference path (fast=False), values and gradients."""

import pytest
import torch
from reference import naive_block

from swinlite.layers.swin_block import SwinBlock


@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("mask_padding", [True, False])
@pytest.mark.parametrize("fast", [True, False])
def test_block_equals_naive_loop_at_padded_size(shift, mask_padding, fast):
    torch.manual_seed(0)
    block = SwinBlock(8, 2, (4, 4), shift=shift, mask_padding=mask_padding, fast=fast).eval()
    x = torch.randn(1, 6, 9, 8)  # pads to 8 x 12: partly padded windows, shifted in both dimensions
    with torch.no_grad():
        torch.testing.assert_close(block(x), naive_block(block, x, mask_padding), rtol=1e-5, atol=1e-5)


def test_padded_windows_have_finite_outputs_and_gradients():
    """Windows that hold padding (masked with -inf) must not produce NaNs forward or backward."""
    torch.manual_seed(0)
    block = SwinBlock(8, 2, (4, 4), shift=True)
    x = torch.randn(1, 5, 9, 8, requires_grad=True)
    out = block(x)
    out.sum().backward()
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in block.parameters())


def block_pair(shift: bool, mask_padding: bool, rel_pos: str) -> tuple[SwinBlock, SwinBlock]:
    torch.manual_seed(0)
    kwargs = dict(shift=shift, mask_padding=mask_padding, rel_pos=rel_pos)
    fast, reference = SwinBlock(8, 2, (4, 4), **kwargs), SwinBlock(8, 2, (4, 4), fast=False, **kwargs)
    reference.load_state_dict(fast.state_dict())
    return fast, reference


def values_and_gradients(block: SwinBlock, x: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    x = x.clone().requires_grad_()
    out = block(x)
    out.backward(grad)
    return [out.detach(), x.grad, *(p.grad for p in block.parameters())]


@pytest.mark.parametrize("size", [(5, 9), (8, 8)])  # odd sizes padded to 8 x 12; no padding
@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("mask_padding", [True, False])
@pytest.mark.parametrize("rel_pos", ["table", "cpb"])
@pytest.mark.parametrize("train", [True, False])
def test_fast_path_equals_reference_path(size, shift, mask_padding, rel_pos, train):
    """Fast kernels (gather, recomputed or SDPA attention, GELU recompute) against the plain math, forward and
    backward (input and every parameter); in eval also without autograd (SDPA's flash kernel)."""
    fast, reference = (b.train(train) for b in block_pair(shift, mask_padding, rel_pos))
    x, grad = torch.randn(2, *size, 8), torch.randn(2, *size, 8)
    for a, b in zip(values_and_gradients(fast, x, grad), values_and_gradients(reference, x, grad), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    if not train:
        with torch.no_grad():
            torch.testing.assert_close(fast(x), reference(x), rtol=1e-5, atol=1e-5)
