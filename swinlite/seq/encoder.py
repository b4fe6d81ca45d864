"""A small encoder for 1-D sequences (signals, token embeddings) built from relative-position attention blocks.

There is no absolute position embedding: positions enter only through the relative terms of
:class:`~swinlite.seq.RelPosSelfAttention1d`, so the encoder is translation-equivariant up to
the clipping distance and accepts any length up to ``max_len``.

Example::

    encoder = RelPosSeqEncoder(dim=64, depth=2, num_heads=4, max_len=256, max_distance=32)
    tokens = encoder(x, key_padding_mask=padding)  # x [B, L, 64], padding [B, L] bool -> [B, L, 64]
"""

from __future__ import annotations

import math
import numbers

import torch
from timm.layers import DropPath, Mlp
from torch import nn

from .attention import RelPosSelfAttention1d, _check_int, check_input_dtype


class RelPosEncoderBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``.

    Args:
        dim: channels C.
        num_heads: attention heads.
        max_len: longest sequence accepted.
        mlp_ratio: MLP hidden size over ``dim``.
        drop_path: stochastic depth rate of both residual branches.
        attn_kwargs: passed to :class:`RelPosSelfAttention1d` (``max_distance``, ``value_rel``, ``mode``, ...).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        max_len: int,
        mlp_ratio: float = 4.0,
        drop_path: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **attn_kwargs: object,
    ) -> None:
        super().__init__()
        dd = {"device": device, "dtype": dtype}
        self.norm1 = nn.LayerNorm(dim, **dd)
        self.attn = RelPosSelfAttention1d(dim, num_heads, max_len, **attn_kwargs, **dd)
        self.norm2 = nn.LayerNorm(dim, **dd)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=nn.GELU, **dd)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(
        self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        """x: [B, L, C]; key_padding_mask: bool [B, L], True at padding. Returns [B, L, C]."""
        x = x + self.drop_path(self.attn(self.norm1(x), key_padding_mask, causal))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class RelPosSeqEncoder(nn.Module):
    """A stack of :class:`RelPosEncoderBlock` and a final LayerNorm, for [B, L, C] sequences.

    Args:
        dim: channels C.
        depth: number of blocks.
        num_heads: attention heads per block.
        max_len: longest sequence accepted.
        max_distance: clipping distance of the relative positions (None: ``max_len - 1``).
        value_rel: add relative embeddings to the values too.
        mode: ``"shaw"`` (relative key/value embeddings) or ``"bias"`` (one scalar per offset and head).
        mlp_ratio: MLP hidden size over ``dim``.
        drop_path_rate: stochastic depth, rising linearly from 0 over the blocks to this value.
        method: how the Shaw terms are computed (``"auto"``, ``"gather"``, ``"skew"``: :class:`RelPosSelfAttention1d`).
        qkv_bias: learn biases for q, k, v.
        attn_drop: dropout on the attention weights.
        proj_drop: dropout after the attention's output projection.
    """

    def __init__(
        self,
        dim: int,
        depth: int,
        num_heads: int,
        max_len: int,
        max_distance: int | None = None,
        value_rel: bool = False,
        mode: str = "shaw",
        mlp_ratio: float = 4.0,
        drop_path_rate: float = 0.0,
        method: str = "auto",
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dim, depth = _check_encoder_args(dim, depth, mlp_ratio, drop_path_rate)
        # plain Python, not torch.linspace: a tensor would be created on the default device (meta, under
        # ``with torch.device("meta")``), where .tolist() fails
        drop_path = [drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]
        self.blocks = nn.ModuleList(
            RelPosEncoderBlock(
                dim,
                num_heads,
                max_len,
                mlp_ratio,
                drop_path[i],
                device=device,
                dtype=dtype,
                max_distance=max_distance,
                value_rel=value_rel,
                mode=mode,
                method=method,
                qkv_bias=qkv_bias,
                attn_drop=attn_drop,
                proj_drop=proj_drop,
            )
            for i in range(depth)
        )
        self.norm = nn.LayerNorm(dim, device=device, dtype=dtype)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """Every block's relative position tables (:meth:`RelPosSelfAttention1d.no_weight_decay`), by full name."""
        return {f"blocks.{i}.attn.{n}" for i, block in enumerate(self.blocks) for n in block.attn.no_weight_decay()}

    def forward(
        self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        """Encode a batch of sequences.

        Args:
            x: sequences [B, L, C], L <= max_len (checked in eager, not by a ``torch.jit.trace``:
                :class:`RelPosSelfAttention1d`).
            key_padding_mask: bool [B, L], True at padding (never attended; outputs there are meaningless).
            causal: each position sees only itself and earlier positions.

        Returns:
            Normalised tokens [B, L, C].

        Raises:
            ValueError: for x not of the encoder's dtype (outside autocast), and as :class:`RelPosSelfAttention1d`.
        """
        check_input_dtype(x, self.norm.weight.dtype, "encoder")  # before the first LayerNorm's own dtype error
        for block in self.blocks:
            x = block(x, key_padding_mask, causal)
        return self.norm(x)


_MAX_WIDTH = 2**63  # torch's sizes are int64


def _check_encoder_args(dim: int, depth: int, mlp_ratio: float, drop_path_rate: float) -> tuple[int, int]:
    """ValueError naming the argument, at build time: a negative rate silently turned stochastic depth off and a
    ratio below 1 / dim built a zero-width MLP. Returns ``dim`` and ``depth`` as ints; the attention layer checks
    its own arguments."""
    dim, depth = _check_int("dim", dim, 1), _check_int("depth", depth, 1)
    for name, value in (("mlp_ratio", mlp_ratio), ("drop_path_rate", drop_path_rate)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{name} must be a real number, got {value!r}")
    # int() of an infinite width raised OverflowError here and a width past int64 a TypeError inside torch; nan
    # compared False everywhere
    if not math.isfinite(mlp_ratio) or dim * mlp_ratio >= _MAX_WIDTH:
        raise ValueError(f"mlp_ratio must be finite with dim * mlp_ratio < 2**63 (an int64 width), got {mlp_ratio!r}")
    if not (mlp_ratio > 0 and int(dim * mlp_ratio) >= 1):
        raise ValueError(
            f"mlp_ratio must be > 0 with at least one hidden unit (dim * mlp_ratio >= 1), got {mlp_ratio!r}"
        )
    if not 0.0 <= drop_path_rate < 1.0:
        raise ValueError(f"drop_path_rate must be in [0, 1), got {drop_path_rate!r}")
    return dim, depth
