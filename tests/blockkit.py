"""A fast block against the reference block it was built from: their outputs and gradients, side by side."""

from __future__ import annotations

import copy

import torch
from torch import nn

from swinlite.fast import accelerate
from swinlite.models.swin import SwinBlock


def values_and_gradients(block: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    """block(x), then after ``backward(grad)`` the gradients to x and to every parameter (earlier ones cleared)."""
    block.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_()
    out = block(x)
    out.backward(grad)
    return [out.detach(), x.grad, *(p.grad for p in block.parameters())]


def assert_fast_block_matches_reference(shift: bool, tol: float = 1e-5) -> None:
    """A SwinBlock (8 channels, 2 heads, 4x4 windows, shifted or not) and its accelerated copy, on a 5x9 map padded
    to 8x12: the same values and gradients, whatever kernel the fast block's table picks."""
    torch.manual_seed(0)
    reference = SwinBlock(8, 2, (4, 4), shift=shift)
    fast = accelerate(copy.deepcopy(reference))
    x, grad = torch.randn(2, 5, 9, 8), torch.randn(2, 5, 9, 8)
    for a, b in zip(values_and_gradients(fast, x, grad), values_and_gradients(reference, x, grad), strict=True):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def assert_same_drops(fast: nn.Module, reference: nn.Module) -> None:
    """Stochastic depth in training (both blocks in train mode): from the same random state the fast block drops the
    residual branches of the samples the reference block drops (values and gradients); from another state, others."""
    x, grad = torch.randn(8, 5, 9, 8), torch.randn(8, 5, 9, 8)
    results = []
    for block in (fast, reference):
        torch.manual_seed(1)
        results.append(values_and_gradients(block, x, grad))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.manual_seed(2)
    assert not torch.allclose(fast(x), results[0][0])  # the drops depend on the random state: stochastic depth ran
