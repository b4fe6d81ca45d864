"""The reference window attention (the explicit formula) and the additive term it shares with the fast kernels,
against the softmax formula evaluated window by window in the loop of tests/reference.py."""

from functools import partial

import pytest
import torch
from reference import assert_attention_matches_loop, hand_written_mask

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
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_explicit_attention_matches_loop_in_values_and_gradients(with_mask, dtype, tol):
    """The reference formula, which the fast path also runs where no fused kernel fits (CPU bf16 training)."""
    torch.manual_seed(0)
    qkv = torch.randn(B * NW, N, 3, H, HD, dtype=dtype, requires_grad=True)
    bias = torch.randn(H, N, N, dtype=dtype, requires_grad=True)
    mask = hand_written_mask(NW, N).to(dtype) if with_mask else None  # -100 between regions, -inf on a padded key
    kernel = partial(window_attention, batch=B, scale=HD**-0.5, dropout_p=0.0)
    assert_attention_matches_loop(kernel, qkv, bias, mask, tol)


def test_scripted_explicit_attention_matches_eager():
    torch.manual_seed(0)
    qkv, bias, mask = torch.randn(B * NW, N, 3, H, HD), torch.randn(H, N, N), hand_written_mask(NW, N)
    scripted = torch.jit.script(window_attention)
    torch.testing.assert_close(scripted(qkv, bias, mask, B, 0.5, 0.0), window_attention(qkv, bias, mask, B, 0.5, 0.0))
