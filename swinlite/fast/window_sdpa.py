"""Window attention through SDPA, and a CPU training kernel that keeps no (heads, N, N) map per window.

Both compute softmax(QKᵀ·scale + bias + mask)·V over the windows of a block, the explicit attention
:func:`swinlite.models.swin.window_attention`, with the relative position bias and the block's shift/padding
mask added to the logits as one additive mask (:func:`~swinlite.models.swin.window_attn_mask`).

:func:`sdpa_window_attention` hands that mask to ``F.scaled_dot_product_attention`` (as timm does):
flash kernels on CPU and CUDA when no gradient flows to the bias; with a gradient to the bias, CUDA's
memory-efficient kernel and CPU's math fallback (which keeps the maps, as the explicit path does).

:func:`recomputed_window_attention`, for CPU fp32 training, runs the CPU flash kernel forward and, in
backward, rebuilds the probabilities from the kernel's log-sum-exp instead of keeping them. Its backward is
written out by hand (the softmax gradient from the rebuilt probabilities): autograd of the explicit formula
would keep the (B*nW, heads, N, N) maps this kernel exists not to keep, and PyTorch's own CPU flash backward
takes no gradient for an additive mask, which the relative position bias needs. It is the one place besides
``window_attention`` where the attention math is written, and is pinned to it by the tests below.

- Saves: the (B*nW, heads, N, N) probabilities autograd keeps per block, and time in backward (peak MB
  and train img/s of ``python scripts/benchmark.py --size tiny --batch 8 --precisions fp32``; figures
  in benchmarks/kernels.md). Denormals: the reference's mask value -100 gives weights of about
  exp(-100) = 4e-44, subnormal floats on which x86 exp and matmul kernels slow down. The kernel masks
  with -inf instead (a weight below 2^-126 adds nothing to a softmax sum >= 1 unless a masked logit
  exceeds every unmasked one of its row by more than ~83), and its backward flushes probabilities
  below exp(-60) to zero before they reach the matmuls.
- Torch ops: the private ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu``, the only one
  that returns the log-sum-exp on CPU. Without it (a torch release that renamed it,
  :data:`CPU_FLASH_WITH_LSE` False) ``select_attention_kernel`` picks the explicit path: same function, slower.
- Pinned by: ``tests/fast/test_window_sdpa.py`` (against a per-window loop, values and gradients,
  subnormal weights included) and ``tests/fast/test_fast_block.py`` (fast block against the reference).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models.swin import window_attn_mask
from .first_order import refuse_double_backward

_MIN_LOG_PROB = -60.0  # log-probabilities (and mask values) at or below this count as -inf in the training kernel

# The training kernel needs the log-sum-exp, which only this private CPU flash op returns (module docstring).
CPU_FLASH_WITH_LSE: bool = hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")


def sdpa_window_attention(
    qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, scale: float, dropout_p: float
) -> torch.Tensor:
    """Window attention by ``F.scaled_dot_product_attention``, bias and mask as its additive ``attn_mask``.

    Args:
        qkv: projections (B*nW, N, 3, heads, hd).
        bias: relative position bias (heads, N, N), may require grad.
        mask: (nW, N, N) additive mask or None.
        batch: B.
        scale: logit scale, usually hd ** -0.5.
        dropout_p: dropout on the attention weights.

    Returns:
        (B*nW, heads, N, hd).
    """
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B*nW, heads, N, hd), views without copies
    attn_mask = window_attn_mask(bias, mask, batch)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)


class _RecomputedWindowAttention(torch.autograd.Function):
    """softmax(QKᵀ·scale + bias + mask)·V: flash forward, backward from the saved log-sum-exp."""

    @staticmethod
    def forward(
        ctx, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, scale: float
    ) -> torch.Tensor:
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B*nW, heads, N, hd)
        if mask is not None:  # -100 -> -inf: no subnormal weights (module docstring)
            mask = mask.masked_fill(mask <= _MIN_LOG_PROB, float("-inf"))
        attn_mask = window_attn_mask(bias, mask, batch)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=attn_mask, scale=scale
        )  # out (B*nW, heads, N, hd) over (B*nW, N, heads, hd) memory; lse (B*nW, heads, N)
        ctx.save_for_backward(qkv, bias, mask, out, lse)
        ctx.batch, ctx.scale = batch, scale
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None, None]:
        refuse_double_backward()
        qkv, bias, mask, out, lse = ctx.saved_tensors
        BW, N, _, H, hd = qkv.shape
        # (3, B*nW, heads, N, hd): one copy for q, k, v, written in place below. A clone: .contiguous() returns the
        # saved qkv itself where its permuted view is contiguous (one window of one token), which a second backward
        # through the graph (retain_graph=True) reads
        qkv_c = qkv.permute(2, 0, 3, 1, 4).clone(memory_format=torch.contiguous_format)
        qkv_c[0].mul_(ctx.scale)  # pre-scaled q: S and dK need no further scaling
        q, k, v = qkv_c.view(3, BW * H, N, hd).unbind(0)  # 3 x (B*nW*heads, N, hd)
        d_out = grad_out.reshape(BW * H, N, hd)  # (B*nW*heads, N, hd)
        # probabilities P = exp(S - lse), S = QKᵀ·scale + bias + mask, rebuilt in place
        p = torch.bmm(q, k.transpose(1, 2)).view(BW, H, N, N).add_(bias)
        if mask is not None:
            p = p.view(ctx.batch, -1, H, N, N).add_(mask.unsqueeze(1)).view(BW, H, N, N)
        p = p.sub_(lse.unsqueeze(-1))  # log-probabilities
        p = F.threshold_(p, _MIN_LOG_PROB, float("-inf")).exp_().view(BW * H, N, N)  # no subnormals
        rowdot = (grad_out * out).sum(-1).reshape(BW * H, N, 1)  # Σ_d dO·O, the softmax correction
        d_s = torch.bmm(d_out, v.transpose(1, 2)).sub_(rowdot).mul_(p)  # dS, (B*nW*heads, N, N)
        grad_qkv = qkv.new_empty(BW, N, 3, H, hd)
        dq, dk, dv = grad_qkv.permute(2, 0, 3, 1, 4).unbind(0)  # views to fill, (B*nW, heads, N, hd)
        work = v  # v is no longer needed: its buffer takes each product before the copy into grad_qkv
        dv.copy_(torch.bmm(p.transpose(1, 2), d_out, out=work).view(BW, H, N, hd))
        dk.copy_(torch.bmm(d_s.transpose(1, 2), q, out=work).view(BW, H, N, hd))
        dq.copy_(torch.bmm(d_s, k, out=work).mul_(ctx.scale).view(BW, H, N, hd))
        grad_bias = d_s.view(-1, H, N, N).sum(0)  # (heads, N, N)
        return grad_qkv, grad_bias, None, None, None


def recomputed_window_attention(
    qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, scale: float
) -> torch.Tensor:
    """Window attention for CPU training, keeping no (heads, N, N) map per window for backward.

    Args:
        qkv: projections (B*nW, N, 3, heads, hd), float32 on CPU.
        bias: relative position bias (heads, N, N), may require grad.
        mask: (nW, N, N) additive mask or None (no gradient).
        batch: B.
        scale: logit scale, usually hd ** -0.5.

    Returns:
        (B*nW, heads, N, hd), laid out as (B*nW, N, heads, hd) in memory.
    """
    return _RecomputedWindowAttention.apply(qkv, bias, mask, batch, scale)
