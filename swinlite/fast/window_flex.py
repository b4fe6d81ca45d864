"""Window attention through FlexAttention: the relative position bias and the shift/padding mask as a score
modifier, every window one sequence of N tokens.

softmax(QKᵀ·scale + bias + mask)·V over the windows of a block, as :func:`swinlite.models.swin.window_attention`
computes it, with ``torch.nn.attention.flex_attention``: the windows are the batch (B*nW, heads, N, hd) and the
score modifier adds ``bias[h, i, j] + mask[w, i, j]`` (window w = b mod nW) to each logit inside the kernel,
so neither the (B*nW, heads, N, N) logits nor the additive mask exist in memory, and the gradient to the bias
flows through the modifier (flex's backward). Compiled (``torch.compile(flex_attention)``, which the CUDA path
uses), it is one fused forward and one fused backward kernel; uncompiled, flex evaluates the same modifier over
materialised scores, which is how the CPU tests run it.

- Saves: on CUDA, the (B*nW, heads, N, N) attention mask SDPA is handed and the kernel SDPA picks for 49-token
  windows with a mask; whether it wins is measured per shape on the GPU by
  :func:`swinlite.fast.measured.fastest` (the ``fastest`` row of the table in :mod:`swinlite.fast.blocks`),
  not assumed; not yet measured on a GPU (benchmarks/kernels.md).
- Torch ops: ``torch.nn.attention.flex_attention.flex_attention`` (torch >= 2.5); without it
  (:data:`FLEX_AVAILABLE` False) the table never names this kernel. No attention dropout.
- Pinned by: ``tests/fast/test_window_flex.py`` (against the per-window loop of ``tests/reference.py``, values and
  gradients of qkv and the bias, with and without a shift/padding mask, on CPU through flex's uncompiled path).
"""

import functools
from collections.abc import Callable

import torch

try:
    from torch.nn.attention.flex_attention import flex_attention

    FLEX_AVAILABLE = True
except ImportError:  # torch < 2.5
    flex_attention = None
    FLEX_AVAILABLE = False


def window_score_mod(attn_bias: torch.Tensor, num_windows: int) -> Callable:
    """The score modifier adding ``attn_bias[b % nW (or 0), h, i, j]`` to the logit of query i, key j.

    Args:
        attn_bias: bias + mask, (nW, heads, N, N), or the bias alone as (1, heads, N, N).
        num_windows: nW; windows are batch-major in the flex batch (index b * nW + w).
    """
    if attn_bias.shape[0] == 1:

        def add_bias(score, b, h, q_idx, kv_idx):
            return score + attn_bias[0, h, q_idx, kv_idx]

        return add_bias

    def add_bias_and_mask(score, b, h, q_idx, kv_idx):
        return score + attn_bias[b % num_windows, h, q_idx, kv_idx]

    return add_bias_and_mask


@functools.cache
def _compiled_flex() -> Callable:
    # dynamo's automatic dynamic shapes: after the first shape, one more compile covers the other stages' shapes,
    # where compiling per shape would pass its recompile limit (8) within one model and fall back to eager flex
    return torch.compile(flex_attention)


def flex_window_attention(
    qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, scale: float, compiled: bool = True
) -> torch.Tensor:
    """Window attention by FlexAttention, bias and mask added inside the kernel by a score modifier.

    Args:
        qkv: projections (B*nW, N, 3, heads, hd).
        bias: relative position bias (heads, N, N), may require grad.
        mask: (nW, N, N) additive mask or None (no gradient).
        batch: B.
        scale: logit scale, usually hd ** -0.5.
        compiled: run flex compiled (the fused kernel; CUDA) rather than its materialising eager path (tests).

    Returns:
        (B*nW, heads, N, hd).
    """
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B*nW, heads, N, hd), views without copies
    if mask is None:
        attn_bias, num_windows = bias.unsqueeze(0), 1  # (1, heads, N, N)
    else:
        attn_bias, num_windows = bias + mask.unsqueeze(1), mask.shape[0]  # (nW, heads, N, N): one image's windows
    attend = _compiled_flex() if compiled and not torch.compiler.is_compiling() else flex_attention
    return attend(q, k, v, score_mod=window_score_mod(attn_bias, num_windows), scale=scale)
