"""Window geometry for (shifted) window attention: padding, shifts, partition, attention masks, one cache.

All functions are pure. Feature maps are channels-last, (B, H, W, C). A map of size (H, W) is padded
bottom/right with zeros to (Hp, Wp), multiples of the window, *before* the cyclic shift, so the shift
never wraps real tokens onto padding and the padding stays at the border of the un-shifted map.
"""

import functools
from typing import NamedTuple

import torch

from ..kernels.gather import shifted_window_index


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


class WindowGeometry(NamedTuple):
    """Everything a block needs about its windows at one map size; shared between calls, never modify.

    Attributes:
        padded: padded map size (Hp, Wp), multiples of the window.
        shift: cyclic shift (sh, sw) after :func:`effective_shift`.
        index: gather order of "shift, then partition" over the Hp*Wp tokens (fast path).
        inverse: the inverse permutation (fast path).
        mask: additive mask [nW, N, N] in float32 (:func:`window_attention_mask`), or None.
    """

    padded: tuple[int, int]
    shift: tuple[int, int]
    index: torch.Tensor
    inverse: torch.Tensor
    mask: torch.Tensor | None


def build_window_geometry(
    size: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], mask_padding: bool, device: torch.device
) -> WindowGeometry:
    """The :class:`WindowGeometry` of a map of un-padded ``size``, for a block with ``shift`` (before reduction)."""
    pad_h, pad_w = pad_to_window(size, window)
    padded = (size[0] + pad_h, size[1] + pad_w)
    shift = effective_shift(padded, window, shift)
    index, inverse = shifted_window_index(padded, window, shift, device)
    mask = window_attention_mask(size, window, shift, mask_padding, device, torch.float32)
    return WindowGeometry(padded, shift, index, inverse, mask)


@functools.lru_cache(maxsize=64)
def _cached_window_geometry(
    size: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], mask_padding: bool, device: torch.device
) -> WindowGeometry:
    with torch.inference_mode(False), torch.no_grad():  # plain tensors, usable inside and outside inference mode
        return build_window_geometry(size, window, shift, mask_padding, device)


def window_geometry(
    size: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], mask_padding: bool, device: torch.device
) -> WindowGeometry:
    """:func:`build_window_geometry`, built once per (size, window, shift, mask_padding, device) and shared.

    TorchScript and ``torch.compile`` build it inside the graph instead (the graph holds one input size).
    """
    if torch.jit.is_scripting() or torch.compiler.is_compiling():
        return build_window_geometry(size, window, shift, mask_padding, device)
    return _cached_window_geometry(size, window, shift, mask_padding, device)
