"""Benchmark of 1-D relative position attention: vectorised Shaw vs the double-loop formulation vs plain attention.

The double loop is the formulation found in hand-written code: relative logits per offset
``q_i . rel_k[m]``, moved into the (i, j) grid by a Python loop over every pair. It is too slow to
run at the full length, so it is timed at ``loop_seq_len`` and extrapolated to ``seq_len`` as
``t * (seq_len / loop_seq_len) ** 2``: both its Python loop (L**2 iterations of constant cost) and
its matmuls grow as L**2 at fixed batch and width; growth faster than that (cache misses) would only
make the real loop slower, so the extrapolation is conservative. The growth exponent measured
between ``loop_seq_len // 2`` and ``loop_seq_len`` is reported in the row's note as a check.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..layers.rel_pos_attn1d import RelPosSelfAttention1d
from .timing import interleaved_median_seconds, median_seconds


def _qkv(attn: RelPosSelfAttention1d, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    B, L, _ = x.shape
    return tuple(lin(x).view(B, L, attn.num_heads, attn.head_dim).transpose(1, 2) for lin in (attn.q, attn.k, attn.v))


def plain_attention(attn: RelPosSelfAttention1d, x: torch.Tensor) -> torch.Tensor:
    """Softmax attention with the same projections and no relative terms (the speed floor)."""
    q, k, v = _qkv(attn, x)  # (B, H, L, d)
    out = F.scaled_dot_product_attention(q, k, v)
    return attn.proj(out.transpose(1, 2).flatten(2))  # (B, L, C)


def double_loop_attention(attn: RelPosSelfAttention1d, x: torch.Tensor) -> torch.Tensor:
    """Shaw attention (key term) with relative logits shifted into place by a Python loop over (i, j)."""
    L = x.shape[1]
    q, k, v = _qkv(attn, x)  # (B, H, L, d)
    D = attn.max_distance
    table = attn.rel_k.weight[torch.arange(-(L - 1), L).clamp(-D, D) + D]  # (2L-1, d), row j - i + L - 1
    rel = q @ table.T  # (B, H, L, 2L-1)
    rel_logits = torch.empty_like(rel[..., :L])  # (B, H, L, L)
    for i in range(L):
        for j in range(L):
            rel_logits[:, :, i, j] = rel[:, :, i, j - i + L - 1]
    attn_weights = ((q @ k.transpose(-2, -1) + rel_logits) * attn.head_dim**-0.5).softmax(dim=-1)
    return attn.proj((attn_weights @ v).transpose(1, 2).flatten(2))  # (B, L, C)


def rel_pos_1d_rows(
    seq_len: int = 1024,
    dim: int = 512,
    num_heads: int = 8,
    batch: int = 4,
    loop_seq_len: int = 128,
    warmup: int = 1,
    repeats: int = 5,
) -> list[dict[str, Any]]:
    """Time forward passes (no grad, CPU, float32) of each formulation.

    Args:
        seq_len: sequence length L of the main comparison.
        dim: channels C.
        num_heads: attention heads.
        batch: batch size B.
        loop_seq_len: length at which the double loop is timed (and half of it, for the exponent).
        warmup: untimed runs before timing.
        repeats: timed runs; the median is reported.

    Returns:
        One dict per row: ``name``, ``seq_len``, ``ms`` (median milliseconds), ``vs_plain`` (time over
        plain attention at ``seq_len``, None for loop rows timed at other lengths), ``measured`` (False
        for the extrapolated row) and ``note``.
    """
    torch.manual_seed(0)
    x = torch.randn(batch, seq_len, dim)
    variants = {
        "plain attention (SDPA, no relative terms)": None,
        "shaw, key term, auto": dict(method="auto"),
        "shaw, key term, gather (L, L, d)": dict(method="gather"),
        "shaw, key term, skew": dict(method="skew"),
        "shaw, key + value terms, auto": dict(method="auto", value_rel=True),
        "per-head scalar bias": dict(mode="bias"),
    }
    fns = []
    for kwargs in variants.values():
        attn = RelPosSelfAttention1d(dim, num_heads, seq_len, **(kwargs or {})).eval()
        fns.append(_no_grad(lambda a=attn: plain_attention(a, x)) if kwargs is None else _no_grad(lambda a=attn: a(x)))
    seconds = interleaved_median_seconds(fns, warmup=warmup, repeats=repeats)
    rows = [
        dict(name=name, seq_len=seq_len, ms=1e3 * s, vs_plain=s / seconds[0], measured=True, note="")
        for name, s in zip(variants, seconds, strict=True)
    ]
    return rows + _loop_rows(dim, num_heads, batch, seq_len, loop_seq_len, seconds[1], warmup, repeats)


def _loop_rows(
    dim: int, num_heads: int, batch: int, seq_len: int, loop_len: int, auto_s: float, warmup: int, repeats: int
) -> list[dict[str, Any]]:
    """Double loop timed at loop_len // 2 and loop_len, then extrapolated to seq_len as t * (seq_len / loop_len)**2."""
    attn = RelPosSelfAttention1d(dim, num_heads, seq_len).eval()
    times = {}
    for length in (loop_len // 2, loop_len):
        x = torch.randn(batch, length, dim)
        with torch.no_grad():
            torch.testing.assert_close(double_loop_attention(attn, x), attn(x), atol=1e-4, rtol=1e-4)
        times[length] = median_seconds(
            _no_grad(lambda x=x: double_loop_attention(attn, x)), warmup, max(1, repeats // 2)
        )
    exponent = math.log(times[loop_len] / times[loop_len // 2]) / math.log(2)  # reported as a check only
    extrapolated = times[loop_len] * (seq_len / loop_len) ** 2
    rows = [
        dict(name="double loop", seq_len=n, ms=1e3 * s, vs_plain=None, measured=True, note="matches vectorised output")
        for n, s in times.items()
    ]
    speedup = extrapolated / auto_s
    note = (
        f"t({loop_len}) * ({seq_len}/{loop_len})**2 (measured growth exponent {exponent:.2f}); "
        f"vectorised auto is {speedup:.0f}x faster"
    )
    rows.append(
        dict(
            name="double loop (extrapolated)",
            seq_len=seq_len,
            ms=1e3 * extrapolated,
            vs_plain=None,
            measured=False,
            note=note,
        )
    )
    return rows


def _no_grad(fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with torch.no_grad():
            return fn()

    return run
