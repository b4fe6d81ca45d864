"""SwinBlock, reference and accelerated, against a naive per-window, per-query loop that removes padded keys
explicitly."""

import pytest
import torch
from reference import naive_block

from swinlite.fast import accelerate
from swinlite.models.swin import BlockOptions, SwinBlock


@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("mask_padding", [True, False])
@pytest.mark.parametrize("fast", [True, False])
def test_block_equals_naive_loop_at_padded_size(shift, mask_padding, fast):
    torch.manual_seed(0)
    block = SwinBlock(8, 2, (4, 4), shift=shift, options=BlockOptions(mask_padding=mask_padding)).eval()
    if fast:
        accelerate(block)
    x = torch.randn(1, 6, 9, 8)  # pads to 8 x 12: partly padded windows, shifted in both dimensions
    with torch.no_grad():
        torch.testing.assert_close(block(x), naive_block(block, x, mask_padding), rtol=1e-5, atol=1e-5)


def test_padded_windows_have_finite_outputs_and_gradients():
    """Windows that hold padding (masked with -inf) must not produce NaNs forward or backward."""
    torch.manual_seed(0)
    block = accelerate(SwinBlock(8, 2, (4, 4), shift=True))
    x = torch.randn(1, 5, 9, 8, requires_grad=True)
    out = block(x)
    out.sum().backward()
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in block.parameters())
