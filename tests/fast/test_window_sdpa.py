"""Window attention kernels against the softmax formula evaluated window by window in the loop of tests/reference.py."""

from functools import partial

import pytest
import torch
from reference import assert_attention_matches_loop, hand_written_mask

from swinlite.fast.window_sdpa import recomputed_window_attention, sdpa_window_attention

B, NW, H, N, HD = 2, 3, 2, 6, 4
RECOMPUTED = partial(recomputed_window_attention, batch=B, scale=HD**-0.5)


def shift_and_pad_mask() -> torch.Tensor:
    return hand_written_mask(NW, N)


@pytest.mark.parametrize("with_mask", [False, True])
def test_recomputed_attention_matches_loop_in_values_and_gradients(with_mask):
    torch.manual_seed(0)
    qkv = torch.randn(B * NW, N, 3, H, HD, requires_grad=True)
    bias = torch.randn(H, N, N, requires_grad=True)
    mask = shift_and_pad_mask() if with_mask else None
    assert_attention_matches_loop(RECOMPUTED, qkv, bias, mask)


@pytest.mark.parametrize("with_mask", [False, True])
def test_sdpa_with_a_trainable_bias_matches_loop_in_values_and_gradients(with_mask):
    """The CUDA training path (bias and mask as SDPA's attn_mask); on CPU SDPA's math fallback runs it."""
    torch.manual_seed(0)
    qkv = torch.randn(B * NW, N, 3, H, HD, requires_grad=True)
    bias = torch.randn(H, N, N, requires_grad=True)
    mask = shift_and_pad_mask() if with_mask else None
    assert_attention_matches_loop(
        partial(sdpa_window_attention, batch=B, scale=HD**-0.5, dropout_p=0.0), qkv, bias, mask
    )


def test_recomputed_attention_flushing_subnormal_weights_matches_loop():
    """Peaked logits and the -100 shift mask give weights below 2^-126, which the kernel flushes to zero
    (x86 kernels slow down tens of times on subnormals); values and gradients still match the loop.

    (The kernel masks with -inf: it departs from -100 only where a masked logit exceeds every unmasked
    one of its row by more than ~83, which logits spread over tens, as here, do not reach.)"""
    torch.manual_seed(0)
    qkv = (torch.randn(B * NW, N, 3, H, HD) * 3).requires_grad_()  # logits spread over tens
    bias = torch.randn(H, N, N, requires_grad=True)
    mask = shift_and_pad_mask()
    q, k = qkv.detach()[:, :, 0].transpose(1, 2), qkv.detach()[:, :, 1].transpose(1, 2)  # (B*nW, H, N, HD)
    logits = q @ k.transpose(-2, -1) * HD**-0.5 + bias.detach() + mask.repeat(B, 1, 1)[:, None]
    probs = logits.softmax(-1)
    assert ((probs > 0) & (probs < torch.finfo(torch.float32).tiny)).any(), "expected subnormal weights"
    assert_attention_matches_loop(RECOMPUTED, qkv, bias, mask)
