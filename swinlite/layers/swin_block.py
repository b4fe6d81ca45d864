"""Swin Transformer block: (shifted) window attention and an MLP, pre-norm residuals."""

import torch
import torch.nn.functional as F
from timm.layers import DropPath, register_notrace_module
from torch import nn

from .mlp import Mlp
from .window import (
    cached_shifted_window_index,
    cached_window_attention_mask,
    effective_shift,
    gather_tokens,
    pad_to_window,
    shifted_window_index,
    window_attention_mask,
)
from .window_attention import WindowAttention


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
        fused_attn: use fused attention kernels where they apply (False: the explicit softmax path).
    """

    mask_padding: torch.jit.Final[bool]

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
        fused_attn: bool = True,
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
        self.norm1 = norm_layer(dim, **dd)
        self.attn = WindowAttention(
            dim, num_heads, self.window, qkv_bias, attn_drop, proj_drop, rel_pos=rel_pos, fused=fused_attn, **dd
        )
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim, **dd)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer, drop=proj_drop, **dd)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def _mask(
        self, size: tuple[int, int], shift: tuple[int, int], device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor | None:
        if torch.jit.is_scripting() or torch.compiler.is_compiling():  # built into the graph, at a fixed size
            return window_attention_mask(size, self.window, shift, self.mask_padding, device, dtype)
        return cached_window_attention_mask(size, self.window, shift, self.mask_padding, device, dtype)

    def _index(
        self, padded: tuple[int, int], shift: tuple[int, int], device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if torch.jit.is_scripting() or torch.compiler.is_compiling():
            return shifted_window_index(padded, self.window, shift, device)
        return cached_shifted_window_index(padded, self.window, shift, device)

    def _window_attention(self, x: torch.Tensor) -> torch.Tensor:
        """x: normalised map [B, H, W, C] -> attention output [B, H, W, C]."""
        B, H, W, C = x.shape
        pad_h, pad_w = pad_to_window((H, W), self.window)
        if pad_h > 0 or pad_w > 0:
            x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))  # (B, Hp, Wp, C)
        Hp, Wp = H + pad_h, W + pad_w
        shift = effective_shift((Hp, Wp), self.window, self.shift)
        index, inverse = self._index((Hp, Wp), shift, x.device)
        mask = self._mask((H, W), shift, x.device, self.attn.qkv.weight.dtype)
        # shift + partition as one gather: (B, Hp*Wp, C) -> (B, nW*N, C), window-major
        windows = gather_tokens(x.reshape(B, Hp * Wp, C), index, inverse)
        num_windows = (Hp // self.window[0]) * (Wp // self.window[1])
        x = self.attn(windows.view(B, num_windows, -1, C), mask)  # (B, nW, N, C)
        x = gather_tokens(x.view(B, Hp * Wp, C), inverse, index).view(B, Hp, Wp, C)  # un-partition + un-shift
        if pad_h > 0 or pad_w > 0:  # a no-op slice would still cost a zero fill and a copy in backward
            x = x[:, :H, :W]
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, H, W, C] -> [B, H, W, C]."""
        x = x + self.drop_path1(self._window_attention(self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))
