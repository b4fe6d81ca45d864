"""Benchmark of 1-D relative position attention: vectorised Shaw vs the double-loop formulation vs plain attention.

The double loop is the formulation found in hand-written code: relative logits per offset
``q_i . rel_k[m]``, moved into the (i, j) grid by a Python loop over every pair. It is checked
against the vectorised layer at a short length and timed once at the full length (seconds: one run
is far above the noise), so no figure here is extrapolated.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from swinlite.seq import RelPosSelfAttention1d

from .swin import machine_info
from .timing import interleaved_seconds, median_seconds, paired_ratio


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


def run_rel_pos_1d(
    seq_len: int = 1024,
    dim: int = 512,
    num_heads: int = 8,
    batch: int = 4,
    loop_check_len: int = 64,
    warmup: int = 1,
    repeats: int = 11,
) -> dict[str, Any]:
    """Time forward passes (no grad, CPU, float32) of each formulation, side by side in this process.

    Args:
        seq_len: sequence length L of the comparison.
        dim: channels C.
        num_heads: attention heads.
        batch: batch size B.
        loop_check_len: length at which the double loop's output is checked against the vectorised layer.
        warmup: untimed runs before timing.
        repeats: interleaved timed runs; the median is reported (the double loop runs once).

    Returns:
        dict with ``config`` (the arguments), ``machine`` (versions, threads, load average before and
        after) and ``rows``: one dict per formulation with ``name``, ``seq_len``, ``ms`` (median
        milliseconds), ``vs_plain`` (time over plain attention: the median of the per-round ratios; for the double
        loop, timed apart, the ratio of the medians) and ``note``.
    """
    if min(seq_len, dim, num_heads, batch, loop_check_len, repeats) < 1 or warmup < 0:
        raise ValueError(
            "expected seq_len, dim, num_heads, batch, loop_check_len, repeats >= 1 and warmup >= 0; got "
            f"{seq_len}, {dim}, {num_heads}, {batch}, {loop_check_len}, {repeats} and {warmup}"
        )
    config = dict(seq_len=seq_len, dim=dim, num_heads=num_heads, batch=batch, warmup=warmup, repeats=repeats)
    machine = machine_info("cpu")
    torch.manual_seed(0)
    x = torch.randn(batch, seq_len, dim)
    variants = {
        "plain attention (SDPA, no relative terms)": None,
        f"shaw, key term (auto: {_auto_method(dim, num_heads, seq_len)} at this L)": dict(method="auto"),
        "shaw, key term, gather (L, L, d)": dict(method="gather"),
        "shaw, key + value terms (auto)": dict(method="auto", value_rel=True),
        "per-head scalar bias": dict(mode="bias"),
    }
    fns = []
    for kwargs in variants.values():
        attn = RelPosSelfAttention1d(dim, num_heads, seq_len, **(kwargs or {})).eval()
        fns.append(_no_grad(lambda a=attn: plain_attention(a, x)) if kwargs is None else _no_grad(lambda a=attn: a(x)))
    times = interleaved_seconds(fns, warmup=warmup, repeats=repeats)
    seconds = [statistics.median(t) for t in times]
    rows = [
        dict(name=name, seq_len=seq_len, ms=1e3 * s, vs_plain=paired_ratio(t, times[0]), note="")
        for name, s, t in zip(variants, seconds, times, strict=True)
    ]
    rows.append(_loop_row(dim, num_heads, batch, seq_len, loop_check_len, seconds))
    machine["load_average_after"] = os.getloadavg()
    return dict(config=config, machine=machine, rows=rows)


def _auto_method(dim: int, num_heads: int, seq_len: int) -> str:
    return "gather" if RelPosSelfAttention1d(dim, num_heads, seq_len, device="meta")._use_gather(seq_len) else "skew"


def _loop_row(
    dim: int, num_heads: int, batch: int, seq_len: int, check_len: int, seconds: list[float]
) -> dict[str, Any]:
    """The double loop, checked against the vectorised layer at check_len, then timed once at seq_len."""
    attn = RelPosSelfAttention1d(dim, num_heads, seq_len).eval()
    with torch.no_grad():
        x = torch.randn(batch, check_len, dim)
        torch.testing.assert_close(double_loop_attention(attn, x), attn(x), atol=1e-4, rtol=1e-4)
    x = torch.randn(batch, seq_len, dim)
    loop_s = median_seconds(_no_grad(lambda: double_loop_attention(attn, x)), warmup=0, repeats=1)
    note = (
        f"one run; output checked at L={check_len}; vectorised auto is {loop_s / seconds[1]:.0f}x faster, "
        f"plain attention {loop_s / seconds[0]:.0f}x"
    )
    return dict(name="double loop", seq_len=seq_len, ms=1e3 * loop_s, vs_plain=loop_s / seconds[0], note=note)


def _no_grad(fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with torch.no_grad():
            return fn()

    return run
