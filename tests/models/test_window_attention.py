"""The reference window attention (the explicit formula) and the additive term it shares with the fast kernels,
against the softmax formula evaluated window by window in the loop of tests/reference.py."""

import pytest
import torch
from reference import hand_written_mask, loop_window_attention

from swinlite.models.swin import window_attention, window_attn_mask

B, NW, H, N, HD = 2, 3, 2, 6, 4


def test_window_attn_mask_repeats_the_window_masks_over_the_batch():
    bias, mask = torch.randn(H, N, N), hand_written_mask(NW, N)
    full = window_attn_mask(bias, mask, B)
    assert full.shape == (B * NW, H, N, N)
    for i in range(B * NW):
        torch.testing.assert_close(full[i], bias + mask[i % NW], rtol=0, atol=0)
    assert window_attn_mask(bias, None, B).shape == (1, H, N, N)


@pytest.mark.parametrize("with_mask", [False, True])
def test_explicit_attention_matches_loop_in_values_and_gradients(with_mask):
    torch.manual_seed(0)
    qkv = torch.randn(B * NW, N, 3, H, HD, requires_grad=True)
    bias = torch.randn(H, N, N, requires_grad=True)
    mask = hand_written_mask(NW, N) if with_mask else None
    grad = torch.randn(B * NW, H, N, HD)
    out = window_attention(qkv, bias, mask, B, HD**-0.5, 0.0)
    out.backward(grad)
    got = (out.detach(), qkv.grad.clone(), bias.grad.clone())
    qkv.grad = bias.grad = None
    expected = loop_window_attention(qkv, bias, mask)
    expected.backward(grad)
    for a, b in zip(got, (expected.detach(), qkv.grad, bias.grad), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
