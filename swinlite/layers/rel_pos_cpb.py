"""Swin-V2 continuous position bias: an MLP of log-spaced relative coordinates instead of a free table."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from .rel_pos_index import relative_position_index


def log_spaced_relative_coords(
    window: Sequence[int], pretrained_window: Sequence[int] | None = None, device: torch.device | None = None
) -> torch.Tensor:
    """Every offset of the window, normalised to [-8, 8] per axis and log-spaced, one row per table row.

    Rows are ordered like the rows of :func:`relative_position_index` (first axis most significant),
    and hold ``sign(t) * log2(1 + |t|) / log2(8)`` with ``t = 8 * d / (w - 1)`` for the offset
    ``d = coords_i - coords_j`` on each axis (``w`` from ``pretrained_window`` when given, so a model
    fine-tuned at a larger window sees the same coordinates for the same offsets).

    Args:
        window: window size per axis.
        pretrained_window: window the bias was trained at, or None for ``window``.
        device: where to build the coordinates.

    Returns:
        Float32 tensor of shape (prod(2w - 1), len(window)).
    """
    norm = window if pretrained_window is None else pretrained_window
    if len(norm) != len(window):
        raise ValueError(f"pretrained_window {tuple(norm)} must have as many axes as window {tuple(window)}")
    axes = [
        torch.arange(-(w - 1), w, device=device, dtype=torch.float32) / max(n - 1, 1) * 8  # in [-8, 8]
        for w, n in zip(window, norm, strict=True)
    ]
    coords = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).flatten(0, -2)  # (rows, ndim)
    return torch.sign(coords) * torch.log2(coords.abs() + 1.0) / math.log2(8)


class ContinuousPositionBias(nn.Module):
    """Swin-V2 relative position bias: ``16 * sigmoid(MLP(log-spaced offset))`` per head, as (heads, N, N).

    A drop-in for :class:`RelativePositionBias` (same ``forward()`` contract, same offset order and
    sign convention ``coords_i - coords_j``). The MLP is Linear(ndim, 512) -> ReLU -> Linear(512,
    heads, no bias), with ndim = len(window) (2 for Swin). Because the bias is a function of the
    coordinates rather than a table, it extends to other window sizes without resizing.

    Args:
        window: window size per axis.
        num_heads: number of attention heads.
        pretrained_window: window the MLP was trained at (Swin-V2 transfer), or None.
        hidden: width of the MLP.
    """

    def __init__(
        self,
        window: Sequence[int],
        num_heads: int,
        pretrained_window: Sequence[int] | None = None,
        hidden: int = 512,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.window = tuple(int(w) for w in window)
        self.pretrained_window = None if pretrained_window is None else tuple(int(w) for w in pretrained_window)
        self.num_heads = num_heads
        self.num_tokens = math.prod(self.window)
        num_offsets = math.prod(2 * w - 1 for w in self.window)
        dd = {"device": device, "dtype": dtype}
        self.mlp = nn.Sequential(
            nn.Linear(len(self.window), hidden, **dd),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, num_heads, bias=False, **dd),
        )
        self.register_buffer("coords", torch.empty(num_offsets, len(self.window), **dd), persistent=False)
        self.register_buffer(
            "index", torch.empty(self.num_tokens, self.num_tokens, dtype=torch.long, device=device), persistent=False
        )
        self.init_non_persistent_buffers()

    def init_non_persistent_buffers(self) -> None:
        """Fill the coordinate and index buffers; call after ``to_empty()`` when built on the meta device."""
        with torch.no_grad():
            device = self.index.device
            self.coords.copy_(log_spaced_relative_coords(self.window, self.pretrained_window, device))
            self.index.copy_(relative_position_index(self.window, device=device))

    def forward(self) -> torch.Tensor:
        """Returns the bias, shape (heads, N, N), values in (0, 16)."""
        table = self.mlp(self.coords)  # (rows, heads)
        bias = table[self.index.view(-1)].view(self.num_tokens, self.num_tokens, self.num_heads)  # (N, N, heads)
        return 16 * torch.sigmoid(bias.permute(2, 0, 1))  # (heads, N, N)
