"""Naive-loop oracles the tests compare swinlite against: the formulas, one window, pair or token at a time; and the
official release's checkpoint layout, written from timm's.

They read a module's weights but none of its code paths, so a kernel and its oracle share nothing but the math (and
the release layout nothing but the key names with swinlite's converter).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from swinlite.models.swin import SwinBlock, SwinV2Block
    from swinlite.seq import RelPosSelfAttention1d


def naive_windows(x: torch.Tensor, window: tuple[int, int]) -> list[torch.Tensor]:
    """Windows of a [B, H, W, C] map by explicit slicing, row-major over windows and tokens."""
    wh, ww = window
    out = []
    for i in range(0, x.shape[1], wh):
        for j in range(0, x.shape[2], ww):
            out.append(x[:, i : i + wh, j : j + ww].reshape(x.shape[0], wh * ww, -1))
    return out


def reference_shift_mask(padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int]) -> torch.Tensor:
    """The Swin paper's construction: label 9 regions with slices, partition, compare labels."""
    img = torch.zeros(1, *padded, 1)
    cnt = 0
    hs = (slice(0, -window[0]), slice(-window[0], -shift[0]), slice(-shift[0], None))
    ws = (slice(0, -window[1]), slice(-window[1], -shift[1]), slice(-shift[1], None))
    for h in hs:
        for w in ws:
            img[:, h, w, :] = cnt
            cnt += 1
    labels = torch.stack(naive_windows(img, window), 1)[0, :, :, 0]  # (nW, N)
    diff = labels[:, None, :] - labels[:, :, None]
    return torch.where(diff != 0, torch.tensor(-100.0), torch.tensor(0.0))


