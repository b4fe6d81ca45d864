"""Swin Transformer block: (shifted) window attention and an MLP, pre-norm residuals.

The block's math is written out once, in paper order, in :meth:`SwinBlock._forward_reference` and
:meth:`WindowAttention._explicit`: pad, cyclic shift, window partition, attention with the relative
position bias and the shift/padding mask, window merge, reverse shift, crop, MLP. With ``fast=True``
(the default) the same function runs through the kernels of :mod:`swinlite.kernels`, chosen by
:func:`~swinlite.kernels.dispatch.select_attention_kernel` (a table of which kernel runs when).
"""

import torch
import torch.nn.functional as F
from einops import rearrange
from timm.layers import DropPath, register_notrace_module
from torch import nn

from ..kernels.dispatch import select_attention_kernel, use_row_blocks
from ..kernels.gather import gather_tokens
from ..kernels.row_blocks import window_attention_rows
from ..kernels.window_sdpa import recomputed_window_attention, sdpa_window_attention
from .mlp import Mlp
from .rel_pos_bias import RelativePositionBias
from .window import pad_to_window, window_geometry


class WindowAttention(nn.Module):
    """Self-attention over the tokens of each window, plus a per-head relative position bias.

    softmax(QKᵀ/√d + bias + mask)·V per window and head: the bias and the block's shift/padding mask
    are added to the logits. With ``fast=False`` the explicit formula runs; with ``fast=True`` the
    kernel :func:`~swinlite.kernels.dispatch.select_attention_kernel` picks (same function).

    Args:
        dim: channels of the input tokens.
        num_heads: attention heads; must divide ``dim``.
        window: (Wh, Ww).
        qkv_bias: learn a bias for the q, k, v projections.
        attn_drop: dropout on the attention weights.
        proj_drop: dropout after the output projection.
        rel_pos: ``"table"`` (Swin's learnable table) or ``"cpb"`` (Swin-V2 continuous position bias).
        fast: run the fast kernels (False: the explicit formula).
    """

    fast: torch.jit.Final[bool]

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window: tuple[int, int],
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        rel_pos: str = "table",
        fast: bool = True,
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
        self.fast = fast
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
        bias = self.rel_pos().to(qkv.dtype)  # relative position bias (heads, N, N)
        if mask is not None:
            mask = mask.to(qkv.dtype)
        dropout = self.training and self.attn_drop.p > 0
        kernel = select_attention_kernel(self.fast, qkv.device.type, qkv.dtype, bias.requires_grad, dropout)
        if kernel == "sdpa":
            x = sdpa_window_attention(qkv, bias, mask, B, self.scale, self.attn_drop.p if dropout else 0.0)
        elif kernel == "recomputed":
            x = self._recomputed(qkv, bias, mask, B)
        else:
            x = self._explicit(qkv, bias, mask, B)
        x = x.transpose(1, 2).reshape(B, nW, N, C)  # (B*nW, heads, N, hd) -> (B, nW, N, heads*hd)
        return self.proj_drop(self.proj(x))

    def _explicit(self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, B: int) -> torch.Tensor:
        """softmax(QKᵀ/√d + bias + mask)·V written out: qkv (B*nW, N, 3, heads, hd) -> (B*nW, heads, N, hd)."""
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B*nW, heads, N, hd)
        attn = (q * self.scale) @ k.transpose(-2, -1)  # (B*nW, heads, N, N)
        attn = attn + bias
        if mask is not None:  # the same mask for window w of every image
            nW, N = mask.shape[0], mask.shape[1]
            attn = (attn.view(B, nW, -1, N, N) + mask.unsqueeze(1)).flatten(0, 1)  # (B*nW, heads, N, N)
        attn = self.attn_drop(attn.softmax(dim=-1))
        return attn @ v

    @torch.jit.unused
    def forward_row_blocks(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`forward` for CPU inference, ~2048 tokens of windows at a time (:mod:`swinlite.kernels.row_blocks`)."""
        bias = self.rel_pos().to(x.dtype)  # (heads, N, N)
        mask = None if mask is None else mask.to(x.dtype)
        qkv, proj = self.qkv, self.proj
        return window_attention_rows(x, qkv.weight, qkv.bias, proj.weight, proj.bias, bias, mask, self.scale)

    @torch.jit.unused
    def _recomputed(self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, B: int) -> torch.Tensor:
        return recomputed_window_attention(qkv, bias, mask, B, self.scale)


def _build_rel_pos(
    kind: str, window: tuple[int, int], num_heads: int, device: torch.device | str | None, dtype: torch.dtype | None
) -> nn.Module:
    if kind == "table":
        return RelativePositionBias(window, num_heads, device=device, dtype=dtype)
    if kind == "cpb":
        from .rel_pos_cpb import ContinuousPositionBias

        return ContinuousPositionBias(window, num_heads, device=device, dtype=dtype)
    raise ValueError(f"rel_pos must be 'table' or 'cpb', got {kind!r}")


@register_notrace_module  # the padding and shift depend on the input size, a Python branch fx cannot trace
class SwinBlock(nn.Module):
    """One W-MSA (``shift=False``) or SW-MSA (``shift=True``) block.

    Any map size works: the normalised map is padded bottom/right to a window multiple before the
    cyclic shift by window // 2, attention runs per window, and the result is shifted back and
    cropped. With ``mask_padding`` the padded tokens are masked as keys; without, they take part in
    attention as zero vectors (torchvision's behaviour).

    Args:
        dim: channels C.
        num_heads: attention heads.
        window: (Wh, Ww).
        shift: shift the windows by half a window (every second block in a stage).
        mlp_ratio: MLP hidden size over ``dim``.
        qkv_bias: learn q, k, v biases.
        drop_path: stochastic depth rate of both residual branches.
        proj_drop: dropout after the attention projection and in the MLP.
        attn_drop: dropout on attention weights.
        rel_pos: ``"table"`` or ``"cpb"``, see :class:`WindowAttention`.
        mask_padding: mask padded tokens as keys.
        fast: run the kernels of :mod:`swinlite.kernels` (False: the reference math of
            :meth:`_forward_reference`, the same function).
    """

    mask_padding: torch.jit.Final[bool]
    fast: torch.jit.Final[bool]

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window: tuple[int, int] = (7, 7),
        shift: bool = False,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_path: float = 0.0,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        rel_pos: str = "table",
        mask_padding: bool = True,
        fast: bool = True,
        norm_layer: type[nn.Module] = nn.LayerNorm,
        act_layer: type[nn.Module] = nn.GELU,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dd = {"device": device, "dtype": dtype}
        self.window: tuple[int, int] = (int(window[0]), int(window[1]))
        self.shift: tuple[int, int] = (self.window[0] // 2, self.window[1] // 2) if shift else (0, 0)
        self.mask_padding = mask_padding
        self.fast = fast
        self.norm1 = norm_layer(dim, **dd)
        self.attn = WindowAttention(
            dim, num_heads, self.window, qkv_bias, attn_drop, proj_drop, rel_pos=rel_pos, fast=fast, **dd
        )
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim, **dd)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer, drop=proj_drop, **dd)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, H, W, C] -> [B, H, W, C]."""
        if self.fast or torch.jit.is_scripting():  # einops does not script; the fast path is the same function
            return self._forward_fast(x)
        return self._forward_reference(x)

    @torch.jit.unused
    def _forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        """The plain math, in paper order (timm's ``SwinTransformerBlock._attn``): what the fast path must equal."""
        B, H, W, C = x.shape
        wh, ww = self.window
        shortcut = x
        x = self.norm1(x)
        # pad to a window multiple, bottom/right, before the shift: the shift never wraps real tokens onto padding
        pad_h, pad_w = pad_to_window((H, W), self.window)
        x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))  # (B, Hp, Wp, C)
        geometry = window_geometry((H, W), self.window, self.shift, self.mask_padding, x.device)
        sh, sw = geometry.shift  # no shift along a dimension that one window covers
        # cyclic shift
        x = torch.roll(x, shifts=(-sh, -sw), dims=(1, 2))
        # partition windows
        windows = rearrange(x, "b (nh wh) (nw ww) c -> b (nh nw) (wh ww) c", wh=wh, ww=ww)
        # W-MSA / SW-MSA, shift regions masked with -100, padded keys with -inf (mask_padding)
        windows = self.attn(windows, geometry.mask)
        # merge windows
        x = rearrange(windows, "b (nh nw) (wh ww) c -> b (nh wh) (nw ww) c", nh=x.shape[1] // wh, wh=wh, ww=ww)
        # reverse cyclic shift
        x = torch.roll(x, shifts=(sh, sw), dims=(1, 2))
        # crop the padding
        x = x[:, :H, :W]
        x = shortcut + self.drop_path1(x)
        # MLP: fc1, activation, dropout, fc2, dropout
        mlp = self.mlp
        y = mlp.drop2(mlp.fc2(mlp.drop1(mlp.act(mlp.fc1(self.norm2(x))))))
        return x + self.drop_path2(y)

    def _forward_fast(self, x: torch.Tensor) -> torch.Tensor:
        """The reference math through the kernels: shift + partition as one gather, fused attention, GELU recompute."""
        if not torch.jit.is_scripting():  # TorchScript skips this branch
            if self.mlp.exact_gelu and use_row_blocks(self.training, x):  # CPU inference
                return self._forward_row_blocks(x)
        x = x + self.drop_path1(self._window_attention(self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))

    @torch.jit.unused
    def _forward_row_blocks(self, x: torch.Tensor) -> torch.Tensor:
        """The fast path for CPU inference: attention and MLP a few thousand tokens at a time (kernels.row_blocks)."""
        x = x + self._window_attention(self.norm1(x), row_blocks=True)
        return self.mlp.forward_row_blocks(x, self.norm2)  # x + mlp(norm2(x))

    def _window_attention(self, x: torch.Tensor, row_blocks: bool = False) -> torch.Tensor:
        """x: normalised map [B, H, W, C] -> attention output [B, H, W, C]."""
        B, H, W, C = x.shape
        geometry = window_geometry((H, W), self.window, self.shift, self.mask_padding, x.device)
        Hp, Wp = geometry.padded
        if Hp > H or Wp > W:
            x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))  # (B, Hp, Wp, C)
        # shift + partition as one gather: (B, Hp*Wp, C) -> (B, nW*N, C), window-major
        windows = gather_tokens(x.reshape(B, Hp * Wp, C), geometry.index, geometry.inverse)
        num_windows = (Hp // self.window[0]) * (Wp // self.window[1])
        windows = windows.view(B, num_windows, -1, C)  # (B, nW, N, C)
        if row_blocks:
            x = self.attn.forward_row_blocks(windows, geometry.mask)
        else:
            x = self.attn(windows, geometry.mask)
        x = gather_tokens(x.view(B, Hp * Wp, C), geometry.inverse, geometry.index)  # merge + reverse shift
        x = x.view(B, Hp, Wp, C)
        if Hp > H or Wp > W:  # a no-op slice would still cost a zero fill and a copy in backward
            x = x[:, :H, :W]
        return x
