"""Window geometry for (shifted) window attention: partition, reverse, shifts and attention masks.

All functions are pure. Feature maps are channels-last, (B, H, W, C). A map of size (H, W) is padded
bottom/right with zeros to (Hp, Wp), multiples of the window, *before* the cyclic shift, so the shift
never wraps real tokens onto padding and the padding stays at the border of the un-shifted map.
"""

import functools

import torch


def pad_to_window(size: tuple[int, int], window: tuple[int, int]) -> tuple[int, int]:
    """Zero padding (bottom, right) that makes ``size`` a multiple of ``window``."""
    return (-size[0]) % window[0], (-size[1]) % window[1]


def effective_shift(padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int]) -> tuple[int, int]:
    """Per dimension, no shift where one window already covers the whole padded map."""
    return (shift[0] if padded[0] > window[0] else 0, shift[1] if padded[1] > window[1] else 0)


def window_partition(x: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """Split a map into non-overlapping windows.

    Args:
        x: map [B, Hp, W, C] with Hp, Wp multiples of the window.
        window: (Wh, Ww).

    Returns:
        Windows [B, nW, Wh*Ww, C], windows in row-major order, tokens row-major inside each.
    """
    B, H, W, C = x.shape
    wh, ww = window
    x = x.view(B, H // wh, wh, W // ww, ww, C)  # (B, nH, Wh, nW_, Ww, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(B, (H // wh) * (W // ww), wh * ww, C)  # (B, nW, N, C)


def window_reverse(windows: torch.Tensor, window: tuple[int, int], height: int, width: int) -> torch.Tensor:
    """Inverse of :func:`window_partition`: windows [B, nW, N, C] -> map [B, height, width, C]."""
    B, _, _, C = windows.shape
    wh, ww = window
    x = windows.view(B, height // wh, width // ww, wh, ww, C)  # (B, nH, nW_, Wh, Ww, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(B, height, width, C)


def shifted_window_index(
    padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token order of "cyclic shift, then window partition" as one gather, and its inverse.

    ``x.flatten(1, 2)[:, index]`` equals ``window_partition(torch.roll(x, (-sh, -sw), (1, 2)), window)``
    flattened to [B, nW*N, C], for a map [B, Hp, Wp, C]; ``y[:, inverse]`` undoes it. One gather replaces
    the roll and the 6-D permute copy of the partition (and the same twice on the way back).

    Args:
        padded: map size (Hp, Wp), multiples of the window.
        window: (Wh, Ww).
        shift: cyclic shift (sh, sw), already reduced by :func:`effective_shift`.
        device: device of the indices.

    Returns:
        (index, inverse), both int64 of length Hp*Wp.
    """
    grid = torch.arange(padded[0] * padded[1], device=device).view(padded[0], padded[1])
    grid = torch.roll(grid, shifts=(-shift[0], -shift[1]), dims=(0, 1))
    index = window_partition(grid[None, :, :, None], window).flatten()  # (nW*N,)
    inverse = torch.empty_like(index)
    inverse[index] = torch.arange(index.numel(), device=device)
    return index, inverse


@functools.lru_cache(maxsize=64)
def cached_shifted_window_index(
    padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`shifted_window_index`, built once per (size, window, shift, device) and shared; never modify."""
    with torch.inference_mode(False), torch.no_grad():
        return shifted_window_index(padded, window, shift, device)


class _GatherTokens(torch.autograd.Function):
    """``x[:, index]`` for a permutation ``index``, whose backward is the gather ``grad[:, inverse]``.

    Autograd's own backward of a gather scatter-adds into zeros; for a permutation the inverse
    gather gives the same gradient without the zero fill and the accumulation.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(inverse)
        return x.index_select(1, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (inverse,) = ctx.saved_tensors
        return grad.index_select(1, inverse), None, None


def gather_tokens(x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """Reorder the tokens of x [B, L, C] by the permutation ``index`` (``inverse`` is its inverse)."""
    if torch.jit.is_scripting():
        return x.index_select(1, index)
    return _GatherTokens.apply(x, index, inverse)


def _shift_regions(length: int, window: int, shift: int, device: torch.device) -> torch.Tensor:
    """Region id (0, 1, 2) of each position along one axis of the shifted map."""
    ids = torch.zeros(length, dtype=torch.long, device=device)
    if shift > 0:
        ids[length - window : length - shift] = 1
        ids[length - shift :] = 2
    return ids


def _map_to_windows(m: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """[Hp, Wp] -> [nW, Wh*Ww], the token layout of :func:`window_partition`."""
    return window_partition(m[None, :, :, None], window)[0, :, :, 0]


def window_attention_mask(
    size: tuple[int, int],
    window: tuple[int, int],
    shift: tuple[int, int],
    mask_padding: bool,
    device: torch.device,
    dtype: torch.dtype,
) -> torch.Tensor | None:
    """Additive attention mask for the windows of one (shifted) block.

    Two kinds of key are masked: keys from another shift region than the query (tokens that were not
    neighbours before the cyclic shift; -100 as in the reference), and, when ``mask_padding``, padded
    keys (``-inf``: exactly zero weight). Every window holds at least one real token of each query's
    region (padding is thinner than a window), so no row is fully ``-inf``.

    Args:
        size: un-padded map size (H, W).
        window: (Wh, Ww).
        shift: cyclic shift (sh, sw) applied to the padded map, already reduced by :func:`effective_shift`.
        mask_padding: mask the padded keys.
        device: device of the mask.
        dtype: dtype of the mask.

    Returns:
        Mask [nW, N, N] to add to the logits, or None when nothing is masked.
    """
    pad_h, pad_w = pad_to_window(size, window)
    padded = (size[0] + pad_h, size[1] + pad_w)
    has_shift = shift[0] > 0 or shift[1] > 0
    has_pad = mask_padding and (pad_h > 0 or pad_w > 0)
    if not has_shift and not has_pad:
        return None
    num_windows = (padded[0] // window[0]) * (padded[1] // window[1])
    n = window[0] * window[1]
    mask = torch.zeros(num_windows, n, n, dtype=dtype, device=device)
    if has_shift:
        rows = _shift_regions(padded[0], window[0], shift[0], device)
        cols = _shift_regions(padded[1], window[1], shift[1], device)
        regions = _map_to_windows(rows[:, None] * 3 + cols[None, :], window)  # (nW, N)
        mask = mask.masked_fill(regions[:, :, None] != regions[:, None, :], -100.0)  # the reference's value
    if has_pad:
        # position p of the shifted map holds the token at (p + shift) % padded of the padded map
        real_rows = (torch.arange(padded[0], device=device) + shift[0]) % padded[0] < size[0]
        real_cols = (torch.arange(padded[1], device=device) + shift[1]) % padded[1] < size[1]
        is_pad = _map_to_windows(~(real_rows[:, None] & real_cols[None, :]), window)  # (nW, N)
        mask = mask.masked_fill(is_pad[:, None, :], float("-inf"))
    return mask


@functools.lru_cache(maxsize=64)
def cached_window_attention_mask(
    size: tuple[int, int],
    window: tuple[int, int],
    shift: tuple[int, int],
    mask_padding: bool,
    device: torch.device,
    dtype: torch.dtype,
) -> torch.Tensor | None:
    """:func:`window_attention_mask`, built once per (size, window, shift, device, dtype) and shared.

    The returned tensor is shared by every caller: never modify it in place.
    """
    with torch.inference_mode(False), torch.no_grad():
        return window_attention_mask(size, window, shift, mask_padding, device, dtype)