def naive_shifted_windows(x: torch.Tensor, window: tuple[int, int], shift: tuple[int, int]) -> torch.Tensor:
    """[B, H, W, C] -> [B, nW*N, C]: token (a, b) of window (i, j) of the map rolled by (-sh, -sw)."""
    B, H, W, C = x.shape
    tokens = []
    for i in range(H // window[0]):
        for j in range(W // window[1]):
            for a in range(window[0]):
                for b in range(window[1]):
                    tokens.append(x[:, (i * window[0] + a + shift[0]) % H, (j * window[1] + b + shift[1]) % W])
    return torch.stack(tokens, dim=1)


def hand_written_mask(num_windows: int, n: int) -> torch.Tensor:
    """A (nW >= 3, N >= 4, N) additive mask written by hand: two shift regions in window 1, a padded key in window 2."""
    mask = torch.zeros(num_windows, n, n)
    mask[1, :3, 3:] = mask[1, 3:, :3] = -100.0  # two shift regions in window 1
    mask[2, :, -1] = float("-inf")  # a padded key in window 2
    return mask


def loop_window_attention(
    qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, scale: float | None = None
) -> torch.Tensor:
    """softmax(q kᵀ · scale + bias + mask[w]) v, one (window, head) at a time.

    Args:
        qkv: [B*nW, N, 3, H, d], windows batch-major.
        bias: [H, N, N].
        mask: [nW, N, N] (window w of every image gets ``mask[w]``) or None.
        scale: logit scale; default 1/√d.

    Returns:
        [B*nW, H, N, d].
    """
    windows, N, _, H, d = qkv.shape
    scale = d**-0.5 if scale is None else scale
    out = qkv.new_empty(windows, H, N, d)
    for i in range(windows):
        for h in range(H):
            q, k, v = qkv[i, :, 0, h], qkv[i, :, 1, h], qkv[i, :, 2, h]
            logits = q @ k.T * scale + bias[h] + (0 if mask is None else mask[i % mask.shape[0]])
            out[i, h] = logits.softmax(-1) @ v
    return out


def assert_attention_matches_loop(
    kernel: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor],
    qkv: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    tol: float = 1e-5,
) -> None:
    """``kernel(qkv, bias, mask)`` equals :func:`loop_window_attention` in value and in the gradients to qkv and bias.

    Args:
        kernel: a window attention at the default scale, [B*nW, N, 3, H, d] -> [B*nW, H, N, d].
        qkv, bias: leaves that require grad; mask: [nW, N, N] or None.
        tol: rtol and atol of the comparison.
    """
    out = kernel(qkv, bias, mask)
    grad = torch.randn_like(out)
    out.backward(grad)
    got = (out.detach(), qkv.grad.clone(), bias.grad.clone())
    qkv.grad = bias.grad = None
    expected = loop_window_attention(qkv, bias, mask)
    expected.backward(grad)
    for a, b in zip(got, (expected.detach(), qkv.grad, bias.grad), strict=True):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def naive_block(block: SwinBlock, x: torch.Tensor, mask_padding: bool) -> torch.Tensor:
    """A Swin block on [B, H, W, C], one window, query, head and key at a time, reading the block's weights.

    Pads, rolls, labels the shift regions by coordinates (not by the library's mask) and, with
    ``mask_padding``, drops padded keys from the softmax outright.
    """
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


def naive_v2_block(block: SwinV2Block, x: torch.Tensor, mask_padding: bool) -> torch.Tensor:
    """A Swin-V2 block on [B, H, W, C], one window, query and head at a time, reading the block's weights.

    Written from the paper's formulas: the continuous position bias ``16 * sigmoid(MLP(log-spaced offset))`` with
    the offset normalised per axis by (pretrained window - 1), scaled cosine attention with τ = exp(min(logit
    scale, log 100)), q and v biases (none for k), res-post-norm (``x + norm1(attn(x))``, ``x + norm2(mlp(x))``).
    Pads, rolls, labels the shift regions by coordinates and drops padded keys (``mask_padding``) as
    :func:`naive_block` does.
    """
    B, H, W, C = x.shape
    attn = block.attn
    wh, ww = block.window
    pwh, pww = attn.rel_pos.pretrained_window or block.window
    heads = attn.num_heads
    hd = C // heads
    Hp, Wp = math.ceil(H / wh) * wh, math.ceil(W / ww) * ww
    sh = wh // 2 if block.shift[0] and Hp > wh else 0
    sw = ww // 2 if block.shift[1] and Wp > ww else 0
    y = torch.roll(torch.nn.functional.pad(x, (0, 0, 0, Wp - W, 0, Hp - H)), (-sh, -sw), (1, 2))
    orig_r = [(r + sh) % Hp for r in range(Hp)]
    orig_c = [(c + sw) % Wp for c in range(Wp)]

    def region(p: int, size: int, w: int, s: int) -> int:
        return 0 if p < size - w else (1 if p < size - s else 2) if s else 0

    def log_spaced(d: int, pretrained: int) -> float:  # in float32, as the reference computes the coordinates
        t = torch.tensor(float(d)) / max(pretrained - 1, 1) * 8
        return float(torch.sign(t) * torch.log2(t.abs() + 1) / math.log2(8))

    def cpb(dh: int, dw: int) -> torch.Tensor:  # (heads,)
        coords = torch.tensor([log_spaced(dh, pwh), log_spaced(dw, pww)], dtype=x.dtype)
        return 16 * torch.sigmoid(attn.rel_pos.mlp(coords))

    bias = {(dh, dw): cpb(dh, dw) for dh in range(1 - wh, wh) for dw in range(1 - ww, ww)}
    zeros = torch.zeros(C, dtype=x.dtype)
    q_w, k_w, v_w = attn.qkv.weight.split(C)
    q_b, v_b = (attn.q_bias, attn.v_bias) if attn.q_bias is not None else (zeros, zeros)
    q_all, k_all, v_all = y @ q_w.T + q_b, y @ k_w.T, y @ v_w.T + v_b  # (B, Hp, Wp, C): no key bias
    tau = torch.minimum(attn.logit_scale.flatten(), torch.tensor(math.log(100.0), dtype=x.dtype)).exp()
    out = torch.zeros(B, Hp, Wp, C, dtype=x.dtype)
    for b, i0, j0 in itertools.product(range(B), range(0, Hp, wh), range(0, Wp, ww)):
        pos = [(i0 + a, j0 + c) for a in range(wh) for c in range(ww)]
        keys = [(i, j) for i, j in pos if not mask_padding or (orig_r[i] < H and orig_c[j] < W)]
        k = torch.stack([k_all[b, i, j] for i, j in keys])  # (keys, C)
        v = torch.stack([v_all[b, i, j] for i, j in keys])
        for qi, qj in pos:
            offsets = torch.stack([bias[qi - ki, qj - kj] for ki, kj in keys])  # (keys, heads)
            regions = [(region(i, Hp, wh, sh), region(j, Wp, ww, sw)) for i, j in [(qi, qj), *keys]]
            shifted = torch.tensor([0.0 if r == regions[0] else -100.0 for r in regions[1:]], dtype=x.dtype)
            for h in range(heads):
                cut = slice(h * hd, (h + 1) * hd)
                qh, kh = q_all[b, qi, qj, cut], k[:, cut]
                cosine = (kh @ qh) / (kh.norm(dim=1).clamp_min(1e-12) * qh.norm().clamp_min(1e-12))  # (keys,)
                logits = tau[h] * cosine + offsets[:, h] + shifted
                out[b, qi, qj, cut] = torch.softmax(logits, 0) @ v[:, cut]
    out = attn.proj(out)
    out = torch.roll(out, (sh, sw), (1, 2))[:, :H, :W]
    x = x + block.norm1(out)
    return x + block.norm2(block.mlp(x))


def naive_rel_pos_attention_1d(
    attn: RelPosSelfAttention1d, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None, causal: bool = False
) -> torch.Tensor:
    """Shaw et al. relative attention on [B, L, C], one query at a time, reading the module's weights.

    For query i and every key j: ``r = clamp(j - i, -D, D) + D``, logits ``q_i . (k_j + rel_k[r]) / sqrt(d)``
    (bias mode: ``q_i . k_j / sqrt(d) + table[clamp(i - j, -D, D) + D]``), blocked keys at -inf, softmax over j,
    output ``sum_j a_ij (v_j + rel_v[r])``.
    """
    B, L, C = x.shape
    H, d, D = attn.num_heads, C // attn.num_heads, attn.max_distance
    q, k, v = (lin(x).view(B, L, H, d) for lin in (attn.q, attn.k, attn.v))  # (B, L, H, d)
    keys = torch.arange(L)
    out = []
    for i in range(L):
        r = (keys - i).clamp(-D, D) + D  # (L,) embedding row of each key
        if attn.mode == "shaw":
            logits = (q[:, i, None] * (k + attn.rel_k.weight[r][:, None])).sum(-1) / math.sqrt(d)  # (B, L, H)
        else:
            logits = (q[:, i, None] * k).sum(-1) / math.sqrt(d) + attn.rel_bias.table[(i - keys).clamp(-D, D) + D]
        blocked = torch.zeros(B, L, dtype=torch.bool) if key_padding_mask is None else key_padding_mask.clone()
        if causal:
            blocked |= keys > i
        weights = logits.masked_fill(blocked[..., None], float("-inf")).softmax(1)  # (B, L, H)
        values = v + (attn.rel_v.weight[r][:, None] if attn.rel_v is not None else 0)  # (B, L, H, d)
        out.append((weights[..., None] * values).sum(1))  # (B, H, d)
    return attn.proj(torch.stack(out, 1).reshape(B, L, C))


def as_microsoft_release(
    timm_state: Mapping[str, torch.Tensor], window: int | None = None, coords: Mapping[str, torch.Tensor] | None = None
) -> dict[str, dict[str, torch.Tensor]]:
    """timm's Swin or Swin-V2 state dict as the official release saves it: downsample at the end of a stage, ``head.*``,
    the state dict under ``"model"``.

    With ``window``, also the buffers the release saves and the converters drop by name, zeros of that window's
    shapes (N = window²): every block's ``relative_position_index`` (N, N), a shifted (odd) block's ``attn_mask``
    (1, N, N). ``coords``: the buffers of the timm Swin-V2 (``dict(model.named_buffers())``), whose blocks'
    ``relative_coords_table`` (1, 2w - 1, 2w - 1, 2; the release's own, which swinlite compares with its model's) the
    file holds too.
    """
    out = {}
    for key, value in timm_state.items():
        key = re.sub(r"^layers\.(\d+)\.downsample", lambda m: f"layers.{int(m.group(1)) - 1}.downsample", key)
        out[key.replace("head.fc.", "head.")] = value
    out |= {k: v for k, v in (coords or {}).items() if k.endswith(".attn.relative_coords_table")}
    if window is None:
        return {"model": out}
    n = window * window
    for key in timm_state:
        if m := re.match(r"^(layers\.\d+\.blocks\.(\d+)\.)attn\.(relative_position_bias_table|logit_scale)$", key):
            block = m.group(1)
            out[block + "attn.relative_position_index"] = torch.zeros(n, n, dtype=torch.long)
            if int(m.group(2)) % 2 == 1:
                out[block + "attn_mask"] = torch.zeros(1, n, n)
    return {"model": out}
