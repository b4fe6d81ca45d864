"""Shaw relative attention with the value term, for inference: query blocks in buffers reused across blocks.

The value term needs the attention weights themselves, so it cannot go through
``scaled_dot_product_attention`` as the key term does (:func:`~swinlite.seq.skew.relative_attention`).
On CPU its cost is memory traffic more than arithmetic: every block's logits, relative logits and
weights are tensors of several MB, and a fresh allocation of that size is mapped, page-faulted and
zeroed by the OS on each use. Without autograd nothing has to be kept, so
:func:`buffered_relative_attention` computes each block's logits, weights and output with ``out=``
into a handful of buffers allocated once per call, and no (B, H, L, L) tensor exists.
Offsets are ``j - i``; embedding rows ``clamp(j - i, -D, D) + D``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .skew import block_windows, over_query_blocks, skew


@torch.no_grad()
def buffered_relative_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rel_k: torch.Tensor,
    rel_v: torch.Tensor,
    max_distance: int,
    blocked: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    block: int = 64,
) -> torch.Tensor:
    """a = softmax(q·kᵀ + q·rel_k[r]); a·v + Σ_j a_ij rel_v[r]. Without autograd, T queries at a time.

    Per block of T queries, for all B·H heads at once: the relative logits against the L + T - 1
    offsets the block needs (one matmul), skewed into key columns and added to q·kᵀ; softmax in
    place; weights times values; and the weights un-skewed back to offsets (into a buffer whose
    off-band zeros are written once) times the offset embeddings, in :func:`~swinlite.seq.skew.over_query_blocks`.

    Args:
        q: queries [B, H, L, d], already scaled by 1/√d.
        k: keys [B, H, L, d].
        v: values [B, H, L, d].
        rel_k: relative key embeddings [2D + 1, d].
        rel_v: relative value embeddings [2D + 1, d].
        max_distance: clipping distance D.
        blocked: bool [B or 1, 1, L, L], True where query i must not see key j, or None.
        dropout_p: attention dropout.
        block: queries per block T.

    Returns:
        Attention output [B, H, L, d], laid out as [B, L, H, d] so that heads concatenate without a copy.
    """
    B, H, L, d = q.shape
    BH, T = B * H, min(block, L)
    W = L + T - 1  # offsets per block
    windows_k = block_windows(rel_k, max_distance, L, T)  # (nb, W, d)
    windows_v = block_windows(rel_v, max_distance, L, T)  # (nb, W, d)
    kt = k.transpose(2, 3).reshape(BH, d, L)  # a contiguous copy: the q·kᵀ products run faster on it
    v = v.reshape(BH, L, d)
    rel = q.new_empty(BH * T, W)  # relative logits per offset
    logits = q.new_empty(BH, T, L)  # logits, then weights
    offsets = q.new_zeros(BH, T, W)  # weights per offset; zero off the band
    fill = torch.finfo(q.dtype).min

    def attend(b: int, qb: torch.Tensor, rows: torch.Tensor | None, out: torch.Tensor) -> None:
        qb, out = qb.view(BH, T, d), out.view(BH, T, d)
        torch.mm(qb.view(BH * T, d), windows_k[b].T, out=rel)
        torch.bmm(qb, kt, out=logits).add_(skew(rel.view(BH, T, W)))  # (BH, T, L)
        if rows is not None:
            logits.view(B, H, T, L).masked_fill_(rows, fill)
        torch.softmax(logits, dim=-1, out=logits)
        weights = F.dropout(logits, dropout_p) if dropout_p > 0 else logits
        torch.bmm(weights, v, out=out)  # (BH, T, d)
        skew(offsets).copy_(weights)
        torch.addmm(out.view(BH * T, d), offsets.view(BH * T, W), windows_v[b], out=out.view(BH * T, d))

    return over_query_blocks(q, blocked, T, attend)  # (B, H, L, d)
