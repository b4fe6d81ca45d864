"""Relative position index for N-D windows."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def relative_position_index(window: Sequence[int], device: torch.device | None = None) -> torch.Tensor:
    """Index of every pair's coordinate offset into a table of prod(2w - 1) rows.

    Tokens are numbered in row-major order over the window. For the pair (i, j) the offset is
    ``d = coords_i - coords_j`` (note the sign: query minus key), shifted per axis to ``d + w - 1``
    in ``[0, 2w - 2]`` and read as a mixed-radix number with radices ``2w - 1``. For a 2-D window
    (Wh, Ww) this is exactly the Swin formula ``(dh + Wh - 1) * (2Ww - 1) + (dw + Ww - 1)``.
    Two pairs get the same index if and only if they have the same offset.

    Args:
        window: window size per axis, e.g. ``(7,)``, ``(7, 7)`` or ``(2, 7, 7)``.
        device: where to build the index.

    Returns:
        Long tensor of shape (N, N) with N = prod(window).
    """
    if len(window) == 0 or any(int(w) < 1 for w in window):
        raise ValueError(f"window must be a non-empty sequence of positive ints, got {tuple(window)}")
    axes = [torch.arange(int(w), device=device) for w in window]
    coords = torch.stack(torch.meshgrid(*axes, indexing="ij")).flatten(1)  # (D, N)
    offsets = coords[:, :, None] - coords[:, None, :]  # (D, N, N)
    index = torch.zeros_like(offsets[0])
    for axis, w in enumerate(window):
        index = index * (2 * int(w) - 1) + offsets[axis] + int(w) - 1  # mixed radix, first axis most significant
    return index
