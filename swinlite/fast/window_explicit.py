"""Explicit window attention whose bias + mask is added once per window position, broadcast over the images.

softmax(QKᵀ·scale + bias + mask)·V, as :func:`swinlite.models.swin.window_attention` writes it, except for how the
additive term reaches the logits: the reference builds it for every window of the batch, (B*nW, heads, N, N), by a
broadcast of the (heads, N, N) bias against the (nW, N, N) mask, then adds it; here the (nW, heads, N, N) sum is
built for one image's windows and added to the logits viewed as (B, nW, heads, N, N), as timm adds its mask. One
pass over the logits instead of two, and no batch-sized tensor written from two broadcast operands (a slow pattern
for the CPU's elementwise kernels); the bias gradient is the same sum over images and windows.

- Saves: time in CPU bf16 training, where this kernel runs (``python scripts/benchmark.py --size tiny --batch 8
  --precisions bf16 --tasks train``; figures in benchmarks/kernels.md); on CUDA it is the "explicit" candidate of
  the measured choice (timm's own formulation).
- Torch ops: public ones only; scriptable (TorchScript runs it for CPU training).
- Pinned by: ``tests/fast/test_window_explicit.py`` (against the per-window loop of ``tests/reference.py``, values
  and gradients, with and without a shift/padding mask) and ``tests/fast/test_fast_block.py``.
"""

import torch
import torch.nn.functional as F


def explicit_window_attention(
    qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, scale: float, dropout_p: float
) -> torch.Tensor:
    """softmax(QKᵀ·scale + bias + mask)·V per window and head, the bias + mask broadcast over the images.

    Args:
        qkv: projections (B*nW, N, 3, heads, hd).
        bias: relative position bias (heads, N, N), may require grad.
        mask: additive shift/padding mask (nW, N, N) or None; window w of every image gets ``mask[w]``.
        batch: B.
        scale: logit scale, hd ** -0.5.
        dropout_p: dropout on the attention weights.

    Returns:
        (B*nW, heads, N, hd).
    """
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B*nW, heads, N, hd)
    attn = (q * scale) @ k.transpose(-2, -1)  # (B*nW, heads, N, N)
    windows, heads, n, _ = attn.shape
    if mask is None:
        attn = attn + bias.unsqueeze(0)
    else:
        window_bias = bias + mask.unsqueeze(1)  # (nW, heads, N, N): one image's windows
        attn = (attn.view(batch, -1, heads, n, n) + window_bias).view(windows, heads, n, n)
    attn = attn.softmax(dim=-1)
    if dropout_p > 0.0:
        attn = F.dropout(attn, dropout_p)
    return attn @ v
