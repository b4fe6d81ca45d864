"""Cyclic shift + window partition as one token gather, whose backward is the inverse gather.

The reference path (``SwinBlock`` with ``fast=False``) rolls the map, partitions it into windows and,
after attention, merges the windows and rolls back: two copies each way. The fast path replaces each
pair by one ``index_select`` over a precomputed permutation, and its backward by the inverse
``index_select`` instead of autograd's zero fill + scatter-add. The gather runs over the rows of the
[B*L, C] view, whole rows copied at a time: ``index_select`` along dim 1 of the [B, L, C] tensor took
about 1.7x as long (benchmarks/kernels.md).

- Saves: two copies per direction in forward and backward, and the zero fill of a scatter; measure with
  ``python scripts/benchmark.py --size tiny --batch 8 --precisions fp32`` (figures: benchmarks/kernels.md).
- Torch ops: public ones only (``index_select``). TorchScript cannot script the autograd Function, so a
  scripted model runs the same gather with autograd's own backward (a scatter-add; same gradient).
- Pinned by: ``tests/kernels/test_gather.py`` (against a naive loop) and
  ``tests/layers/test_swin_block.py`` (fast block against the reference block, values and gradients).
"""

import torch


def shifted_window_index(
    padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token order of "cyclic shift, then window partition" as one gather, and its inverse.

    ``x.flatten(1, 2)[:, index]`` equals the windows of ``torch.roll(x, (-sh, -sw), (1, 2))``, window-major
    and row-major inside each window, flattened to [B, nW*N, C], for a map [B, Hp, Wp, C];
    ``y[:, inverse]`` undoes it.

    Args:
        padded: map size (Hp, Wp), multiples of the window.
        window: (Wh, Ww).
        shift: cyclic shift (sh, sw), already reduced by ``effective_shift``.
        device: device of the indices.

    Returns:
        (index, inverse), both int64 of length Hp*Wp.
    """
    grid = torch.arange(padded[0] * padded[1], device=device).view(padded[0], padded[1])
    grid = torch.roll(grid, shifts=(-shift[0], -shift[1]), dims=(0, 1))
    nh, nw = padded[0] // window[0], padded[1] // window[1]
    index = grid.view(nh, window[0], nw, window[1]).permute(0, 2, 1, 3).flatten()  # (nW*N,), window-major
    inverse = torch.empty_like(index)
    inverse[index] = torch.arange(index.numel(), device=device)
    return index, inverse


def _take_tokens(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[:, index]`` for x [B, L, C], as one gather of whole rows of the [B*L, C] view."""
    B, L, C = x.shape
    rows = (torch.arange(B, device=x.device) * L).unsqueeze(1) + index  # (B, L): row of x.reshape(B*L, C)
    return x.reshape(B * L, C).index_select(0, rows.view(-1)).view(B, L, C)


class _GatherTokens(torch.autograd.Function):
    """``x[:, index]`` for a permutation ``index``, whose backward is the gather ``grad[:, inverse]``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(inverse)
        return _take_tokens(x, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (inverse,) = ctx.saved_tensors
        return _take_tokens(grad, inverse), None, None


def gather_tokens(x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """Reorder the tokens of x [B, L, C] by the permutation ``index`` (``inverse`` is its inverse)."""
    if torch.jit.is_scripting():
        return _take_tokens(x, index)
    return _GatherTokens.apply(x, index, inverse)
