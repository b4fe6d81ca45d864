"""Multi-head self-attention inside windows, with a relative position bias (W-MSA / SW-MSA core)."""

import torch
import torch.nn.functional as F
from torch import nn

from . import window_sdpa
from .rel_pos_bias import RelativePositionBias
from .window_sdpa import recomputed_window_attention, window_attn_mask


class WindowAttention(nn.Module):
    """Self-attention over the tokens of each window, plus a per-head relative position bias.

    The bias and the block's shift/padding mask are added to the logits as one additive mask. With
    ``fused=True`` the attention runs in fused kernels where they exist: ``F.scaled_dot_product_attention``
    on 4-D views of the qkv projection when no gradient flows to the bias (inference, frozen bias),
    and, when training in fp32 on CPU, a flash forward with a backward that recomputes the
    probabilities (:func:`recomputed_window_attention`, no (heads, N, N) map kept per window). Elsewhere,
    and with ``fused=False``, the explicit softmax(QKᵀ/√d + bias + mask)·V path runs (same function).

    Args:
        dim: channels of the input tokens.
        num_heads: attention heads; must divide ``dim``.
        window: (Wh, Ww).
        qkv_bias: learn a bias for the q, k, v projections.
        attn_drop: dropout on the attention weights.
        proj_drop: dropout after the output projection.
        rel_pos: ``"table"`` (Swin's learnable table) or ``"cpb"`` (Swin-V2 continuous position bias).
        fused: use fused attention kernels where they apply (see above).
    """

    fused: torch.jit.Final[bool]

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window: tuple[int, int],
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        rel_pos: str = "table",
        fused: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if dim % num_heads != 0:
            raise ValueError(f"dim ({dim}) must be divisible by num_heads ({num_heads})")
        dd = {"device": device, "dtype": dtype}
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.fused = fused
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias, **dd)
        self.rel_pos = _build_rel_pos(rel_pos, window, num_heads, **dd)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim, **dd)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Attend within windows.

        Args:
            x: window tokens [B, nW, N, C].
            mask: additive mask [nW, N, N] (shift regions, padding) or None.

        Returns:
            Tokens [B, nW, N, C].
        """
        B, nW, N, C = x.shape
        qkv = self.qkv(x).view(B * nW, N, 3, self.num_heads, self.head_dim)
        bias = self.rel_pos().to(qkv.dtype)  # (heads, N, N)
        if mask is not None:
            mask = mask.to(qkv.dtype)
        if self.fused and not (torch.is_grad_enabled() and bias.requires_grad):
            x = self._fused(qkv, bias, mask, B)
        elif self.fused and self._can_recompute(qkv):
            x = self._recomputed(qkv, bias, mask, B)
        else:
            x = self._explicit(qkv, bias, mask, B)
        x = x.transpose(1, 2).reshape(B, nW, N, C)  # (B, nW, N, heads*hd)
        return self.proj_drop(self.proj(x))

    def _fused(self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, B: int) -> torch.Tensor:
        """SDPA on 4-D (B*nW, heads, N, hd) views of qkv, which CPU and GPU run with their flash kernels."""
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B*nW, heads, N, hd), views without copies
        p = self.attn_drop.p if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=window_attn_mask(bias, mask, B), dropout_p=p)

    def _can_recompute(self, qkv: torch.Tensor) -> bool:
        """The CPU training kernel applies: its torch op exists, fp32 on CPU, no attention dropout, not TorchScript."""
        if torch.jit.is_scripting() or not window_sdpa.CPU_FLASH_WITH_LSE:
            return False
        return qkv.device.type == "cpu" and qkv.dtype == torch.float32 and not (self.training and self.attn_drop.p > 0)

    @torch.jit.unused
    def _recomputed(self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, B: int) -> torch.Tensor:
        return recomputed_window_attention(qkv, bias, mask, B, self.scale)

    def _explicit(self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, B: int) -> torch.Tensor:
        """softmax(QKᵀ/√d + bias + mask)·V written out (autograd keeps the (heads, N, N) maps)."""
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B*nW, heads, N, hd)
        attn = (q * self.scale) @ k.transpose(-2, -1) + bias  # (B*nW, heads, N, N)
        if mask is not None:
            nW, N = mask.shape[0], mask.shape[1]
            attn = (attn.view(B, nW, -1, N, N) + mask.unsqueeze(1)).flatten(0, 1)  # (B*nW, heads, N, N)
        attn = self.attn_drop(attn.softmax(dim=-1))
        return attn @ v


def _build_rel_pos(
    kind: str, window: tuple[int, int], num_heads: int, device: torch.device | str | None, dtype: torch.dtype | None
) -> nn.Module:
    if kind == "table":
        return RelativePositionBias(window, num_heads, device=device, dtype=dtype)
    if kind == "cpb":
        from .rel_pos_cpb import ContinuousPositionBias

        return ContinuousPositionBias(window, num_heads, device=device, dtype=dtype)
    raise ValueError(f"rel_pos must be 'table' or 'cpb', got {kind!r}")
