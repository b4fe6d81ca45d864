"""CPU inference in blocks of rows: the window attention and the MLP of a block, a few thousand tokens at
a time, through buffers reused from one row block to the next.

Without autograd nothing has to be kept for backward, so the (tokens, 3C) projections, the (tokens, 4C)
MLP hidden state and the (B*nW, heads, N, N) bias + mask need not exist for the whole batch at once. The
plain eager path allocates each of them whole: at Swin-T's first stage, batch 8, the hidden state alone
is larger than glibc's largest mmap threshold (32 MB), so every call maps fresh pages and faults them
in; the ops that first write them (the bias copy of ``addmm``, GELU) spend more time faulting than
computing. Here each row block's hidden state (2048 x 4C) stays in cache between fc1, GELU and fc2, the
residual and fc2's bias are written into the output before fc2 accumulates onto it, and the shift mask
is added to the bias for one row block's windows, not for the whole batch.

- Saves: time in CPU inference (``python scripts/benchmark.py --size tiny --batch 8 --tasks inference``;
  figures in benchmarks/kernels.md). Same ops, same order of reduction within each token: results
  equal the plain path's to float rounding of the matmuls.
- Torch ops: public ones only (``addmm``/``mm`` with ``out=``, ``addmm_``, ``F.scaled_dot_product_attention``,
  ``torch.ops.aten.gelu_``). Only for CPU without autograd and without autocast (out= ops do not autocast);
  :func:`~swinlite.fast.blocks.use_row_blocks` decides.
- Pinned by: ``tests/fast/test_row_blocks.py`` (against the reference block: shifted and padded, row
  blocks of part of an image, of whole images and ragged; fp32 and bf16 weights; no biases).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models.swin import window_attn_mask

ROWS = 2048  # tokens per row block: the (ROWS, 4C) hidden state of Swin-T's first stage is 3 MB


def _linear_into(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """out = x @ weightᵀ + bias, written into ``out`` (rows, out_features)."""
    if bias is None:
        return torch.mm(x, weight.t(), out=out)
    return torch.addmm(bias, x, weight.t(), out=out)


def _add_linear_into(
    residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor
) -> None:
    """out = residual + x @ weightᵀ + bias: residual and bias written first, the matmul accumulates."""
    if bias is None:
        out.copy_(residual)
    else:
        torch.add(residual, bias, out=out)
    out.addmm_(x, weight.t())


def window_attention_rows(
    windows: torch.Tensor,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor | None,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor | None,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """proj(attention(qkv(windows))), about ``ROWS`` tokens of windows at a time.

    Args:
        windows: window tokens [B, nW, N, C], contiguous.
        qkv_weight, qkv_bias: the q, k, v projection, [3C, C] and [3C] or None.
        proj_weight, proj_bias: the output projection, [C, C] and [C] or None.
        bias: relative position bias [heads, N, N].
        mask: additive shift/padding mask [nW, N, N] or None.
        scale: logit scale.

    Returns:
        [B, nW, N, C].
    """
    B, nW, N, C = windows.shape
    heads = bias.shape[0]
    x = windows.view(B * nW * N, C)
    out = torch.empty_like(x)
    blocks = _window_blocks(B, nW, max(1, ROWS // N))
    qkv_buffer = x.new_empty(max(count for _, count, _ in blocks) * N, qkv_weight.shape[0])  # reused
    for first, count, offset in blocks:
        rows = slice(first * N, (first + count) * N)
        qkv = _linear_into(x[rows], qkv_weight, qkv_bias, qkv_buffer[: count * N])
        q, k, v = qkv.view(count, N, 3, heads, C // heads).permute(2, 0, 3, 1, 4).unbind(0)  # (count, heads, N, hd)
        # the block's windows are a range of one image's (count < nW) or all nW windows of count // nW images
        block_mask = None if mask is None else mask[offset : offset + count]
        attn_mask = window_attn_mask(bias, block_mask, max(1, count // nW))  # (1 or count, heads, N, N)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
        o = o.transpose(1, 2).reshape(count * N, C)  # (count, heads, N, hd) -> (tokens, C); a view on CPU flash
        _linear_into(o, proj_weight, proj_bias, out[rows])
    return out.view(B, nW, N, C)


def _window_blocks(batch: int, num_windows: int, per_block: int) -> list[tuple[int, int, int]]:
    """(first window, windows, first window's index within its image) of each row block of at most
    ``per_block`` windows: whole images when an image has no more windows than that, else equal parts of one."""
    if per_block >= num_windows:
        images = per_block // num_windows
        return [(b * num_windows, min(images, batch - b) * num_windows, 0) for b in range(0, batch, images)]
    parts = -(-num_windows // per_block)
    size = -(-num_windows // parts)
    return [
        (b * num_windows + w, min(size, num_windows - w), w) for b in range(batch) for w in range(0, num_windows, size)
    ]


def mlp_rows(
    x: torch.Tensor,
    norm: torch.nn.LayerNorm,
    fc1_weight: torch.Tensor,
    fc1_bias: torch.Tensor | None,
    fc2_weight: torch.Tensor,
    fc2_bias: torch.Tensor | None,
) -> torch.Tensor:
    """x + fc2(gelu(fc1(norm(x)))) (exact GELU), ``ROWS`` tokens at a time.

    Args:
        x: tokens [..., C], contiguous.
        norm: the pre-norm (a LayerNorm over C).
        fc1_weight, fc1_bias: [hidden, C] and [hidden] or None.
        fc2_weight, fc2_bias: [C, hidden] and [C] or None.

    Returns:
        [..., C].
    """
    tokens = x.reshape(-1, x.shape[-1])  # (T, C)
    out = torch.empty_like(tokens)
    hidden = tokens.new_empty(min(ROWS, tokens.shape[0]), fc1_weight.shape[0])  # (ROWS, hidden), reused
    for start in range(0, tokens.shape[0], ROWS):
        rows = slice(start, start + ROWS)
        residual = tokens[rows]
        h = _linear_into(norm(residual), fc1_weight, fc1_bias, hidden[: residual.shape[0]])
        torch.ops.aten.gelu_(h)
        _add_linear_into(residual, h, fc2_weight, fc2_bias, out[rows])
    return out.view(x.shape)
