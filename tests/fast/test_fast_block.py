"""The accelerated SwinBlock (swinlite.fast) against the reference block it was built from, values and gradients."""

import copy

import pytest
import torch
from blockkit import values_and_gradients

from swinlite.fast import accelerate
from swinlite.models.swin import BlockOptions, SwinBlock


def block_pair(shift: bool, mask_padding: bool, rel_pos: str) -> tuple[SwinBlock, SwinBlock]:
    torch.manual_seed(0)
    reference = SwinBlock(8, 2, (4, 4), shift=shift, rel_pos=rel_pos, options=BlockOptions(mask_padding=mask_padding))
    return accelerate(copy.deepcopy(reference)), reference


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


@pytest.mark.parametrize("shift", [False, True])
def test_fast_path_under_bf16_autocast_equals_reference_path(shift):
    """CPU bf16 training (explicit attention with the broadcast mask, GELU recompute) against the reference block
    under the same autocast, values and gradients, to bf16 rounding."""
    fast, reference = (b.train() for b in block_pair(shift, mask_padding=True, rel_pos="table"))
    x, grad = torch.randn(2, 5, 9, 8), torch.randn(2, 5, 9, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        results = [values_and_gradients(block, x, grad) for block in (fast, reference)]
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
