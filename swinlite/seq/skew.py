"""The skewing trick (Huang et al., Music Transformer, 2018) for relative attention terms, in query blocks.

Relative logits ``q_i . e[j - i]`` are cheap to compute per *offset* (one matmul of q against the
offset embeddings) but are wanted per *key* j. :func:`skew` moves them into place with views only;
:func:`unskew` is its transpose, for the value term. Doing it for all L queries at once needs every
offset -(L-1)..L-1, i.e. 2L - 1 columns per row for L useful ones; queries in blocks of T need only
L + T - 1, so :func:`relative_logits` and :func:`relative_values` work block-wise (batched, no
Python loop) and waste (T - 1) / L instead of (L - 1) / L of the work. :func:`relative_attention`
goes further for the key term: it hands each block's skewed logits straight to SDPA, so the
(L, L) logits are never built.

Offsets here are ``j - i`` (key minus query); embedding rows are ``clamp(j - i, -D, D) + D``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def skew(rel: torch.Tensor) -> torch.Tensor:
    """Move per-offset values of T queries into key columns: ``out[..., t, j] = rel[..., t, j - t + T - 1]``.

    In the row-major (T, W) block the wanted element sits at flat position ``t * (W - 1) + T - 1 + j``,
    so dropping the first T - 1 elements and reading rows of length W - 1 lines every row up at j.

    Args:
        rel: values per offset [..., T, W], column c of row t holding offset ``c - t - (T - 1)`` relative to t.

    Returns:
        Values per key [..., T, W - T + 1] (a view).
    """
    rows, width = rel.shape[-2:]
    if rows == 1:
        return rel
    flat = rel.flatten(-2)[..., rows - 1 : rows - 1 + rows * (width - 1)]  # (..., T*(W-1))
    return flat.unflatten(-1, (rows, width - 1))[..., : width - rows + 1]  # (..., T, W-T+1)


def unskew(attn: torch.Tensor) -> torch.Tensor:
    """Transpose of :func:`skew`: ``out[..., t, j - t + T - 1] = attn[..., t, j]``, zeros elsewhere.

    Args:
        attn: values per key [..., T, L].

    Returns:
        Values per offset [..., T, L + T - 1].
    """
    rows, length = attn.shape[-2:]
    if rows == 1:
        return attn
    flat = F.pad(attn, (0, rows - 2)).flatten(-2)  # (..., T*(L+T-2))
    flat = F.pad(flat, (rows - 1, 1))  # (..., T*(L+T-1))
    return flat.unflatten(-1, (rows, length + rows - 1))  # (..., T, L+T-1)


def block_windows(weight: torch.Tensor, max_distance: int, length: int, block: int) -> torch.Tensor:
    """Embeddings of the L + T - 1 offsets each query block needs, (num_blocks, L + T - 1, d).

    Block b (queries bT .. bT + T - 1) needs offsets -(bT + T - 1) .. L - 1 - bT. One gather whose index is plain
    arithmetic in L and T, so that ``torch.compile`` keeps L symbolic: a view by ``unfold`` (step T) made it
    specialise on every length below T, where T = L.
    """
    num_blocks = -(-length // block)
    first = torch.arange(num_blocks, device=weight.device)[:, None] * block + block - 1  # (nb, 1): -offset of column 0
    offsets = torch.arange(length + block - 1, device=weight.device) - first  # (nb, L+T-1)
    return weight[offsets.clamp(-max_distance, max_distance) + max_distance]  # (nb, L+T-1, d)


def query_blocks(q: torch.Tensor, block: int) -> torch.Tensor:
    """Rows [B, H, L, d] (queries, or attention weights) as contiguous query blocks [nb, B, H, T, d] (one copy),
    the last one zero-padded."""
    L = q.shape[2]
    nb = -(-L // block)
    q = F.pad(q, (0, 0, 0, nb * block - L)) if nb * block > L else q
    return q.unflatten(2, (nb, block)).permute(2, 0, 1, 3, 4).contiguous()


def merge_query_blocks(out: torch.Tensor, length: int) -> torch.Tensor:
    """Inverse of :func:`query_blocks` for per-block results [nb, B, H, T, d]: [B, H, L, d], laid out as [B, L, H, d].

    The layout lets the heads concatenate without another copy; padded queries are dropped.
    """
    nb, B, H, T, d = out.shape
    return out.permute(1, 0, 3, 2, 4).reshape(B, nb * T, H, d)[:, :length].transpose(1, 2)


def relative_logits(q: torch.Tensor, weight: torch.Tensor, max_distance: int, block: int = 128) -> torch.Tensor:
    """``out[b, h, i, j] = q[b, h, i] . weight[clamp(j - i, -D, D) + D]``.

    Args:
        q: queries [B, H, L, d].
        weight: relative embeddings [2D + 1, d].
        max_distance: clipping distance D.
        block: queries per block T.

    Returns:
        Relative logits [B, H, L, L].
    """
    B, H, L, d = q.shape
    T = min(block, L)
    nb = -(-L // T)
    windows = block_windows(weight, max_distance, L, T)  # (nb, L+T-1, d)
    qb = query_blocks(q, T).view(nb, B * H * T, d)
    rel = torch.bmm(qb, windows.transpose(1, 2)).view(nb, B, H, T, L + T - 1)  # per offset
    return merge_query_blocks(skew(rel), L)  # (B, H, L, L) per key


def relative_values(attn: torch.Tensor, weight: torch.Tensor, max_distance: int, block: int = 128) -> torch.Tensor:
    """``out[b, h, i] = sum_j attn[b, h, i, j] * weight[clamp(j - i, -D, D) + D]``.

    Args:
        attn: attention weights [B, H, L, L].
        weight: relative embeddings [2D + 1, d].
        max_distance: clipping distance D.
        block: queries per block T.

    Returns:
        Relative value term [B, H, L, d].
    """
    B, H, L, _ = attn.shape
    T, d = min(block, L), weight.shape[1]
    nb = -(-L // T)
    windows = block_windows(weight, max_distance, L, T)  # (nb, L+T-1, d)
    ab = unskew(query_blocks(attn, T))  # (nb, B, H, T, L+T-1) per offset
    out = torch.bmm(ab.view(nb, B * H * T, L + T - 1), windows)  # (nb, B*H*T, d)
    return merge_query_blocks(out.view(nb, B, H, T, d), L)  # (B, H, L, d); d named: -1 fails for B = 0


def over_query_blocks(
    q: torch.Tensor,
    blocked: torch.Tensor | None,
    block: int,
    attend: Callable[[int, torch.Tensor, torch.Tensor | None, torch.Tensor], None],
) -> torch.Tensor:
    """The query-block loop of both 1-D kernels: ceil(L / T) iterations, not one per position.

    Args:
        q: queries [B, H, L, d].
        blocked: bool [B or 1, 1, L, L], True where query i must not see key j, or None.
        block: queries per block T (at most L).
        attend: ``attend(b, q_block, blocked_rows, out_block)`` writes block b's output into ``out_block``
            [B, H, T, d], given its queries [B, H, T, d] and mask rows [B or 1, 1, T, L] (or None).

    Returns:
        Attention output [B, H, L, d], laid out as [B, L, H, d] so that heads concatenate without a copy.
    """
    B, H, L, d = q.shape
    nb = -(-L // block)
    qb = query_blocks(q, block)  # (nb, B, H, T, d)
    if blocked is not None and nb * block > L:  # the padded queries block nothing
        # torch.cat, not F.pad: inductor (torch 2.14) emits C++ that does not compile for F.pad of a causal mask
        padding = blocked.new_zeros(*blocked.shape[:2], nb * block - L, L)
        blocked = torch.cat([blocked, padding], dim=2)  # (B or 1, 1, nb*T, L)
    out = q.new_empty(nb, B, H, block, d)
    for b in range(nb):
        rows = None if blocked is None else blocked[:, :, b * block : (b + 1) * block]
        attend(b, qb[b], rows, out[b])
    return merge_query_blocks(out, L)  # (B, H, L, d)


def relative_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weight: torch.Tensor,
    max_distance: int,
    blocked: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    block: int = 64,
) -> torch.Tensor:
    """softmax(q·kᵀ + q·weight[clamp(j - i, -D, D) + D]) · v, one block of T queries at a time.

    Each block's relative logits against the L + T - 1 offsets it needs are one matmul; their
    skewed view (B, H, T, L) goes, uncopied, to ``scaled_dot_product_attention`` as the mask, so no
    (B, H, L, L) tensor ever exists. Without autograd every block writes its relative logits into
    one buffer: a fresh tensor of several MB per block would be mapped and page-faulted by the OS
    each time. The blocks run through :func:`over_query_blocks`.

    Args:
        q: queries [B, H, L, d], already scaled by 1/√d.
        k: keys [B, H, L, d].
        v: values [B, H, L, d].
        weight: relative key embeddings [2D + 1, d].
        max_distance: clipping distance D.
        blocked: bool [B or 1, 1, L, L], True where query i must not see key j, or None.
        dropout_p: attention dropout.
        block: queries per block T.

    Returns:
        Attention output [B, H, L, d], laid out as [B, L, H, d] so that heads concatenate without a copy.
    """
    B, H, L, d = q.shape
    T = min(block, L)
    windows = block_windows(weight, max_distance, L, T).transpose(1, 2)  # (nb, d, L+T-1)
    k, v = k.contiguous(), v.contiguous()  # SDPA runs faster on these than on strided views
    tracked = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, weight))
    buffer = None if tracked else q.new_empty(B * H * T, L + T - 1)
    fill = torch.finfo(q.dtype).min

    def attend(b: int, qb: torch.Tensor, rows: torch.Tensor | None, out: torch.Tensor) -> None:
        rel = torch.mm(qb.view(B * H * T, d), windows[b], out=buffer)  # (B*H*T, L+T-1) per offset
        mask = skew(rel.view(B, H, T, L + T - 1))  # (B, H, T, L) per key, a view
        if rows is not None:
            mask = mask.masked_fill(rows, fill) if tracked else mask.masked_fill_(rows, fill)
        # SDPA scales q.kᵀ itself: q is pre-scaled, so scale=1
        out.copy_(F.scaled_dot_product_attention(qb, k, v, attn_mask=mask, dropout_p=dropout_p, scale=1.0))

    return over_query_blocks(q, blocked, T, attend)  # (B, H, L, d)
