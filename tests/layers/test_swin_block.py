"""SwinBlock against a naive per-window, per-query loop that removes padded keys explicitly, and its fast path
(swinlite.kernels) against its reference path (fast=False), values and gradients."""

import itertools
import math

import pytest
import torch

from swinlite.layers.swin_block import SwinBlock


def naive_block(block: SwinBlock, x: torch.Tensor, mask_padding: bool) -> torch.Tensor:
    B, H, W, C = x.shape
    wh, ww = block.window
    heads = block.attn.num_heads
    hd = C // heads
    table = block.attn.rel_pos.table
    Hp, Wp = math.ceil(H / wh) * wh, math.ceil(W / ww) * ww
    sh = wh // 2 if block.shift[0] and Hp > wh else 0
    sw = ww // 2 if block.shift[1] and Wp > ww else 0
    y = torch.nn.functional.pad(block.norm1(x), (0, 0, 0, Wp - W, 0, Hp - H))
    y = torch.roll(y, (-sh, -sw), (1, 2))
    # original coordinates and shift regions of every position of the shifted map
    orig_r = [(r + sh) % Hp for r in range(Hp)]
    orig_c = [(c + sw) % Wp for c in range(Wp)]

    def region(p: int, size: int, w: int, s: int) -> int:
        return 0 if p < size - w else (1 if p < size - s else 2) if s else 0

    out = torch.zeros_like(y)
    qkv = block.attn.qkv(y)  # (B, Hp, Wp, 3C)
    for b, i0, j0 in itertools.product(range(B), range(0, Hp, wh), range(0, Wp, ww)):
        pos = [(i0 + a, j0 + c) for a in range(wh) for c in range(ww)]
        for qi, qj in pos:
            for h in range(heads):
                q = qkv[b, qi, qj, h * hd : (h + 1) * hd] * hd**-0.5
                logits, values = [], []
                for ki, kj in pos:
                    if mask_padding and not (orig_r[ki] < H and orig_c[kj] < W):
                        continue  # padded key: not attended at all
                    k = qkv[b, ki, kj, C + h * hd : C + (h + 1) * hd]
                    v = qkv[b, ki, kj, 2 * C + h * hd : 2 * C + (h + 1) * hd]
                    dh, dw = (qi - i0) - (ki - i0), (qj - j0) - (kj - j0)
                    bias = table[(dh + wh - 1) * (2 * ww - 1) + (dw + ww - 1), h]
                    same = region(qi, Hp, wh, sh) == region(ki, Hp, wh, sh) and region(qj, Wp, ww, sw) == region(
                        kj, Wp, ww, sw
                    )
                    logits.append(q @ k + bias + (0.0 if same else -100.0))
                    values.append(v)
                weights = torch.softmax(torch.stack(logits), 0)
                out[b, qi, qj, h * hd : (h + 1) * hd] = weights @ torch.stack(values)
    out = block.attn.proj(out)
    out = torch.roll(out, (sh, sw), (1, 2))[:, :H, :W]
    x = x + out
    return x + block.mlp(block.norm2(x))


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
