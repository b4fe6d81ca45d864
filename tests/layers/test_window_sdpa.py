"""Fused window attention against the softmax formula evaluated window by window in the loop of tests/reference.py."""

import pytest
import torch
from reference import loop_window_attention

from swinlite.layers.window_attention import WindowAttention
from swinlite.layers.window_sdpa import recomputed_window_attention, window_attn_mask

B, NW, H, N, HD = 2, 3, 2, 6, 4


def shift_and_pad_mask():
    mask = torch.zeros(NW, N, N)
    mask[1, :3, 3:] = mask[1, 3:, :3] = -100.0  # two shift regions in window 1
    mask[2, :, -1] = float("-inf")  # a padded key in window 2
    return mask


def assert_recomputed_matches_loop(qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None) -> None:
    """Values and gradients (for qkv and the bias) of the recomputed kernel equal the per-window loop's."""
    grad = torch.randn(B * NW, H, N, HD)
    out = recomputed_window_attention(qkv, bias, mask, B, HD**-0.5)
    out.backward(grad)
    got = (out.detach(), qkv.grad.clone(), bias.grad.clone())
    qkv.grad = bias.grad = None
    expected = loop_window_attention(qkv, bias, mask)
    expected.backward(grad)
    for a, b in zip(got, (expected.detach(), qkv.grad, bias.grad), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_mask", [False, True])
def test_recomputed_attention_matches_loop_in_values_and_gradients(with_mask):
    torch.manual_seed(0)
    qkv = torch.randn(B * NW, N, 3, H, HD, requires_grad=True)
    bias = torch.randn(H, N, N, requires_grad=True)
    mask = shift_and_pad_mask() if with_mask else None
    assert_recomputed_matches_loop(qkv, bias, mask)


def test_window_attn_mask_repeats_the_window_masks_over_the_batch():
    bias, mask = torch.randn(H, N, N), shift_and_pad_mask()
    full = window_attn_mask(bias, mask, B)
    assert full.shape == (B * NW, H, N, N)
    for i in range(B * NW):
        torch.testing.assert_close(full[i], bias + mask[i % NW], rtol=0, atol=0)
    assert window_attn_mask(bias, None, B).shape == (1, H, N, N)


@pytest.mark.parametrize("train", [False, True])
def test_fused_and_explicit_paths_agree(train):
    torch.manual_seed(0)
    fused = WindowAttention(H * HD, H, (2, 3), fused=True).train(train)
    explicit = WindowAttention(H * HD, H, (2, 3), fused=False).train(train)
    explicit.load_state_dict(fused.state_dict())
    x, mask = torch.randn(B, NW, N, H * HD), shift_and_pad_mask()
    outputs = []
    for module in (fused, explicit):
        out = module(x, mask)
        out.square().sum().backward()
        outputs += [out.detach(), module.rel_pos.table.grad, module.qkv.weight.grad]
    for a, b in zip(outputs[:3], outputs[3:], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_sdpa_path_without_bias_gradient_matches_explicit():
    torch.manual_seed(0)
    fused, explicit = WindowAttention(H * HD, H, (2, 3), fused=True), WindowAttention(H * HD, H, (2, 3), fused=False)
    explicit.load_state_dict(fused.state_dict())
    x, mask = torch.randn(B, NW, N, H * HD), shift_and_pad_mask()
    with torch.no_grad():
        torch.testing.assert_close(fused(x, mask), explicit(x, mask), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fused(x, None), explicit(x, None), rtol=1e-5, atol=1e-5)


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
    assert_recomputed_matches_loop(qkv, bias, mask)


def test_training_without_the_private_cpu_flash_op_takes_the_explicit_path(monkeypatch):
    """A torch release without ``_scaled_dot_product_flash_attention_for_cpu`` trains on the explicit path."""
    monkeypatch.setattr("swinlite.layers.window_sdpa.CPU_FLASH_WITH_LSE", False)

    def fail(*args):
        raise AssertionError("the recomputed kernel must not run without its torch op")

    monkeypatch.setattr("swinlite.layers.window_attention.recomputed_window_attention", fail)
    torch.manual_seed(0)
    attn = WindowAttention(H * HD, H, (2, 3), fused=True).train()
    x, mask = torch.randn(B, NW, N, H * HD), shift_and_pad_mask()
    attn(x, mask).square().sum().backward()
    assert attn.rel_pos.table.grad.abs().sum() > 0
