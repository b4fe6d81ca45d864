"""Multi-head self-attention inside windows, with a relative position bias (W-MSA / SW-MSA core)."""

import torch
import torch.nn.functional as F
from torch import nn

from .rel_pos_bias import RelativePositionBias


class WindowAttention(nn.Module):
    """Self-attention over the tokens of each window, plus a per-head relative position bias.

    The bias and the block's shift/padding mask are added to the logits as one additive mask and
    handed to ``F.scaled_dot_product_attention``; ``fused=False`` keeps the explicit
    softmax(QKᵀ/√d + bias + mask)·V path (same function, used by tests and for debugging).

    Args:
        dim: channels of the input tokens.
        num_heads: attention heads; must divide ``dim``.
        window: (Wh, Ww).
        qkv_bias: learn a bias for the q, k, v projections.
        attn_drop: dropout on the attention weights.
        proj_drop: dropout after the output projection.
        rel_pos: ``"table"`` (Swin's learnable table) or ``"cpb"`` (Swin-V2 continuous position bias).
        fused: use ``scaled_dot_product_attention``.
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
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B*nW, heads, N, hd), views without copies
        bias = self.rel_pos().to(q.dtype)  # (heads, N, N)
        if mask is not None:
            mask = mask.to(q.dtype)
        if self.fused and not (torch.is_grad_enabled() and bias.requires_grad):
            x = self._fused(q, k, v, bias, mask, B)
        else:
            x = self._explicit(q, k, v, bias, mask, B)
        x = x.transpose(1, 2).reshape(B, nW, N, C)  # (B, nW, N, heads*hd)
        return self.proj_drop(self.proj(x))

    def _fused(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, B: int
    ) -> torch.Tensor:
        """SDPA on 4-D (B*nW, heads, N, hd) inputs, which CPU and GPU run with their flash kernels."""
        if mask is None:
            attn_mask = bias.unsqueeze(0)  # (1, heads, N, N), broadcast over windows
        else:
            nW, N = mask.shape[0], mask.shape[1]
            # one broadcast add writes the per-window masks for the whole batch: (B*nW, heads, N, N)
            attn_mask = (bias + mask.view(1, nW, 1, N, N).expand(B, nW, 1, N, N)).flatten(0, 1)
        p = self.attn_drop.p if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)

    def _explicit(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, B: int
    ) -> torch.Tensor:
        """softmax(QKᵀ/√d + bias + mask)·V written out; used when the bias needs a gradient."""
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
