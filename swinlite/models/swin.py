"""Swin Transformer (Liu et al., ICCV 2021): hierarchical vision transformer with shifted windows; and Swin-V2.

The reference model, in paper order, top to bottom: window geometry (padding, shift, the shift/padding mask),
relative position bias (Swin's table, Swin-V2's continuous position bias), window attention, the block, patch
merging, the stage, the model. Swin-V2 (Liu et al., CVPR 2022) is a block type beside each V1 piece: scaled
cosine attention (:class:`WindowAttentionV2`), res-post-norm (:class:`SwinV2Block`), patch merging that
normalises after the reduction (:class:`PatchMergingV2`); the model's ``block`` argument chooses
(:data:`BLOCK_TYPES`). Nothing here is a kernel: ``timm.create_model(name, fast=False)`` runs this
file as written. With ``fast=True`` (the default) the variant builder (:mod:`swinlite.models.variants`) hands
the built model to :func:`swinlite.fast.accelerate`, which swaps the block, attention and MLP modules for
subclasses that run the same function through kernels, with the same parameters and ``state_dict``.

Layout: ``patch_embed`` -> ``layers[0..3]`` -> ``norm`` -> ``head``. Stage i is "downsample + blocks"
(stage 0 has no downsample), so the output of ``layers[i]`` is feature level i, at stride
patch_size * 2**i. Tokens are channels-last [B, H, W, C] inside the network; the public feature
outputs (``forward_intermediates``, ``features_only``) are NCHW unless asked otherwise. Shapes use B batch,
H x W map, Hp x Wp padded map, Wh x Ww window, nW windows per image, N = Wh*Ww tokens per window, C channels.
"""

import dataclasses
import math
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from timm.layers import (
    ClassifierHead,
    DropPath,
    Mlp,
    PatchEmbed,
    get_act_layer,
    register_notrace_module,
    to_2tuple,
)
from timm.models import checkpoint_seq
from timm.models._features import feature_take_indices
from torch import nn
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.nn.modules import module as torch_module

from ..convert import (
    check_loads_whole,
    convert_when_loaded,
    crop_rel_pos_bias_table,
    embed_rel_pos_bias_table,
    first_keys,
    resize_rel_pos_bias_table,
)
from ..wording import counted
from .checks import (
    at_least_one_image,
    check_build_args,
    check_feature_indices,
    check_image_input,
    check_num_classes,
    crop_to_patches,
    first_images,
    is_int,
    pad_to_patches,
)
from .tensor_cache import MiB, tensor_cache

# --- window geometry -------------------------------------------------------------------------------------------
# A map of size (H, W) is padded bottom/right with zeros to (Hp, Wp), multiples of the window, *before* the
# cyclic shift, so the shift never wraps real tokens onto padding and the padding stays at the border of the
# un-shifted map. All functions are pure; window_geometry caches what depends only on the size.
# The same functions build the geometry inside an exported graph, where H and W are symbolic (torch.export with
# dynamic sizes, see `exporting`): every size-dependent choice is arithmetic on the sizes (torch.sym_ite, comparisons
# with aranges), never a Python branch on a size, so one graph serves every size.


def exporting() -> bool:
    """True while ``torch.export`` traces the model: sizes may be symbolic, nothing size-dependent is cached.

    Reads the flag ``torch.export`` sets rather than calling ``torch.compiler.is_exporting()``: before torch 2.14,
    dynamo replaced that call by ``True`` under ``torch.compile`` too (pytorch/pytorch#176347), which sent compiled
    models down the symbolic path (a graph break per block, no cached geometry)."""
    if not torch.jit.is_scripting():  # TorchScript compiles no code under this condition
        return torch.compiler._is_exporting_flag
    return False


def recording_graph() -> bool:
    """True while ``torch.export`` or ``torch.jit.trace`` records the forward: the recording takes the reference's
    composition, never a fast path's kernels, oneDNN ops or values kept between calls."""
    return exporting() or torch.jit.is_tracing()


def padded_size(size: tuple[int, int], window: tuple[int, int]) -> tuple[int, int]:
    """``size`` rounded up to a multiple of ``window`` per dimension: the map after its bottom/right zero padding."""
    return (size[0] + window[0] - 1) // window[0] * window[0], (size[1] + window[1] - 1) // window[1] * window[1]


def pad_to_window(size: tuple[int, int], window: tuple[int, int]) -> tuple[int, int]:
    """Zero padding (bottom, right) that makes ``size`` a multiple of ``window``."""
    padded = padded_size(size, window)
    return padded[0] - size[0], padded[1] - size[1]


def effective_shift(padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int]) -> tuple[int, int]:
    """Per dimension, no shift where one window already covers the whole padded map."""
    if exporting():  # symbolic sizes: the choice stays in the graph
        return _symbolic_shift(padded, window, shift)
    return (shift[0] if padded[0] > window[0] else 0, shift[1] if padded[1] > window[1] else 0)


@torch.jit.unused
def _symbolic_shift(padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int]) -> tuple[int, int]:
    """:func:`effective_shift` for symbolic sizes: ``torch.sym_ite(c, a, b)`` is ``a if c else b`` in the graph. A
    size known at export (a plain bool ``c``) takes Python's conditional: dynamo's strict export refuses ``sym_ite``
    of a bool."""
    return _sym_if(padded[0] > window[0], shift[0], 0), _sym_if(padded[1] > window[1], shift[1], 0)


@torch.jit.unused
def _sym_if(condition: bool | torch.SymBool, a: int, b: int) -> int | torch.SymInt:
    """``a if condition else b``, in the graph (``torch.sym_ite``) where ``condition`` is symbolic."""
    if isinstance(condition, bool):
        return a if condition else b
    return torch.sym_ite(condition, a, b)


def stage_geometry_text(size: tuple[int, int], window: tuple[int, int], shift: tuple[int, int]) -> str:
    """A stage's map of ``size`` as its blocks take it, in words: padded to ``window`` or not, and along which
    dimensions the blocks that ``shift`` do (:func:`effective_shift`): '56x56 shifted', '7x7 unshifted',
    '5x12 padded to 7x14 shifted along W only'."""
    padded = padded_size(size, window)
    shifted = [axis for axis, s in zip("HW", effective_shift(padded, window, shift), strict=True) if s]
    text = f"{size[0]}x{size[1]}" + (f" padded to {padded[0]}x{padded[1]}" if padded != size else "")
    if not shifted:
        return text + " unshifted"
    return text + (" shifted" if len(shifted) == 2 else f" shifted along {shifted[0]} only")


def cyclic_shift(x: torch.Tensor, shift: tuple[int, int], inverse: bool = False) -> torch.Tensor:
    """Roll a map [B, Hp, Wp, ...] by ``shift`` (sh, sw) up and left, or down and right with ``inverse``.

    ``torch.roll(x, (-sh, -sw), (1, 2))`` (``(sh, sw)`` with ``inverse``); an exported graph takes the same roll as
    slices and a concatenation, which ONNX accepts for a shift computed from the input size.
    """
    if exporting():
        return _sliced_roll(x, shift, inverse)
    return torch.roll(x, (shift[0], shift[1]) if inverse else (-shift[0], -shift[1]), (1, 2))


@torch.jit.unused
def _sliced_roll(x: torch.Tensor, shift: tuple[int, int], inverse: bool) -> torch.Tensor:
    """:func:`cyclic_shift` as slices and a concatenation per dimension."""
    for dim, s in ((1, shift[0]), (2, shift[1])):
        split = x.shape[dim] - s if inverse else s  # the part from ``split`` on comes first
        x = torch.cat([x.narrow(dim, split, x.shape[dim] - split), x.narrow(dim, 0, split)], dim)
    return x


def window_partition(x: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """Split a map [B, Hp, Wp, C] (multiples of the window) into windows [B, nW, Wh*Ww, C], both row-major."""
    B, H, W, C = x.shape
    wh, ww = window
    x = x.view(B, H // wh, wh, W // ww, ww, C)  # b (nh wh) (nw ww) c -> b nh wh nw ww c
    x = x.permute(0, 1, 3, 2, 4, 5).clone(memory_format=torch.contiguous_format)  # the copy reshape makes, stated
    return x.view(B, (H // wh) * (W // ww), wh * ww, C)  # b (nh nw) (wh ww) c


def window_reverse(windows: torch.Tensor, window: tuple[int, int], height: int, width: int) -> torch.Tensor:
    """Merge windows [B, nW, Wh*Ww, C] back into a map [B, height, width, C]: the inverse of window_partition."""
    B, _, _, C = windows.shape
    wh, ww = window
    x = windows.view(B, height // wh, width // ww, wh, ww, C)  # b (nh nw) (wh ww) c -> b nh nw wh ww c
    x = x.permute(0, 1, 3, 2, 4, 5).clone(memory_format=torch.contiguous_format)  # the copy reshape makes, stated
    return x.view(B, height, width, C)  # b (nh wh) (nw ww) c


def non_negative_remainder(x: torch.Tensor, divisor: int) -> torch.Tensor:
    """``x % divisor`` for x >= 0 and a divisor that may be symbolic, written as ``x - x // divisor * divisor``:
    ONNX conversion takes a symbolic divisor there, not in ``aten.remainder``."""
    return x - x // divisor * divisor


def window_order(
    padded: tuple[int, int], window: tuple[int, int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column in the map [Hp, Wp] of every token in the order of :func:`window_partition` (window-major, then
    row-major inside each window): two int64 [Hp*Wp].

    Arithmetic on one arange, so that a graph with symbolic sizes traces a few 1-D ops instead of the views of a
    6-D partition (torch.export reasons symbolically about every size and stride of those)."""
    n = window[0] * window[1]
    position = torch.arange(padded[0] * padded[1], device=device)
    win, inner = position // n, position % n
    per_row = padded[1] // window[1]  # windows per row of windows
    rows = win // per_row * window[0] + inner // window[1]
    cols = non_negative_remainder(win, per_row) * window[1] + inner % window[1]
    return rows, cols


def _maybe_nonzero(value: int) -> bool:
    """``value != 0``, or True for a symbolic value not known to be 0 (in an exported graph: build the mask)."""
    if exporting():
        return not _known_zero(value)
    return value != 0


@torch.jit.unused
def _known_zero(value: int) -> bool:
    return statically_known_true(value == 0)


def mask_kinds(
    size: tuple[int, int], padded: tuple[int, int], shift: tuple[int, int], mask_padding: bool
) -> tuple[bool, bool]:
    """Whether the mask of :func:`window_attention_mask` separates shift regions, and whether it masks padded keys
    (``shift`` already reduced by :func:`effective_shift`): without either, a block has no mask."""
    has_shift = _maybe_nonzero(shift[0]) or _maybe_nonzero(shift[1])
    has_pad = mask_padding and (_maybe_nonzero(padded[0] - size[0]) or _maybe_nonzero(padded[1] - size[1]))
    return has_shift, has_pad


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
        Mask [nW, N, N] to add to the logits, or None when nothing is masked (in an exported graph: when that
        holds at every size).
    """
    padded = padded_size(size, window)
    has_shift, has_pad = mask_kinds(size, padded, shift, mask_padding)
    if not has_shift and not has_pad:
        return None
    num_windows = (padded[0] // window[0]) * (padded[1] // window[1])
    n = window[0] * window[1]
    mask = torch.zeros(num_windows, n, n, dtype=dtype, device=device)
    rows, cols = window_order(padded, window, device)  # of the shifted map, in window order
    if has_shift:
        # regions along each axis: 1 from ``length - window`` on, 2 from ``length - shift`` on (none without a
        # shift: the last window is then one region, as every other)
        row_region = (rows >= padded[0] - window[0]).long() + (rows >= padded[0] - shift[0]).long()
        col_region = (cols >= padded[1] - window[1]).long() + (cols >= padded[1] - shift[1]).long()
        regions = (row_region * 3 + col_region).view(num_windows, n)  # (nW, N)
        mask = mask.masked_fill(regions[:, :, None] != regions[:, None, :], -100.0)  # the reference's value
    if has_pad:
        # the token at (row, col) of the shifted map came from ((row + sh) % Hp, (col + sw) % Wp)
        is_real = (non_negative_remainder(rows + shift[0], padded[0]) < size[0]) & (
            non_negative_remainder(cols + shift[1], padded[1]) < size[1]
        )
        mask = mask.masked_fill(~is_real.view(num_windows, 1, n), float("-inf"))
    return mask


class WindowGeometry(NamedTuple):
    """What a block needs about its windows at one map size; shared between calls, never modify.

    Attributes:
        padded: padded map size (Hp, Wp), multiples of the window.
        shift: cyclic shift (sh, sw) after :func:`effective_shift`.
        mask: additive mask [nW, N, N] in float32 (:func:`window_attention_mask`), or None.
    """

    padded: tuple[int, int]
    shift: tuple[int, int]
    mask: torch.Tensor | None


def build_window_geometry(
    size: tuple[int, int],
    window: tuple[int, int],
    shift: tuple[int, int],
    mask_padding: bool,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
) -> WindowGeometry:
    """The :class:`WindowGeometry` of a map of un-padded ``size``, for a block with ``shift`` (before reduction); the
    mask in ``dtype``."""
    padded = padded_size(size, window)
    shift = effective_shift(padded, window, shift)
    mask = window_attention_mask(size, window, shift, mask_padding, device, dtype)
    return WindowGeometry(padded, shift, mask)


# 128 MiB: the masks of every block of a Swin-B with 12x12 windows at 800x1333 (103 MiB in fp32), or of a Swin-T
# at three such sizes (34 MiB each; at 224x224 0.8 MiB): docs/performance.md, "Memory kept across input sizes"
_cached_window_geometry = tensor_cache(max_bytes=128 * MiB)(build_window_geometry)


def window_geometry(
    size: tuple[int, int],
    window: tuple[int, int],
    shift: tuple[int, int],
    mask_padding: bool,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
) -> WindowGeometry:
    """:func:`build_window_geometry`, built once per (size, window, shift, mask_padding, device, dtype) and shared, in a
    cache bounded in bytes (:mod:`.tensor_cache`; :func:`~swinlite.models.clear_caches` empties it).

    ``dtype``: of the mask, the attention's (a block passes its input's): a mask in another dtype would be converted
    on every call, inside the softmax kernel of a compiled graph.
    TorchScript and ``torch.export`` build it inside the graph instead (``torch.export`` with symbolic sizes: one
    graph for every size); so does ``torch.compile``, except for the mask where :func:`cache_op_serves` says so.
    """
    if torch.jit.is_scripting() or exporting():
        return build_window_geometry(size, window, shift, mask_padding, device, dtype)
    if torch.compiler.is_compiling():
        return _compiled_window_geometry(size, window, shift, mask_padding, device, dtype)
    return _cached_window_geometry(size, window, shift, mask_padding, device, dtype)


# --- the cache inside torch.compile ----------------------------------------------------------------------------
# A mask built in a compiled graph is a function of an arange, which inductor fuses into the kernels that read it:
# the softmax (or the SDPA mask) recomputes the regions of every key for every image and head on every call, and
# freezing does not fold it (it folds what derives from weights, not tensors built from constructors). So on the
# CPU, at static sizes, the compiled graph calls an op that returns a copy of the cached mask instead (a copy: the
# graph owns its outputs). Not on CUDA: a CUDA graph replays the copy from the cache's memory, which an eviction
# could free. Measured: benchmarks/cpu_amd_tiny_b8_compile_4.md.


@torch.jit.unused
def cache_op_serves(sizes: Sequence[int], device: torch.device) -> bool:
    """Whether ``torch.compile`` takes a geometry tensor from the cache through an op (CPU, sizes not symbolic)
    rather than building it in the graph."""
    return device.type == "cpu" and not any(isinstance(s, torch.SymInt) for s in sizes)


@torch.jit.unused
def _compiled_window_geometry(
    size: tuple[int, int],
    window: tuple[int, int],
    shift: tuple[int, int],
    mask_padding: bool,
    device: torch.device,
    dtype: torch.dtype,
) -> WindowGeometry:
    """:func:`window_geometry` while ``torch.compile`` traces: the mask through ``swinlite::window_mask`` where
    :func:`cache_op_serves`, else built in the graph."""
    if not cache_op_serves(size, device):
        return build_window_geometry(size, window, shift, mask_padding, device, dtype)
    padded = padded_size(size, window)
    reduced = effective_shift(padded, window, shift)
    has_shift, has_pad = mask_kinds(size, padded, reduced, mask_padding)
    if not (has_shift or has_pad):
        return WindowGeometry(padded, reduced, None)
    return WindowGeometry(
        padded, reduced, torch.ops.swinlite.window_mask(size, window, shift, mask_padding, device, dtype)
    )


@torch.library.custom_op("swinlite::window_mask", mutates_args=())
def _window_mask_op(
    size: list[int], window: list[int], shift: list[int], mask_padding: bool, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """A copy of the cached mask of :func:`window_geometry` (never None here: the caller checked)."""
    mask = _cached_window_geometry(tuple(size), tuple(window), tuple(shift), mask_padding, device, dtype).mask
    if mask is None:
        raise ValueError(f"no window mask at size {size}, window {window}, shift {shift}: nothing to return")
    return mask.clone()


@_window_mask_op.register_fake
def _(
    size: list[int], window: list[int], shift: list[int], mask_padding: bool, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    padded = padded_size((size[0], size[1]), (window[0], window[1]))
    n = window[0] * window[1]
    return torch.empty((padded[0] // window[0]) * (padded[1] // window[1]), n, n, device=device, dtype=dtype)


# --- relative position bias ------------------------------------------------------------------------------------
# One bias per (query, key) offset and head, added to the attention logits. Written for windows of any dimension:
# swinlite.seq uses the same index and table for 1-D sequences.


def check_window(window: int | Sequence[int], name: str = "window") -> tuple[int, ...]:
    """``window`` as a tuple of ints, an int ``w`` as ``(w, w)`` (timm's ``to_2tuple``, as the model takes its
    window); a ValueError naming ``name`` unless it is a non-empty sequence of positive ints (a float is refused, not
    truncated; a bool is no size)."""
    window = to_2tuple(window)
    if len(window) == 0 or not all(is_int(w) and w >= 1 for w in window):
        raise ValueError(f"{name} must be a non-empty sequence of positive ints, got {window}")
    return tuple(int(w) for w in window)


def relative_position_index(window: int | Sequence[int], device: torch.device | None = None) -> torch.Tensor:
    """Index of every pair's coordinate offset into a table of prod(2w - 1) rows.

    Tokens are numbered in row-major order over the window. For the pair (i, j) the offset is
    ``d = coords_i - coords_j`` (note the sign: query minus key), shifted per axis to ``d + w - 1``
    in ``[0, 2w - 2]`` and read as a mixed-radix number with radices ``2w - 1``. For a 2-D window
    (Wh, Ww) this is exactly the Swin formula ``(dh + Wh - 1) * (2Ww - 1) + (dw + Ww - 1)``.
    Two pairs get the same index if and only if they have the same offset.

    Args:
        window: window size per axis, e.g. ``(7,)``, ``(7, 7)`` or ``(2, 7, 7)`` (an int ``w``: ``(w, w)``).
        device: where to build the index.

    Returns:
        Long tensor of shape (N, N) with N = prod(window).
    """
    window = check_window(window)
    axes = [torch.arange(int(w), device=device) for w in window]
    coords = torch.stack(torch.meshgrid(*axes, indexing="ij")).flatten(1)  # (D, N)
    offsets = coords[:, :, None] - coords[:, None, :]  # (D, N, N)
    index = torch.zeros_like(offsets[0])
    for axis, w in enumerate(window):
        index = index * (2 * int(w) - 1) + offsets[axis] + int(w) - 1  # mixed radix, first axis most significant
    return index


@tensor_cache(max_bytes=16 * MiB)
def _cpu_relative_position_index(window: tuple[int, ...]) -> torch.Tensor:
    """:func:`relative_position_index` on the CPU, built once per window: the source the bias modules copy their
    index buffers from, so that a build on the meta device (whose ops are slow) computes none. Shared: copy it,
    never write to it."""
    return relative_position_index(window, device=torch.device("cpu"))


def sub_window_index(window: tuple[int, int], sub: tuple[int, int], device: torch.device | None = None) -> torch.Tensor:
    """:func:`relative_position_index` of a smaller 2-D window ``sub`` (Wh' <= Wh, Ww' <= Ww), into the offset table
    of ``window``: every pair's offset keeps its row of the larger table. Long (N', N'), N' = Wh' * Ww'. A ValueError
    naming both unless ``sub`` fits in ``window``, a bias's 2-D window (a larger one would read past its offsets)."""
    if len(window) != 2 or sub[0] > window[0] or sub[1] > window[1]:
        raise ValueError(f"sub-window {tuple(sub)} must fit in the bias's 2-D window {tuple(window)}")
    index = relative_position_index(sub, device=device)  # rows of sub's own table
    width = 2 * sub[1] - 1
    rows, cols = index // width, index % width  # offset + sub - 1 per axis
    return (rows + window[0] - sub[0]) * (2 * window[1] - 1) + cols + window[1] - sub[1]


@torch.jit.unused
def flat_sub_window_index(window: tuple[int, int], sub: tuple[int, int], device: torch.device) -> torch.Tensor:
    """:func:`sub_window_index`, flattened: built once per (window, sub, device) and shared in eager mode, in the graph
    under ``torch.compile`` (whose sizes may be symbolic), as :func:`window_geometry` does (its check of ``sub``
    runs once per pair in eager mode)."""
    if torch.compiler.is_compiling():
        return sub_window_index(window, sub, device).view(-1)
    return _cached_sub_window_index(window, sub, device)


@tensor_cache(max_bytes=16 * MiB)
def _cached_sub_window_index(window: tuple[int, int], sub: tuple[int, int], device: torch.device) -> torch.Tensor:
    return sub_window_index(window, sub, device).view(-1)


def filled_buffer(buffer: torch.Tensor, values: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``buffer`` with ``values`` copied in, or, where it is on the meta device and ``device`` (its module's weights')
    is not, a copy of ``values`` on ``device``: ``load_state_dict(..., assign=True)`` of a model built on the meta
    device takes the weights from the state dict and leaves the buffers it does not hold on the meta device, where
    ``copy_`` writes nothing."""
    if buffer.is_meta and device.type != "meta":
        return values.to(device, buffer.dtype, copy=True)
    with torch.no_grad():
        return buffer.copy_(values)


def check_filled(filled: bool, index: torch.Tensor, weights: torch.Tensor, owner: str) -> None:
    """A RuntimeError for a position bias (``owner``) whose index (and coordinate) buffers hold what memory held: a
    model built on the meta device and allocated by ``to_empty()``, without ``init_non_persistent_buffers()`` (the
    buffers are not in its state dict: loading one does not fill them), where the gather would read anything, or an
    index out of range; or that are still on the meta device beside ``weights`` that are not (loaded by
    ``load_state_dict(..., assign=True)``), where a gather returns memory as it is. ``filled``: the module's flag;
    ``index``: its index buffer (on the meta device: no values); ``weights``: its table, or a weight of its MLP."""
    if index.is_meta and not weights.is_meta:
        raise RuntimeError(
            f"{owner}'s buffers are on the meta device, its weights on {weights.device}: after "
            "load_state_dict(..., assign=True) of a model built on the meta device, call "
            "init_non_persistent_buffers() of every module that has it (it makes them on the weights' device)"
        )
    if not filled and not index.is_meta:
        raise RuntimeError(
            owner + "'s buffers were never filled: after to_empty() of a model built on the meta device, call "
            "init_non_persistent_buffers() of every module that has it (as for timm's Swin), or load a weights file "
            "with swinlite.load_model"
        )


class RelativePositionBias(nn.Module):
    """One learnable scalar per (relative offset, head), gathered into a (heads, N, N) bias.

    The table has prod(2w - 1) rows, one per offset ``coords_i - coords_j`` (query minus key), and
    ``num_heads`` columns, as in Swin. It works for 1-D windows (sequences) as well as 2-D and 3-D.

    Args:
        window: window size per axis (an int ``w``: the 2-D window ``(w, w)``).
        num_heads: number of attention heads.
    """

    def __init__(
        self,
        window: int | Sequence[int],
        num_heads: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.window = check_window(window)
        self.num_heads = num_heads
        self.num_tokens = math.prod(self.window)
        num_offsets = math.prod(2 * w - 1 for w in self.window)
        self.table = nn.Parameter(torch.empty(num_offsets, num_heads, device=device, dtype=dtype))
        self.register_buffer(
            "index", torch.empty(self.num_tokens, self.num_tokens, dtype=torch.long, device=device), persistent=False
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.table, std=0.02)
        self.init_non_persistent_buffers()

    def init_non_persistent_buffers(self) -> None:
        """Fill the index buffer; call after ``to_empty()`` or ``load_state_dict(..., assign=True)`` when the model was
        built on the meta device (:func:`filled_buffer`: on the table's device)."""
        self.index = filled_buffer(self.index, _cpu_relative_position_index(self.window), self.table.device)
        self.filled = not self.index.is_meta  # on the meta device nothing is filled: to_empty() leaves memory as is

    def set_window(self, window: int | Sequence[int], table: torch.Tensor) -> None:
        """Take a new window and its table ((prod(2w - 1), heads)), in place (``SwinTransformer.set_input_size``); a
        ValueError before anything changes unless the window is positive ints, and the table of its shape."""
        window = check_window(window)
        shape = (math.prod(2 * w - 1 for w in window), self.num_heads)
        if tuple(table.shape) != shape:
            raise ValueError(
                f"window {window} needs a table of shape {shape} (prod(2w - 1) rows, a column per head), "
                f"got {tuple(table.shape)}"
            )
        self.window = window
        self.num_tokens = math.prod(self.window)
        self.table = nn.Parameter(table.detach().clone(), requires_grad=self.table.requires_grad)
        index = _cpu_relative_position_index(self.window).to(table.device, copy=True)
        self.register_buffer("index", index, persistent=False)
        self.filled = not index.is_meta

    def forward(self, window: tuple[int, int] | None = None) -> torch.Tensor:
        """Returns the bias, shape (heads, N, N), contiguous: the kernels that add it to the logits read it along
        the keys (a compiled graph keeps it as a constant in this layout; benchmarks/kernels.md). With ``window``, a
        smaller 2-D window's (its offsets' rows of this table, :func:`sub_window_index`)."""
        check_filled(self.filled, self.index, self.table, "the position bias")
        index, tokens = self.index.view(-1), self.num_tokens
        if window is not None:
            index, tokens = flat_sub_window_index(self.window, window, index.device), window[0] * window[1]
        # one gather of the table's columns, (heads, N*N) contiguous: index_select, 3-5x faster than indexing on CPU.
        # One head: a view, whose gradient keeps the table's strides (DDP compares them exactly and warns; with more
        # heads autograd copies the transposed gradient to the table's layout itself)
        columns = self.table.reshape(1, -1) if self.num_heads == 1 else self.table.t()
        bias = columns.index_select(1, index)
        return bias.view(self.num_heads, tokens, tokens)


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


@tensor_cache(max_bytes=16 * MiB)
def _cpu_log_spaced_relative_coords(window: tuple[int, ...], pretrained_window: tuple[int, ...] | None) -> torch.Tensor:
    """:func:`log_spaced_relative_coords` on the CPU, built once per pair, as :func:`_cpu_relative_position_index`
    (the same values on every device the bias is built on). Shared: copy it, never write to it."""
    return log_spaced_relative_coords(window, pretrained_window, torch.device("cpu"))


class ContinuousPositionBias(nn.Module):
    """Swin-V2 relative position bias: ``16 * sigmoid(MLP(log-spaced offset))`` per head, as (heads, N, N).

    A drop-in for :class:`RelativePositionBias` (same ``forward()`` contract, same offset order and
    sign convention ``coords_i - coords_j``). The MLP is Linear(ndim, 512) -> ReLU -> Linear(512,
    heads, no bias), with ndim = len(window) (2 for Swin). Because the bias is a function of the
    coordinates rather than a table, it extends to other window sizes without resizing.

    Args:
        window: window size per axis (an int ``w``: the 2-D window ``(w, w)``).
        num_heads: number of attention heads.
        pretrained_window: window the MLP was trained at (Swin-V2 transfer; an int as ``window``), or None (timm's
            0) for ``window``.
        hidden: width of the MLP.
    """

    def __init__(
        self,
        window: int | Sequence[int],
        num_heads: int,
        pretrained_window: int | Sequence[int] | None = None,
        hidden: int = 512,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.window = check_window(window)
        self.pretrained_window = None  # coordinates normalised by the window itself (timm's 0)
        if pretrained_window is not None:
            self.pretrained_window = check_window(pretrained_window, "pretrained_window (None for the window's own)")
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
        """Fill the coordinate and index buffers; call after ``to_empty()`` or ``load_state_dict(..., assign=True)``
        when built on the meta device (:func:`filled_buffer`: on the MLP's device)."""
        device = next(self.mlp.parameters()).device
        coords = _cpu_log_spaced_relative_coords(self.window, self.pretrained_window)
        self.coords = filled_buffer(self.coords, coords, device)
        self.index = filled_buffer(self.index, _cpu_relative_position_index(self.window), device)
        self.filled = not self.index.is_meta  # on the meta device nothing is filled: to_empty() leaves memory as is

    def set_window(self, window: int | Sequence[int]) -> None:
        """Take a new window, in place (``SwinTransformer.set_input_size``): the MLP is a function of the offsets, so
        only the coordinates and the index change (normalised by ``pretrained_window``, else by the new window). A
        window that is not positive, or has another number of axes than the MLP takes coordinates, is a ValueError
        before anything changes."""
        window = check_window(window)
        if len(window) != len(self.window):
            raise ValueError(
                f"window {window} needs {len(self.window)} axes, one per coordinate the bias's MLP takes (its window "
                f"is {self.window})"
            )
        device, dtype = self.coords.device, self.coords.dtype
        coords = _cpu_log_spaced_relative_coords(window, self.pretrained_window).to(device, dtype, copy=True)
        index = _cpu_relative_position_index(window).to(device, copy=True)
        self.window = window
        self.num_tokens = math.prod(window)
        self.register_buffer("coords", coords, persistent=False)
        self.register_buffer("index", index, persistent=False)
        self.filled = not index.is_meta

    def forward(self, window: tuple[int, int] | None = None) -> torch.Tensor:
        """Returns the bias, shape (heads, N, N), contiguous as :class:`RelativePositionBias`'s, values in (0, 16);
        with ``window``, a smaller 2-D window's (the same offsets' values)."""
        return self.bias(self.offset_table(), window)

    def offset_table(self) -> torch.Tensor:
        """The MLP of every offset, (rows, heads): the bias's logits, once per row, before :meth:`bias` repeats rows."""
        check_filled(self.filled, self.index, self.mlp[0].weight, "the position bias")
        return self.mlp(self.coords)

    def bias(self, table: torch.Tensor, window: tuple[int, int] | None = None) -> torch.Tensor:
        """The (heads, N, N) bias of ``table`` (:meth:`offset_table`), of the layer's window or a smaller ``window``.

        The sigmoid runs after the gather, on the (heads, N*N) layout, as in timm: an elementwise op's last bit can
        depend on the element's place in the tensor (a vector's tail on AVX-512 CPUs), so only timm's order gives its
        bias bit for bit on every CPU."""
        check_filled(self.filled, self.index, table, "the position bias")
        index, tokens = self.index.view(-1), self.num_tokens
        if window is not None:
            index, tokens = flat_sub_window_index(self.window, window, index.device), window[0] * window[1]
        logits = table.t().index_select(1, index)  # one gather of its columns: (heads, N*N), contiguous
        return (16 * torch.sigmoid(logits)).view(self.num_heads, tokens, tokens)


REL_POS = {"table": RelativePositionBias, "cpb": ContinuousPositionBias}  # the ``rel_pos`` argument of the model


# --- window attention ------------------------------------------------------------------------------------------


def window_attn_mask(bias: torch.Tensor, mask: torch.Tensor | None, batch: int) -> torch.Tensor:
    """Relative position bias plus the block's mask: the additive term of the logits, (1 or B*nW, heads, N, N).

    Args:
        bias: (heads, N, N).
        mask: (nW, N, N) or None.
        batch: images B in the batch; windows are batch-major (index b * nW + w).

    Returns:
        (1, heads, N, N) without a mask, else (B*nW, heads, N, N) written by one broadcast add.
    """
    if mask is None:
        return bias.unsqueeze(0)
    nW, N = mask.shape[0], mask.shape[1]
    return (bias + mask.view(1, nW, 1, N, N).expand(batch, nW, 1, N, N)).flatten(0, 1)


def add_window_attn_mask(attn: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int) -> torch.Tensor:
    """Logits attn (B*nW, heads, N, N) plus the relative position bias and the block's mask.

    The (nW, heads, N, N) sum bias + mask is built for one image's windows and added to the logits viewed per image
    (as timm adds its mask): the same values as adding :func:`window_attn_mask`, without a batch-sized tensor written
    from two broadcast operands (a slow pattern for the CPU's elementwise kernels); the bias gradient is the same sum
    over images and windows.
    """
    if mask is None:
        return attn + bias.unsqueeze(0)
    windows, heads, n, _ = attn.shape
    return (attn.view(batch, mask.shape[0], heads, n, n) + (bias + mask.unsqueeze(1))).view(windows, heads, n, n)


def window_attention_weights(
    qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(QKᵀ·scale + bias + mask) per window and head, the attention weights before dropout, and V.

    Args:
        qkv: projections (B*nW, N, 3, heads, hd).
        bias: relative position bias (heads, N, N).
        mask: additive shift/padding mask (nW, N, N) or None; window w of every image gets ``mask[w]``.
        batch: B.
        scale: logit scale, hd ** -0.5.

    Returns:
        The weights (B*nW, heads, N, N) and V (B*nW, heads, N, hd).
    """
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B*nW, heads, N, hd)
    attn = (q * scale) @ k.transpose(-2, -1)  # (B*nW, heads, N, N)
    attn = add_window_attn_mask(attn, bias, mask, batch)
    return attn.softmax(dim=-1), v


def window_attention(
    qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, scale: float, dropout_p: float
) -> torch.Tensor:
    """softmax(QKᵀ·scale + bias + mask)·V per window and head, written out (:func:`window_attention_weights`).

    Args:
        qkv, bias, mask, batch, scale: as :func:`window_attention_weights`.
        dropout_p: dropout on the attention weights.

    Returns:
        (B*nW, heads, N, hd).
    """
    attn, v = window_attention_weights(qkv, bias, mask, batch, scale)  # (B*nW, heads, N, N), (B*nW, heads, N, hd)
    if dropout_p > 0.0:
        attn = F.dropout(attn, dropout_p)
    return attn @ v


def unhooked(*modules: nn.Module) -> bool:
    """Whether a path may skip the calls of ``modules`` (the fast paths, Swin-V2's projection reading ``qkv``'s
    weight), as far as hooks go: none of them has a forward or backward hook or pre-hook, and no global module hook
    is set (``register_module_forward_hook`` and kin), which every call would run. Hooks are registered after the
    build, so the modules check on every call; dict reads, which ``torch.compile`` traces as guards."""
    if (
        torch_module._global_forward_hooks
        or torch_module._global_forward_pre_hooks
        or torch_module._global_backward_hooks
        or torch_module._global_backward_pre_hooks
    ):
        return False
    for module in modules:
        if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks:
            return False
    return True


def kernel_dropout(attn_drop: nn.Module) -> float | None:
    """The rate at which a kernel drops the attention weights in place of calling ``attn_drop``: while it is the
    ``nn.Dropout`` built, unhooked (:func:`unhooked`), its ``p`` when it is in training mode, by its own flag (MC
    dropout turns the dropouts of a model in eval on), else 0; None for a module replaced or hooked after the build,
    whose call must run on the weights, as timm's Swin calls it. Dict reads, on each call."""
    if type(attn_drop) is not nn.Dropout or not unhooked(attn_drop):
        return None
    return attn_drop.p if attn_drop.training else 0.0


class WindowAttentionFrame(nn.Module):
    """What both window attentions do around their formula: project to q, k, v, attend with the position bias and
    the block's mask in the projections' dtype, the weights dropped by ``attn_drop`` (:meth:`attend`), merge the heads
    and project out. :class:`WindowAttention` and :class:`WindowAttentionV2` supply :meth:`project_qkv`,
    :meth:`attention_weights` and :meth:`attend_at_rate`, and the modules ``rel_pos``, ``attn_drop``, ``proj`` and
    ``proj_drop``."""

    num_heads: int
    head_dim: int

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, window: tuple[int, int] | None = None
    ) -> torch.Tensor:
        """Attend within windows.

        Args:
            x: window tokens [B, nW, N, C].
            mask: additive mask [nW, N, N] (shift regions, padding) or None.
            window: the windows' (Wh, Ww) where smaller than the layer's (a map smaller than the window), else None.

        Returns:
            Tokens [B, nW, N, C].
        """
        B, nW, N, C = x.shape
        qkv = self.project_qkv(x).view(B * nW, N, 3, self.num_heads, self.head_dim)  # (B*nW, N, 3, heads, hd)
        bias = self.rel_pos(window).to(qkv.dtype)  # position bias (heads, N, N)
        mask = None if mask is None else mask.to(qkv.dtype)
        x = self.attend(qkv, bias, mask, B)  # (B*nW, heads, N, hd)
        x = x.transpose(1, 2).reshape(B, nW, N, C)  # (B*nW, N, heads, hd) -> (B, nW, N, heads*hd)
        return self.proj_drop(self.proj(x))

    def project_qkv(self, x: torch.Tensor) -> torch.Tensor:
        """Window tokens [..., C] -> q, k, v [..., 3C]."""
        raise NotImplementedError

    def attend(self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int) -> torch.Tensor:
        """qkv (B*nW, N, 3, heads, hd), bias (heads, N, N), mask (nW, N, N) or None -> (B*nW, heads, N, hd): the
        formula with ``attn_drop``'s rate (:meth:`attend_at_rate`, :func:`kernel_dropout`); where ``attn_drop``'s call
        must run (replaced or hooked), the weights (:meth:`attention_weights`) through it. TorchScript reads the rate
        from the ``nn.Dropout`` and its mode."""
        if not torch.jit.is_scripting():  # TorchScript skips this branch
            dropout_p = kernel_dropout(self._modules["attn_drop"])
            if dropout_p is None:
                attn, v = self.attention_weights(qkv, bias, mask, batch)  # (B*nW, heads, N, N), (B*nW, heads, N, hd)
                return self.attn_drop(attn) @ v
            return self.attend_at_rate(qkv, bias, mask, batch, dropout_p)
        return self.attend_at_rate(qkv, bias, mask, batch, self.attn_drop.p if self.attn_drop.training else 0.0)

    def attention_weights(
        self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """qkv, bias, mask as :meth:`attend` -> the attention weights (B*nW, heads, N, N) before dropout, and V
        (B*nW, heads, N, hd)."""
        raise NotImplementedError

    def attend_at_rate(
        self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, dropout_p: float
    ) -> torch.Tensor:
        """:meth:`attend` with the attention weights dropped at rate ``dropout_p``."""
        raise NotImplementedError


class WindowAttention(WindowAttentionFrame):
    """Self-attention over the tokens of each window, plus a per-head relative position bias.

    softmax(QKᵀ/√d + bias + mask)·V per window and head (:func:`window_attention`): the bias and the block's
    shift/padding mask are added to the logits.

    Args:
        dim: channels of the input tokens.
        num_heads: attention heads; must divide ``dim``.
        window: (Wh, Ww).
        qkv_bias: learn a bias for the q, k, v projections.
        attn_drop: dropout on the attention weights.
        proj_drop: dropout after the output projection.
        rel_pos: ``"table"`` (Swin's learnable table) or ``"cpb"`` (Swin-V2 continuous position bias).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window: tuple[int, int],
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        rel_pos: str = "table",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if dim % num_heads != 0:
            raise ValueError(f"dim ({dim}) must be divisible by num_heads ({num_heads})")
        if rel_pos not in REL_POS:
            raise ValueError(f"rel_pos must be 'table' or 'cpb', got {rel_pos!r}")
        dd = {"device": device, "dtype": dtype}
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias, **dd)
        self.rel_pos = REL_POS[rel_pos](window, num_heads, **dd)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim, **dd)
        self.proj_drop = nn.Dropout(proj_drop)

    def project_qkv(self, x: torch.Tensor) -> torch.Tensor:
        """Window tokens [..., C] -> q, k, v [..., 3C]."""
        return self.qkv(x)

    def attention_weights(
        self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`window_attention_weights` with this layer's scale."""
        return window_attention_weights(qkv, bias, mask, batch, self.scale)

    def attend_at_rate(
        self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, dropout_p: float
    ) -> torch.Tensor:
        """:func:`window_attention` with this layer's scale (the fast path swaps its kernels in here)."""
        return window_attention(qkv, bias, mask, batch, self.scale, dropout_p)


def cosine_eps(dtype: torch.dtype) -> float:
    """The floor of |q| and |k| in cosine attention: 1e-12 as the reference's ``F.normalize``; in float16, where
    1e-12 is 0 and a zero vector (the key of a padded token) would give 0/0 = NaN, its smallest normal 2**-14."""
    return 2.0**-14 if dtype == torch.float16 else 1e-12


def cosine_tau(logit_scale: torch.Tensor) -> torch.Tensor:
    """τ of cosine attention from its learned log τ (heads, 1, 1): exp(min(logit_scale, log 100)), at most 100."""
    return torch.clamp(logit_scale, max=math.log(100.0)).exp()


def cosine_window_attention_weights(
    qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, logit_scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Swin-V2's scaled cosine attention weights, softmax(cos(Q, K)·τ + bias + mask) per window and head, before
    dropout, and V.

    Args:
        qkv: projections (B*nW, N, 3, heads, hd).
        bias: continuous position bias (heads, N, N).
        mask: additive shift/padding mask (nW, N, N) or None; window w of every image gets ``mask[w]``.
        batch: B.
        logit_scale: learned log τ per head (heads, 1, 1); τ = exp(min(logit_scale, log 100)).

    Returns:
        The weights (B*nW, heads, N, N) and V (B*nW, heads, N, hd).
    """
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B*nW, heads, N, hd)
    eps = cosine_eps(q.dtype)
    attn = F.normalize(q, dim=-1, eps=eps) @ F.normalize(k, dim=-1, eps=eps).transpose(-2, -1)  # (B*nW, heads, N, N)
    attn = attn * cosine_tau(logit_scale)  # τ per head, at most 100
    attn = add_window_attn_mask(attn, bias, mask, batch)
    return attn.softmax(dim=-1), v


def cosine_window_attention(
    qkv: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    batch: int,
    logit_scale: torch.Tensor,
    dropout_p: float,
) -> torch.Tensor:
    """Swin-V2's scaled cosine attention, softmax(cos(Q, K)·τ + bias + mask)·V per window and head, written out
    (:func:`cosine_window_attention_weights`).

    Args:
        qkv, bias, mask, batch, logit_scale: as :func:`cosine_window_attention_weights`.
        dropout_p: dropout on the attention weights.

    Returns:
        (B*nW, heads, N, hd).
    """
    attn, v = cosine_window_attention_weights(qkv, bias, mask, batch, logit_scale)  # (B*nW, heads, N, N), (.., hd)
    if dropout_p > 0.0:
        attn = F.dropout(attn, dropout_p)
    return attn @ v


class WindowAttentionV2(WindowAttentionFrame):
    """Swin-V2 window attention: scaled cosine attention plus the continuous position bias.

    softmax(cos(Q, K)·τ + 16·sigmoid(CPB) + mask)·V per window and head (:func:`cosine_window_attention`), with a
    learned τ per head (initially 10, at most 100) instead of 1/√d, and :class:`ContinuousPositionBias` instead
    of a table. Queries and values have learned biases, keys none (as the reference: ``q_bias``, ``v_bias``).
    The forward of :class:`WindowAttentionFrame`, as :class:`WindowAttention`'s.

    Args:
        dim: channels of the input tokens.
        num_heads: attention heads; must divide ``dim``.
        window: (Wh, Ww).
        qkv_bias: learn the q and v biases.
        attn_drop: dropout on the attention weights.
        proj_drop: dropout after the output projection.
        pretrained_window: window the position bias was pre-trained at (its coordinates are normalised by it),
            or None for ``window``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window: tuple[int, int],
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        pretrained_window: tuple[int, int] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if dim % num_heads != 0:
            raise ValueError(f"dim ({dim}) must be divisible by num_heads ({num_heads})")
        dd = {"device": device, "dtype": dtype}
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False, **dd)
        self.q_bias = nn.Parameter(torch.empty(dim, **dd)) if qkv_bias else None
        self.v_bias = nn.Parameter(torch.empty(dim, **dd)) if qkv_bias else None
        self.logit_scale = nn.Parameter(torch.empty((num_heads, 1, 1), **dd))  # log τ
        self.rel_pos = ContinuousPositionBias(window, num_heads, pretrained_window, **dd)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim, **dd)
        self.proj_drop = nn.Dropout(proj_drop)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """τ = 10 in every head (log τ = log 10) and zero q and v biases, as the reference initialises them."""
        nn.init.constant_(self.logit_scale, math.log(10.0))
        if self.q_bias is not None and self.v_bias is not None:
            nn.init.zeros_(self.q_bias)
            nn.init.zeros_(self.v_bias)

    def project_qkv(self, x: torch.Tensor) -> torch.Tensor:
        """Window tokens [..., C] -> q, k, v [..., 3C], with the q and v biases and no key bias: by ``qkv``'s weight
        while it is the ``nn.Linear`` built, unhooked (:func:`unhooked`), as timm's SwinV2 computes it; else by its
        call (:meth:`called_qkv`)."""
        if not torch.jit.is_scripting():  # TorchScript skips this branch
            qkv = self._modules["qkv"]
            if type(qkv) is not nn.Linear or not unhooked(qkv):
                return self.called_qkv(x)
        return F.linear(x, self.qkv.weight, self.merged_qkv_bias())

    @torch.jit.unused
    def called_qkv(self, x: torch.Tensor) -> torch.Tensor:
        """``qkv(x)`` plus the merged bias, in its output's dtype: the projection of a ``qkv`` replaced or hooked
        after the build (an adapter, pruning, a quantized layer, forward hooks), whose call must run."""
        qkv = self.qkv(x)  # [..., 3C]
        bias = self.merged_qkv_bias()
        return qkv if bias is None else qkv + bias.to(qkv.dtype)

    def merged_qkv_bias(self) -> torch.Tensor | None:
        """The q, k, v projection's bias [3C]: the q bias, zeros (no key bias), the v bias; or None."""
        if self.q_bias is not None and self.v_bias is not None:
            return torch.cat((self.q_bias, torch.zeros_like(self.q_bias), self.v_bias))
        return None

    def attention_weights(
        self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`cosine_window_attention_weights` with this layer's log τ."""
        return cosine_window_attention_weights(qkv, bias, mask, batch, self.logit_scale)

    def attend_at_rate(
        self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, dropout_p: float
    ) -> torch.Tensor:
        """:func:`cosine_window_attention` with this layer's log τ (a fast path swaps its kernels in here)."""
        return cosine_window_attention(qkv, bias, mask, batch, self.logit_scale, dropout_p)


# --- Swin block ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BlockOptions:
    """What every block of a model shares, whatever its type: the model builds one and its stages pass it down.

    Attributes:
        mlp_ratio: MLP hidden size over the block width.
        qkv_bias: learn q, k, v biases (V2: q and v).
        proj_drop: dropout after the attention projection and in the MLP.
        attn_drop: dropout on attention weights.
        mask_padding: mask padded tokens as keys; without, they take part in attention as zero vectors
            (torchvision's behaviour).
        norm_layer: the blocks' norm.
        act_layer: the MLP's activation.
    """

    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    proj_drop: float = 0.0
    attn_drop: float = 0.0
    mask_padding: bool = True
    norm_layer: type[nn.Module] = nn.LayerNorm
    act_layer: type[nn.Module] = nn.GELU


DEFAULT_OPTIONS = BlockOptions()  # the blocks' and stages' default (frozen: one instance serves them all)


@register_notrace_module  # the padding and shift depend on the input size, a Python branch fx cannot trace
class SwinBlock(nn.Module):
    """One W-MSA (``shift=False``) or SW-MSA (``shift=True``) block: ``x + attn(norm1(x))``, ``x + mlp(norm2(x))``.

    Any map size works: the normalised map is padded bottom/right to a window multiple before the
    cyclic shift by window // 2, attention runs per window, and the result is shifted back and
    cropped. With ``options.mask_padding`` the padded tokens are masked as keys; without, they take part in
    attention as zero vectors (torchvision's behaviour).

    Args:
        dim: channels C.
        num_heads: attention heads.
        window: (Wh, Ww).
        shift: shift the windows by half a window (every second block in a stage).
        drop_path: stochastic depth rate of both residual branches.
        rel_pos: ``"table"`` or ``"cpb"``, see :class:`WindowAttention`.
        options: MLP ratio, biases, dropouts, padding mask, norm and activation (:class:`BlockOptions`).
        attention: the block's attention where a subclass builds its own (:class:`SwinV2Block`: a
            :class:`WindowAttentionV2`), or None for a :class:`WindowAttention` with ``rel_pos``.
    """

    mask_padding: torch.jit.Final[bool]

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window: tuple[int, int] = (7, 7),
        shift: bool = False,
        drop_path: float = 0.0,
        rel_pos: str = "table",
        options: BlockOptions = DEFAULT_OPTIONS,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        attention: WindowAttentionFrame | None = None,
    ) -> None:
        super().__init__()
        dd = {"device": device, "dtype": dtype}
        o = options
        self.window: tuple[int, int] = (int(window[0]), int(window[1]))
        self.shift: tuple[int, int] = (self.window[0] // 2, self.window[1] // 2) if shift else (0, 0)
        self.mask_padding = o.mask_padding
        self.norm1 = o.norm_layer(dim, **dd)
        if attention is None:
            attention = WindowAttention(
                dim, num_heads, self.window, o.qkv_bias, o.attn_drop, o.proj_drop, rel_pos, **dd
            )
        self.attn = attention
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = o.norm_layer(dim, **dd)
        hidden = int(dim * o.mlp_ratio)
        self.mlp = Mlp(dim, hidden, act_layer=o.act_layer, drop=o.proj_drop, **dd)  # timm's: fc1, act, fc2
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, H, W, C] -> [B, H, W, C]."""
        x = x + self.drop_path1(self._attn(self.norm1(x)))
        x = x + self.drop_path2(self.mlp(self.norm2(x)))
        return x

    def _attn(self, x: torch.Tensor) -> torch.Tensor:
        """(Shifted) window attention on the normalised map x [B, H, W, C] -> [B, H, W, C] (timm's ``_attn``)."""
        B, H, W, C = x.shape
        geometry = window_geometry((H, W), self.window, self.shift, self.mask_padding, x.device, x.dtype)
        Hp, Wp = geometry.padded
        sh, sw = geometry.shift  # no shift along a dimension that one window covers

        # pad for resolution not divisible by window size; bottom/right, before the shift, which then never
        # wraps real tokens onto padding
        x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))  # (B, Hp, Wp, C)

        # cyclic shift
        x = cyclic_shift(x, (sh, sw))

        # partition windows
        windows = window_partition(x, self.window)  # (B, nW, Wh*Ww, C)

        # W-MSA/SW-MSA: keys of another shift region masked with -100, padded keys with -inf (mask_padding)
        windows = self.attn(windows, geometry.mask)

        # merge windows
        x = window_reverse(windows, self.window, Hp, Wp)  # (B, Hp, Wp, C)

        # reverse cyclic shift
        x = cyclic_shift(x, (sh, sw), inverse=True)

        # crop the padding
        return x[:, :H, :W]


@register_notrace_module  # as SwinBlock: the padding and shift depend on the input size
class SwinV2Block(SwinBlock):
    """Swin-V2 block, res-post-norm: ``x + norm1(attn(x))``, ``x + norm2(mlp(x))``, with :class:`WindowAttentionV2`.

    The windows are :class:`SwinBlock`'s (``_attn``: pad before the cyclic shift, padded keys masked with
    ``mask_padding``); the LayerNorms move from before each branch to after it, inside the residual, and start at
    zero (weight and bias, as the reference initialises them), so that each block starts as the identity.

    Args:
        pretrained_window: window the position bias was pre-trained at, or None (see :class:`WindowAttentionV2`).
        The others: see :class:`SwinBlock`.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window: tuple[int, int] = (8, 8),
        shift: bool = False,
        drop_path: float = 0.0,
        pretrained_window: tuple[int, int] | None = None,
        options: BlockOptions = DEFAULT_OPTIONS,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        dd = {"device": device, "dtype": dtype}
        o = options
        attention = WindowAttentionV2(
            dim, num_heads, window, o.qkv_bias, o.attn_drop, o.proj_drop, pretrained_window, **dd
        )
        super().__init__(dim, num_heads, window, shift, drop_path, options=options, attention=attention, **dd)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The block's own initialisation, over its norms' own: the norms that end its branches start at zero (weight
        and bias), so that the block starts as the identity. ``SwinTransformer.init_weights`` calls it after the
        norms' ``reset_parameters()`` (``Module.apply`` reaches a module after its children)."""
        for norm in (self.norm1, self.norm2):
            for affine in (getattr(norm, "weight", None), getattr(norm, "bias", None)):  # a norm may have no bias
                if affine is not None:
                    nn.init.zeros_(affine)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, H, W, C] -> [B, H, W, C]."""
        x = x + self.drop_path1(self.norm1(self._attn(x)))  # res-post-norm: the norm ends the branch
        x = x + self.drop_path2(self.norm2(self.mlp(x)))
        return x


# --- patch merging ---------------------------------------------------------------------------------------------


class PatchMerging(nn.Module):
    """Concatenate each 2x2 neighbourhood, LayerNorm(4C), project to ``out_dim`` (2C by default).

    The concatenation order is the reference's: x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2],
    x[1::2, 1::2]. Odd heights/widths are zero-padded bottom/right first.

    Args:
        dim: input channels C.
        out_dim: output channels, ``2 * dim`` when None.
    """

    def __init__(
        self,
        dim: int,
        out_dim: int | None = None,
        norm_layer: type[nn.Module] = nn.LayerNorm,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.out_dim = out_dim or 2 * dim
        self.norm = norm_layer(4 * dim, device=device, dtype=dtype)
        self.reduction = nn.Linear(4 * dim, self.out_dim, bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, H, W, C] -> [B, ceil(H/2), ceil(W/2), out_dim]."""
        return self.reduction(self.norm(self._merge(x)))

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, H, W, C] -> each 2x2 neighbourhood concatenated, [B, ceil(H/2), ceil(W/2), 4C]."""
        B, H, W, C = x.shape
        h, w = (H + 1) // 2, (W + 1) // 2
        if not isinstance(H, int) or 2 * h > H or 2 * w > W:  # symbolic sizes (export) or odd: F.pad by 0 copies
            x = F.pad(x, (0, 0, 0, 2 * w - W, 0, 2 * h - H))  # (B, 2h, 2w, C)
        # (B, h, dh, w, dw, C) -> (B, h, w, dw, dh, C): dh varies fastest, the reference order
        return x.reshape(B, h, 2, w, 2, C).permute(0, 1, 3, 4, 2, 5).flatten(3)  # (B, h, w, 4C)


class PatchMergingV2(PatchMerging):
    """Swin-V2 patch merging: the same concatenation, projected first, then LayerNorm(``out_dim``).

    Args:
        dim: input channels C.
        out_dim: output channels, ``2 * dim`` when None.
    """

    def __init__(
        self,
        dim: int,
        out_dim: int | None = None,
        norm_layer: type[nn.Module] = nn.LayerNorm,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(dim, out_dim, norm_layer, device, dtype)
        self.norm = norm_layer(self.out_dim, device=device, dtype=dtype)  # after the reduction

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, H, W, C] -> [B, ceil(H/2), ceil(W/2), out_dim]."""
        return self.norm(self.reduction(self._merge(x)))


# block type -> (block, patch merging): the ``block`` argument of the stage and the model
BLOCK_TYPES: dict[str, tuple[type[SwinBlock], type[PatchMerging]]] = {
    "v1": (SwinBlock, PatchMerging),
    "v2": (SwinV2Block, PatchMergingV2),
}


# --- stage and model -------------------------------------------------------------------------------------------


class SwinStage(nn.Module):
    """Patch merging (except in the first stage) followed by ``depth`` blocks, alternating W-MSA and SW-MSA.

    Args:
        dim: input channels.
        out_dim: channels of the blocks (``dim`` unless downsampling).
        depth: number of blocks.
        num_heads: attention heads of every block.
        window: (Wh, Ww).
        downsample: start with a patch merging (stride 2).
        drop_path: stochastic depth rate of each block, ``depth`` values.
        block: ``"v1"`` (:class:`SwinBlock`, :class:`PatchMerging`) or ``"v2"`` (:class:`SwinV2Block`,
            :class:`PatchMergingV2`), see :data:`BLOCK_TYPES`.
        rel_pos: V1 blocks: ``"table"`` or ``"cpb"``, see :class:`WindowAttention`.
        pretrained_window: V2 blocks: the window their position bias was pre-trained at, or None.
        options: what every block shares (:class:`BlockOptions`); its ``norm_layer`` is the patch merging's too.
    """

    def __init__(
        self,
        dim: int,
        out_dim: int,
        depth: int,
        num_heads: int,
        window: tuple[int, int],
        downsample: bool,
        drop_path: Sequence[float],
        block: str = "v1",
        rel_pos: str = "table",
        pretrained_window: tuple[int, int] | None = None,
        options: BlockOptions = DEFAULT_OPTIONS,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.grad_checkpointing = False
        if block not in BLOCK_TYPES:
            raise ValueError(f"block must be one of {', '.join(BLOCK_TYPES)}, got {block!r}")
        block_cls, merging_cls = BLOCK_TYPES[block]
        if downsample:
            self.downsample: nn.Module = merging_cls(dim, out_dim, options.norm_layer, device=device, dtype=dtype)
        elif dim != out_dim:
            raise ValueError(f"a stage without downsampling keeps its width: dim {dim} != out_dim {out_dim}")
        else:
            self.downsample = nn.Identity()
        # the one argument the two block types do not share: V1's bias kind, V2's pre-training window
        position = dict(rel_pos=rel_pos) if block == "v1" else dict(pretrained_window=pretrained_window)
        self.blocks = nn.Sequential(
            *[
                block_cls(
                    out_dim,
                    num_heads,
                    window,
                    shift=i % 2 == 1,
                    drop_path=drop_path[i],
                    **position,
                    options=options,
                    device=device,
                    dtype=dtype,
                )
                for i in range(depth)
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, H, W, C_in] -> [B, H', W', C_out] (H' = ceil(H/2) when downsampling)."""
        x = self.downsample(x)
        batch = x.shape[0]
        # an empty batch: the blocks run one blank image, cut off again, so the stage's output is empty too
        x = at_least_one_image(x)
        if self.grad_checkpointing and not torch.jit.is_scripting():
            # non-reentrant whatever timm's global says: the reentrant one leaves a stage whose input needs no
            # gradient (after frozen_stages=0's patch embedding) without its parameters' gradients
            x = checkpoint_seq(self.blocks, x, use_reentrant=False)
        else:
            x = self.blocks(x)
        return first_images(x, batch)


def stage_maps(grid: tuple[int, int], num_stages: int) -> list[tuple[int, int]]:
    """Each stage's map (H, W) for a patch grid ``grid``: ceil(grid / 2**i), each patch merging padding an odd map."""
    return [(-(-grid[0] // 2**i), -(-grid[1] // 2**i)) for i in range(num_stages)]  # ceil division


def shrunk_windows(window: tuple[int, int], grid: tuple[int, int], num_stages: int) -> list[tuple[int, int]]:
    """Per stage, ``window`` no larger than the stage's map at the nominal input size: the windows of timm's Swin
    (V1 and V2) and of the Microsoft release on square maps.

    Args:
        window: the model's window (Wh, Ww).
        grid: patches per side at the nominal input size; stage i's map is ceil(grid / 2**i).
        num_stages: number of stages.
    """
    return [(min(window[0], h), min(window[1], w)) for h, w in stage_maps(grid, num_stages)]


def window_entries(
    window_size: int | Sequence[int] | Sequence[int | Sequence[int]], num_stages: int
) -> list[tuple[int, int]]:
    """``window_size`` as timm reads it: an int or (h, w) for every stage (a sequence of two ints is always one
    window), else one int or (h, w) per stage. One entry, or ``num_stages``; positivity is checked by the caller."""
    per_stage = isinstance(window_size, Sequence) and not (
        len(window_size) == 2 and not any(isinstance(w, Sequence) for w in window_size)
    )
    entries = [tuple(to_2tuple(w)) for w in window_size] if per_stage else [tuple(to_2tuple(window_size))]
    if any(len(w) != 2 or not all(is_int(v) for v in w) for w in entries) or (per_stage and len(entries) != num_stages):
        shown = tuple(window_size) if isinstance(window_size, Sequence) else window_size
        raise ValueError(f"window_size must be an int or (h, w), got {shown} (or one per stage, {num_stages} of them)")
    return [(int(h), int(w)) for h, w in entries]


def model_window(
    entries: list[tuple[int, int]], grid: tuple[int, int], num_stages: int, ratios: tuple[int, ...] | None = None
) -> tuple[int, int]:
    """The model's one window (Wh, Ww) from :func:`window_entries`: the first, where the entries are the windows one
    window gives. timm shrinks each stage's window to a smaller map at the nominal size (:func:`shrunk_windows`), so
    a per-stage list builds the model of its first window wherever their shrunk windows agree: every stage the same,
    or each entry past its map cut to it (V2 window 16 at 256: 16, 16, 16, 8).

    Args:
        entries: one window, or one per stage.
        grid: patches per side at the nominal input size.
        num_stages: number of stages.
        ratios: the window ratios the entries come from (``set_input_size``'s ``window_ratio``: the patch grid over
            each), which a refusal names; None: the entries are a ``window_size``'s.
    """
    window = entries[0]
    if len(entries) > 1:
        given = [(min(w[0], h), min(w[1], v)) for w, (h, v) in zip(entries, stage_maps(grid, num_stages), strict=True)]
        if given != shrunk_windows(window, grid, num_stages):
            one = window[0] if window[0] == window[1] else window
            source = "window_size" if ratios is None else "window_ratio"
            got = "got" if ratios is None else f"got window_ratio={ratios}, which at the patch grid {grid} gives"
            raise ValueError(
                f"{source} per stage: swinlite keeps one window, so it builds the stages' windows one window gives "
                f"at img_size: the same in every stage, or each cut to a smaller stage map (here window_size={one} "
                f"gives {shrunk_windows(window, grid, num_stages)}); {got} {tuple(entries)}"
            )
    return window


def stage_windows(block: str, window: tuple[int, int], grid: tuple[int, int], num_stages: int) -> list[tuple[int, int]]:
    """The window of each stage's blocks.

    V1 blocks: the model's window in every stage (a smaller map is padded to it, the padding masked; a table
    learned for a window shrunk to that map loads exactly, :func:`swinlite.convert.embed_shrunk_tables`). V2
    blocks: as in timm's and the Microsoft release's Swin-V2, :func:`shrunk_windows`: the continuous position bias
    is a function of the window (its coordinates are normalised by it), and the released weights were trained
    with these windows (e.g. 8x8 in the last stage of a window-16 model at 256).

    Args:
        block: ``"v1"`` or ``"v2"``.
        window: the model's window (Wh, Ww).
        grid: patches per side at the nominal input size.
        num_stages: number of stages.
    """
    if block != "v2":
        return [window] * num_stages
    return shrunk_windows(window, grid, num_stages)


def held_window(table: torch.Tensor, window: tuple[int, int], timm_window: tuple[int, int]) -> tuple[int, int]:
    """The window whose offsets a V1 bias table of ``window`` holds: ``timm_window`` (timm's window of its stage,
    :func:`shrunk_windows`) where every other offset's bias is exactly zero, the table of a timm model of that window
    embedded (:func:`~swinlite.convert.embed_shrunk_tables`); else the whole ``window`` (a table swinlite learned or
    ran on a larger map, or one with no values, on the meta device).

    A record of what was loaded would not see a state dict converted before ``load_state_dict`` (a pretrained tag's,
    :func:`~swinlite.convert.convert_pretrained`) nor a table trained since; the zeros are what the table holds now.
    Offsets that meet only padding at the model's size get no gradient where it is masked (``mask_padding``): the
    model initialises them to zero (``SwinTransformer.init_weights``), so they stay zero while it trains at that
    size, and a table learned from scratch there holds timm's window too.

    Args:
        table: bias table ((2Wh - 1) * (2Ww - 1), heads) of ``window``.
        window: the table's window.
        timm_window: timm's window of the table's stage, no larger than ``window``.
    """
    if timm_window == window or table.is_meta:
        return window
    centre = crop_rel_pos_bias_table(table, window, timm_window)
    return timm_window if torch.equal(embed_rel_pos_bias_table(centre, timm_window, window), table) else window


def table_resized_as_timm(
    table: torch.Tensor,
    window: tuple[int, int],
    held: tuple[int, int],
    after: tuple[int, int],
    new_window: tuple[int, int],
) -> torch.Tensor:
    """A V1 bias table of ``window``, changed as timm's Swin changes a stage's table in ``set_input_size``, for
    swinlite's ``new_window``.

    The table's offsets are those of ``held`` (:func:`held_window`), its centre
    (:func:`~swinlite.convert.crop_rel_pos_bias_table`: exact, the rest is zero): timm's table where the model holds
    timm's weights, else the whole table. They are resized by timm's ``resize_rel_pos_bias_table`` to timm's new
    window ``after`` (``new_window`` shrunk to the new map) and embedded in a table of ``new_window``: the offsets it
    lacks meet only masked padding at that size.

    Args:
        table: bias table ((2Wh - 1) * (2Ww - 1), heads) of ``window``.
        window: the table's window.
        held: the window whose offsets the table holds.
        after: timm's window of the stage after the call.
        new_window: swinlite's window of the stage after it.

    Returns:
        Table ((2Wh' - 1) * (2Ww' - 1), heads) of ``new_window``, detached.
    """
    table = crop_rel_pos_bias_table(table.detach(), window, held)
    if after != held:
        table = resize_rel_pos_bias_table(table, held, after)
    return embed_rel_pos_bias_table(table, after, new_window)


class SwinTransformer(nn.Module):
    """Swin Transformer backbone and classifier, following timm's model interface.

    This class builds the reference model; ``timm.create_model("swinlite_...")`` builds it and, unless
    ``fast=False``, accelerates it (:func:`swinlite.fast.accelerate`).

    Args:
        img_size: nominal input size (for the pretrained config; any size at least one patch works).
        patch_size: patch embedding stride and kernel.
        in_chans: input image channels.
        num_classes: classifier outputs; 0 for no classifier.
        global_pool: timm's ClassifierHead pooling: ``"avg"``, ``"max"``, ``"avgmax"``, ``"catavgmax"`` (twice the
            width) or ``""`` (none).
        embed_dim: channels of stage 0; stage i has ``embed_dim * 2**i``.
        depths: blocks per stage.
        num_heads: attention heads per stage.
        window_size: attention window, int or (Wh, Ww); or one per stage, as timm takes it, where one window gives
            them (:func:`window_entries`, :func:`model_window`).
        mlp_ratio: MLP hidden size over the block width.
        qkv_bias: learn q, k, v biases.
        drop_rate: dropout before the classifier.
        proj_drop_rate: dropout after attention projections and in MLPs.
        attn_drop_rate: dropout on attention weights.
        drop_path_rate: stochastic depth, rising linearly from 0 over the blocks to this value.
        rel_pos: V1 blocks' relative position bias: ``"table"`` (Swin, what None gives) or ``"cpb"`` (Swin-V2
            continuous position bias); V2 blocks always use their continuous position bias (a value is refused).
        mask_padding: pad the image to a patch multiple and mask padded tokens in windows; False reproduces
            torchvision at any size (the remainder past the last whole patch is dropped, padded tokens attend).
        out_norm: a LayerNorm on each feature level returned by ``forward_intermediates``
            (``out_norms.i``, as detection backbones use); without, ``out_norms.i`` are identities.
        frozen_stages: -1 trains everything; k >= 0 freezes the patch embedding and the first k stages
            (with their output norms): no gradients, and eval mode kept across ``.train()``.
        norm_layer: the class of every norm (patch embedding, blocks, patch merging, output norms): one that
            normalises the last dimension of its input, built with its width, e.g. ``nn.LayerNorm``; not a name
            (timm's Swin types it so but does not resolve one either).
        act_layer: the MLPs' activation, a class or a name timm's ``get_act_layer`` knows (``"gelu"``, ``"relu"``).
        block: ``"v1"`` (Swin) or ``"v2"`` (Swin-V2: scaled cosine attention, continuous position bias,
            res-post-norm, patch merging that normalises after the reduction; windows by :func:`stage_windows`).
        pretrained_window_sizes: V2 only: per stage, the window its position bias was pre-trained at (int or
            (Wh, Ww); 0 or None: the stage's own window), as timm's argument of this name.
        dynamic_img_size, strict_img_size: timm's switches between a fixed input size and any size, accepted so that
            code written for timm's Swin builds: swinlite always takes any size, so ``dynamic_img_size=False`` or
            ``strict_img_size=True`` (a fixed size) is a ValueError rather than silently ignored.
        always_partition: timm's switch, accepted as False (its default, a window shrunk to a smaller map); True is a
            ValueError (see :meth:`set_input_size`).
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int = 4,
        in_chans: int = 3,
        num_classes: int = 1000,
        global_pool: str = "avg",
        embed_dim: int = 96,
        depths: Sequence[int] = (2, 2, 6, 2),
        num_heads: Sequence[int] = (3, 6, 12, 24),
        window_size: int | tuple[int, int] | Sequence[int | tuple[int, int]] = 7,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        proj_drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        rel_pos: str | None = None,
        mask_padding: bool = True,
        out_norm: bool = False,
        frozen_stages: int = -1,
        norm_layer: type[nn.Module] = nn.LayerNorm,
        act_layer: str | type[nn.Module] = nn.GELU,
        block: str = "v1",
        pretrained_window_sizes: Sequence[int | tuple[int, int] | None] | None = None,
        dynamic_img_size: bool = True,
        strict_img_size: bool = False,
        always_partition: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if not dynamic_img_size or strict_img_size:
            raise ValueError(
                "swinlite models take any input size (the padding is masked): a fixed size is not an option, got "
                f"dynamic_img_size={dynamic_img_size}, strict_img_size={strict_img_size} (expected True, False)"
            )
        _check_always_partition(always_partition)
        self.register_load_state_dict_pre_hook(convert_when_loaded)  # a timm, Microsoft, ... state dict loads too
        num_stages = len(depths)
        pretrained_windows = _pretrained_windows(block, rel_pos, pretrained_window_sizes, num_stages)
        dims = [int(embed_dim * 2**i) for i in range(num_stages)]
        patch, entries = tuple(to_2tuple(patch_size)), window_entries(window_size, num_stages)
        if len(patch) != 2 or not all(is_int(v) for v in patch):
            raise ValueError(f"patch_size must be an int or (h, w), got {patch}")
        check_num_classes(num_classes)
        check_build_args(
            dims,
            depths,
            num_heads,
            sizes=dict(
                embed_dim=embed_dim,
                in_chans=in_chans,
                patch_size=min(patch),
                window_size=min(min(w) for w in entries),
            ),
            rates=dict(
                drop_rate=drop_rate,
                proj_drop_rate=proj_drop_rate,
                attn_drop_rate=attn_drop_rate,
                drop_path_rate=drop_path_rate,
            ),
        )
        size = tuple(to_2tuple(img_size))
        if len(size) != 2 or not all(is_int(v) and v >= p for v, p in zip(size, patch, strict=True)):
            raise ValueError(f"img_size must be an int or (H, W), each at least the patch {patch}, got {img_size}")
        window = model_window(entries, (size[0] // patch[0], size[1] // patch[1]), num_stages)
        if not mlp_ratio > 0:
            raise ValueError(f"mlp_ratio must be positive, got {mlp_ratio}")
        if isinstance(norm_layer, str):  # timm's Swin types it so, then calls it (a TypeError deep in PatchEmbed)
            raise ValueError(
                f"norm_layer must be a norm class that normalises the last dimension (nn.LayerNorm, "
                f"timm.layers.LayerNorm), not a name: got {norm_layer!r}"
            )
        if not -1 <= frozen_stages <= len(depths):
            raise ValueError(
                f"frozen_stages must be in -1..{len(depths)} (-1: none, 0: patch embed, k: patch embed and the first "
                f"k of {len(depths)} stages), got {frozen_stages}"
            )
        dd = {"device": device, "dtype": dtype}
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.mask_padding = mask_padding
        self.global_pool = global_pool
        self.output_fmt = "NHWC"
        self.patch_size: tuple[int, int] = patch
        self.window_size: tuple[int, int] = window
        self.embed_dim = dims[0]  # timm's attribute: the first stage's width
        self.num_features = dims[-1]

        self.patch_embed = PatchEmbed(
            img_size=img_size,
            patch_size=patch_size,
            in_chans=in_chans,
            embed_dim=dims[0],
            norm_layer=norm_layer,
            output_fmt="NHWC",
            strict_img_size=False,  # forward_features pads (or crops) the images to whole patches first
            **dd,
        )
        drop_path = torch.linspace(0, drop_path_rate, sum(depths), device="cpu").tolist()  # under any device context
        windows = stage_windows(block, self.window_size, self.patch_embed.grid_size, num_stages)
        options = BlockOptions(
            mlp_ratio=mlp_ratio,
            qkv_bias=qkv_bias,
            proj_drop=proj_drop_rate,
            attn_drop=attn_drop_rate,
            mask_padding=mask_padding,
            norm_layer=norm_layer,
            act_layer=_act_layer(act_layer),
        )
        stages, self.feature_info = [], []
        for i, depth in enumerate(depths):
            first = sum(depths[:i])
            stages.append(
                SwinStage(
                    dims[max(i - 1, 0)],
                    dims[i],
                    depth,
                    num_heads[i],
                    windows[i],
                    downsample=i > 0,
                    drop_path=drop_path[first : first + depth],
                    block=block,
                    rel_pos="table" if rel_pos is None else rel_pos,
                    pretrained_window=pretrained_windows[i],
                    options=options,
                    **dd,
                )
            )
            self.feature_info.append(dict(num_chs=dims[i], reduction=max(self.patch_size) * 2**i, module=f"layers.{i}"))
        self.layers = nn.Sequential(*stages)
        self.out_norms = nn.ModuleList([norm_layer(d, **dd) if out_norm else nn.Identity() for d in dims])
        self.norm = norm_layer(self.num_features, **dd)
        self.head = ClassifierHead(
            self.num_features, num_classes, pool_type=global_pool, drop_rate=drop_rate, input_fmt="NHWC", **dd
        )
        self.head_hidden_size = self.head.num_features  # the pooled width: 2 x num_features for "catavgmax"
        self.init_weights(needs_reset=False)  # the modules initialised themselves as they were built
        self.frozen_stages = frozen_stages
        self._freeze()
        # what set_input_size scales with the patch grid: timm's reference windows (a per-stage list as given, each
        # entry scaled on its own; one window for every stage) and grid
        self._ref_window_sizes = tuple(entries if len(entries) > 1 else entries * num_stages)
        self._ref_grid_size = tuple(self.patch_embed.grid_size)

    def init_weights(self, mode: str | bool = "", needs_reset: bool = True) -> None:
        """timm's ``init_weights``, called as on timm's Swin, ``init_weights(mode, needs_reset)``, or as on timm's
        Swin-V2, ``init_weights(needs_reset)`` (a bool first). The constructor's initialisation, e.g. for a model
        built on the meta device and allocated by ``to_empty()``, whose memory holds anything. Linear weights truncated
        normal (std 0.02), their biases zero (:func:`_init_weights`); with ``needs_reset``, first every other module's
        own initialisation (:func:`_reset_module`): the patch embedding's conv, the norms (V2's post-norms at zero),
        V1's bias tables, V2's logit scales (log 10) and q, v biases, and the position biases' index and coordinate
        buffers. Then the V1 tables' offsets that meet only masked padding at the nominal size are zero
        (:meth:`_zero_unused_offsets`).

        Args:
            mode: timm's Swin initialisation mode, ``""`` (its default, which swinlite implements); a bool is timm's
                Swin-V2 first argument, ``needs_reset``.
            needs_reset: reset the modules other than linears too; the constructor passes False, its modules having
                initialised themselves as they were built.

        Raises:
            ValueError: for a mode other than ``""``: timm's others (``"jax"``, ``"jax_nlhb"``, ``"moco"``,
                ``"reset"``) are not implemented.
        """
        if isinstance(mode, bool):  # timm's Swin-V2 signature: init_weights(needs_reset)
            mode, needs_reset = "", mode
        if mode != "":
            raise ValueError(
                f"init_weights: mode must be '' (timm's default initialisation, which swinlite implements), got "
                f"{mode!r}; timm's other modes 'jax', 'jax_nlhb', 'moco' and 'reset' are not implemented"
            )
        if needs_reset:
            self.apply(_reset_module)
        self.apply(_init_weights)
        self._zero_unused_offsets()

    def _zero_unused_offsets(self) -> None:
        """Zero every V1 bias table's offsets outside the window its stage uses at the nominal size (timm's window,
        :func:`shrunk_windows`: the stage's map where that is smaller than the window). With ``mask_padding`` they meet
        only masked padding there, get no gradient and stay zero while the model trains at that size, so the table
        holds timm's table of its stage (:func:`held_window`) and ``set_input_size`` changes it as timm's (random
        draws there were resized with the learned centre). Without ``mask_padding`` padded tokens attend: every offset
        is used, and kept."""
        if not self.mask_padding:
            return
        used = shrunk_windows(self.window_size, tuple(self.patch_embed.grid_size), len(self.layers))
        for stage, window in zip(self.layers, used, strict=True):
            for rel_pos in (m for m in stage.modules() if isinstance(m, RelativePositionBias)):
                if rel_pos.window != window:
                    with torch.no_grad():
                        centre = crop_rel_pos_bias_table(rel_pos.table, rel_pos.window, window)
                        rel_pos.table.copy_(embed_rel_pos_bias_table(centre, window, rel_pos.window))

    def _frozen_modules(self) -> list[nn.Module]:
        if self.frozen_stages < 0:
            return []
        k = self.frozen_stages
        return [self.patch_embed, *self.layers[:k], *self.out_norms[:k]]

    def _freeze(self) -> None:
        for module in self._frozen_modules():
            module.eval()
            module.requires_grad_(False)

    def train(self, mode: bool = True) -> "SwinTransformer":
        """Set training mode; frozen stages (``frozen_stages``) stay in eval mode."""
        super().train(mode)
        for module in self._frozen_modules():
            module.eval()
        return self

    # --- timm model interface -------------------------------------------------------------------

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """Relative position bias parameters (tables or CPB MLPs) and V2's logit scales are excluded from weight
        decay."""
        return {n for n, _ in self.named_parameters() if ".rel_pos." in n or n.endswith(".attn.logit_scale")}

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """timm's parameter groups: the stem, then each stage (coarse) or each block, a stage's downsample with its
        first block, then the final norm. An output norm ``out_norms.i`` joins stage i's last group, so that it
        adds no layer to layer-wise LR decay (``timm.optim.param_groups_layer_decay``): a model with them decays
        every shared parameter as one without."""
        out_norms = [(rf"^out_norms\.{i}\.", (i, len(stage.blocks) - 1)) for i, stage in enumerate(self.layers)]
        return dict(
            stem=r"^patch_embed",
            blocks=r"^(?:layers|out_norms)\.(\d+)"
            if coarse
            else [
                (r"^layers\.(\d+)\.downsample", (0,)),
                (r"^layers\.(\d+)\.blocks\.(\d+)", None),
                *out_norms,
                (r"^norm", (99999,)),
            ],
        )

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        for stage in self.layers:
            stage.grad_checkpointing = enable

    @torch.jit.ignore
    def set_input_size(
        self,
        img_size: int | tuple[int, int] | None = None,
        patch_size: int | tuple[int, int] | None = None,
        window_size: int | tuple[int, int] | Sequence[int | tuple[int, int]] | None = None,
        window_ratio: int | Sequence[int] | None = None,
        always_partition: bool | None = None,
    ) -> None:
        """timm's ``set_input_size``: a new nominal input size, patch and window, in place, so that the model computes
        what timm's Swin (V1 or V2) computes after the same call with the same weights.

        With ``img_size`` (or ``patch_size``) alone every stage's window scales with the patch grid (the
        window-to-grid ratio of the size the model was built at, or of the last explicit window, is kept, per stage
        where that was a list, as timm keeps it);
        ``window_size`` (an int, (h, w), or one per stage) or ``window_ratio`` (the patch grid over the window) set it;
        a call at the current size changes nothing. A new ``patch_size`` resamples the patch projection with timm's
        ``resample_patch_embed`` (through its ``PatchEmbed.set_input_size``). V1 bias tables are resized with timm's
        ``resize_rel_pos_bias_table`` to the window timm gives each stage (shrunk to a smaller map), then embedded in
        a table of swinlite's window, which masks padding where timm shrinks
        (:func:`swinlite.convert.embed_rel_pos_bias_table`: exact). A V1 table that holds more than timm's table of its
        stage (:func:`held_window`: learned on a larger map) stays as it is while its stage keeps its window, and is
        resized whole for a new one; a warning names every table whose biases are resized. Swin-V2's continuous bias
        is a function of the window: its coordinates are rebuilt. Any input size still works; the windows and the
        recorded size change (recorded for ``timm.models.get_model_args`` as the ``img_size``, ``patch_size`` and one
        ``window_size`` a rebuilt model takes). The logits are timm's wherever each stage's map is a multiple of its
        window or smaller than it (elsewhere timm's padded tokens attend, see docs/models.md).

        ``always_partition``: None or False is timm's default, a window shrunk to a smaller map (swinlite: the
        padding masked, the same attention); True is refused.

        Raises:
            ValueError, before anything changes: a window specification timm refuses, or a window or window ratio
            that is not an int (2.5, True: timm takes them); a patch size that is not positive, or an ``img_size``
            smaller than one patch; ``always_partition=True`` (timm's padded tokens then take part in attention,
            swinlite masks them); per-stage windows that no one window gives at the new size, each cut to its
            stage's map (swinlite keeps one window: :func:`model_window`, the rule ``create_model`` applies).
        """
        from timm.models._input import update_model_input_size
        from timm.models.swin_transformer import calc_stage_window_sizes, resolve_window_args

        num_stages = len(self.layers)
        try:
            window_size, window_ratio = resolve_window_args(window_size, window_ratio, num_stages)
        except AssertionError as e:  # timm asserts its window specification
            raise ValueError(f"set_input_size: {e}") from None
        for stage_window in window_size or ():  # timm's assertions take 2.5 and True
            check_window(stage_window, "set_input_size: window_size")
        if window_ratio is not None:
            check_window(window_ratio, "set_input_size: window_ratio")
        _check_always_partition(always_partition)
        patch = self.patch_size if patch_size is None else tuple(to_2tuple(patch_size))
        if len(patch) != 2 or not all(is_int(p) and p > 0 for p in patch):
            raise ValueError(f"patch_size must be a positive int or (h, w), got {patch_size}")
        size = tuple(self.patch_embed.img_size if img_size is None else to_2tuple(img_size))
        if len(size) != 2 or not all(is_int(s) and s >= p for s, p in zip(size, patch, strict=True)):
            raise ValueError(f"img_size must be (H, W), each at least the patch {patch}, got {img_size}")
        grid = (size[0] // patch[0], size[1] // patch[1])
        windows = calc_stage_window_sizes(
            grid, self._ref_window_sizes, self._ref_grid_size, window_size=window_size, window_ratio=window_ratio
        )
        window = model_window([tuple(w) for w in windows], grid, num_stages, window_ratio)  # the create-time rule
        old_grid = tuple(self.patch_embed.grid_size)
        self.patch_embed.set_input_size(img_size=size, patch_size=patch)
        self.patch_size = patch
        for i, info in enumerate(self.feature_info):
            info["reduction"] = max(patch) * 2**i  # timm's: the patch's longer side
        if window_size is not None or window_ratio is not None:  # an explicit window: the new reference
            self._ref_window_sizes, self._ref_grid_size = tuple(windows), grid
        if resized := self._set_windows(window, grid, old_grid):
            warnings.warn(
                f"set_input_size resized {counted(len(resized), 'relative position bias table')} to the new windows "
                f"with timm's resize_rel_pos_bias_table (their learned biases interpolated): {first_keys(resized, 4)}",
                stacklevel=2,
            )
        update_model_input_size(
            self, size, patch_size=None if patch_size is None else patch, window_size=self.window_size
        )

    def _set_windows(self, window: tuple[int, int], grid: tuple[int, int], old_grid: tuple[int, int]) -> list[str]:
        """Give every block ``window`` (V2: shrunk to its map at ``grid``); a V1 table that holds timm's table of the
        stage (:func:`held_window`) changes as timm's does from its window at ``old_grid`` to the new one, and stays as
        it is where neither changes; one that holds more (no timm model's) stays as it is while swinlite's window does,
        else is resized whole. Returns the keys of the tables whose values were resized."""
        num_stages = len(self.layers)
        v2 = isinstance(self.layers[0].blocks[0], SwinV2Block)
        timm_old = shrunk_windows(self.window_size, old_grid, num_stages)  # the windows timm's model has had ...
        timm_new = shrunk_windows(window, grid, num_stages)  # ... and gets
        block_windows = stage_windows("v2" if v2 else "v1", window, grid, num_stages)
        self.window_size = window
        resized = []
        stages = zip(self.layers, block_windows, timm_old, timm_new, strict=True)
        for i, (stage, stage_window, before, after) in enumerate(stages):
            for j, block in enumerate(stage.blocks):
                rel_pos = block.attn.rel_pos
                if not isinstance(rel_pos, RelativePositionBias):
                    rel_pos.set_window(stage_window)
                elif after != before or stage_window != rel_pos.window:
                    held = held_window(rel_pos.table.detach(), rel_pos.window, before)
                    if held == before or stage_window != rel_pos.window:
                        table = table_resized_as_timm(rel_pos.table, rel_pos.window, held, after, stage_window)
                        rel_pos.set_window(stage_window, table)
                        if held != after:  # the biases interpolated, not only cut or embedded
                            resized.append(f"layers.{i}.blocks.{j}.attn.rel_pos.table")
                block.window = stage_window
                block.shift = (stage_window[0] // 2, stage_window[1] // 2) if j % 2 else (0, 0)
        return resized

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """torch's ``load_state_dict``, a state dict of any layout converted first
        (:func:`swinlite.convert.convert_when_loaded`, also the pre-hook of any other route). Keys the conversion does
        not know are a ValueError naming them, before anything loads, with ``strict=True``; with ``strict=False`` they
        come back in ``unexpected_keys``, as torch and timm's Swin return them (torch calls a pre-hook with
        ``strict=True`` whatever it was given, so the conversion is made here, where ``strict`` is known). With
        ``strict=True`` a converted state dict that does not fit is torch's RuntimeError before anything loads, its
        cause named (:func:`swinlite.convert.check_loads_whole`), not after torch loaded the keys that fit."""
        converted = OrderedDict(state_dict)
        if (metadata := getattr(state_dict, "_metadata", None)) is not None:
            converted._metadata = metadata  # torch's version records, which load_state_dict reads
        convert_when_loaded(self, converted, "", None, strict)
        if strict:
            check_loads_whole(self, converted)
        return super().load_state_dict(converted, strict=strict, assign=assign)

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head.fc

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """New classifier of ``num_classes`` outputs (0: none) on the model's device and dtype, in its training mode.

        Checked before anything changes: a bad ``num_classes`` (a ValueError) or pooling (timm's error) leaves the
        model as it was."""
        check_num_classes(num_classes)
        pool = self.global_pool if global_pool is None else global_pool
        ref = self.patch_embed.proj.weight
        # a new head rather than ClassifierHead.reset, whose in_features/device arguments older timm lacks; built
        # first, so that an unknown pooling leaves the model unchanged
        head = ClassifierHead(
            self.num_features,
            num_classes,
            pool_type=pool,
            drop_rate=self.head.drop.p,
            input_fmt="NHWC",
            device=ref.device,
            dtype=ref.dtype,
        ).train(self.training)
        self.num_classes, self.global_pool, self.head = num_classes, pool, head
        self.head_hidden_size = head.num_features

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | None = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """Run the network and collect stage outputs.

        Args:
            x: images [B, C, H, W].
            indices: stages to return: the last n if int, all if None, else these indices.
            norm: apply the final norm to the last stage's output when it is returned.
            stop_early: stop after the last requested stage.
            output_fmt: ``"NCHW"`` or ``"NHWC"`` for the returned maps.
            intermediates_only: return only the list of maps.

        Returns:
            List of maps, or (final features [B, H, W, C], list of maps).
        """
        if output_fmt not in ("NCHW", "NHWC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NHWC', got '{output_fmt}'")
        check_image_input(x, self.in_chans, self.patch_size, self.patch_embed.proj.weight.dtype)
        if not torch.jit.is_scripting():
            indices = check_feature_indices(indices, len(self.layers))
        take_indices, max_index = feature_take_indices(len(self.layers), indices)
        last = len(self.layers) - 1
        num_run = max_index + 1 if stop_early else len(self.layers)
        intermediates = []
        x = self.patch_embed(self._patch_input(x))
        # TorchScript unrolls a loop over modules: zip the module lists themselves (no slice), no break
        for i, (stage, out_norm) in enumerate(zip(self.layers, self.out_norms)):  # noqa: B905 (TorchScript has no strict=)
            if i < num_run:
                x = stage(x)
                if i in take_indices:
                    y = self.norm(x) if norm and i == last else out_norm(x)
                    intermediates.append(y.permute(0, 3, 1, 2).contiguous() if output_fmt == "NCHW" else y)
        if intermediates_only:
            return intermediates
        if num_run == len(self.layers):
            x = self.norm(x)
        return x, intermediates

    def prune_intermediate_layers(
        self, indices: int | list[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the stages after the last of ``indices`` (and the final norm / head if asked)."""
        indices = check_feature_indices(indices, len(self.layers))
        take_indices, max_index = feature_take_indices(len(self.layers), indices)
        pruned_end = max_index < len(self.layers) - 1
        self.layers = self.layers[: max_index + 1]
        self.out_norms = self.out_norms[: max_index + 1]
        self._ref_window_sizes = self._ref_window_sizes[: max_index + 1]  # what set_input_size scales, per stage
        if prune_norm or pruned_end:
            self.norm = nn.Identity()
        if pruned_end:
            self.num_features = self.feature_info[max_index]["num_chs"]
        if prune_head or pruned_end:
            self.reset_classifier(0, "")
        return take_indices

    def _patch_input(self, x: torch.Tensor) -> torch.Tensor:
        """Images as the patch embedding takes them: without the remainder past the last whole patch when
        ``mask_padding=False`` (torchvision's rule). Every forward's one step that sees the input's size: while
        ``torch.jit.trace`` records, it warns which sizes the trace serves (:meth:`_warn_trace_sizes`). An empty batch
        stays empty (only a stage's blocks run a blank image in its place, :class:`SwinStage`). Under ``torch.compile``
        the input's height and width are marked static (:func:`compile_at_image_size`)."""
        if not torch.jit.is_scripting():  # TorchScript skips this branch
            if torch.compiler.is_compiling():
                compile_at_image_size(x)
        images = pad_to_patches(x, self.patch_size) if self.mask_padding else crop_to_patches(x, self.patch_size)
        if not torch.jit.is_scripting():  # TorchScript skips this branch
            if torch.jit.is_tracing():
                self._warn_trace_sizes(x, images)
        return images

    @torch.jit.unused
    def _warn_trace_sizes(self, x: torch.Tensor, images: torch.Tensor) -> None:
        """Warn that the trace keeps each stage's padding and shifts at the size of ``x`` (``images``: as the patch
        embedding takes it), naming them (:func:`stage_geometry_text`). Torch removes checks from a trace: no refusal
        can be recorded."""
        with warnings.catch_warnings():  # sizes read as numbers: constants of the trace, which is what it warns of
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            height, width, rows, cols = (int(s) for s in (*x.shape[-2:], *images.shape[-2:]))
        grid, stages = (rows // self.patch_size[0], cols // self.patch_size[1]), []
        for stage, size in zip(self.layers, stage_maps(grid, len(self.layers)), strict=True):
            shift = next((block.shift for block in stage.blocks if any(block.shift)), (0, 0))
            stages.append(stage_geometry_text(size, stage.blocks[0].window, shift))
        warnings.warn(
            f"torch.jit.trace records a swinlite model at {height}x{width} with each stage's padding and shifts as "
            f"constants: stage maps {', '.join(stages)}. The trace serves other batch sizes, and another input size "
            "only where every stage is padded or not, and shifted or not along each dimension, as here; at any other "
            'it gives wrong outputs without an error (docs/models.md, "Model options and timm\'s contract", '
            "torch.jit.trace)",
            torch.jit.TracerWarning,
            stacklevel=2,
        )

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """images [B, C, H, W] -> final normalised map [B, H/32, W/32, C] (for patch 4)."""
        check_image_input(x, self.in_chans, self.patch_size, self.patch_embed.proj.weight.dtype)
        x = self.patch_embed(self._patch_input(x))  # (B, H/4, W/4, C)
        x = self.layers(x)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return self.head(x, pre_logits=True) if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


@torch.jit.unused
def compile_at_image_size(x: torch.Tensor) -> None:
    """While ``torch.compile`` traces (not ``torch.export``): mark the height and width of the images x [B, C, H, W]
    static, so that the graph is traced at this image size; the batch stays as dynamo chooses.

    Why: a graph serves one image size whatever dynamo is told. Every block decides in Python, from its map size,
    whether to pad, whether to shift along each side and (fast path) how far to cut its window, and timm's patch
    embedding formats the padded size into its check; dynamo guards on each. Traced with symbolic H and W (the
    second size under automatic dynamic shapes, every size with ``dynamic=True``), each view and guard of every
    block also had sympy prove facts about nested ceil divisions of H and W (the stage sizes, padded to the window,
    the window cut to them): a second odd size took minutes to trace, not seconds, and its geometry was built in the
    graph instead of read from the cache (:func:`cache_op_serves`). Static, a new size compiles as with
    ``dynamic=False``; ``tests/models/test_compile_graph.py`` pins it. ``torch.export`` keeps H and W symbolic: its
    graph builds the geometry from them (:func:`exporting`)."""
    if not exporting():
        torch._dynamo.mark_static(x, 2)  # inside a compiled region: specialises the size, with a guard on it
        torch._dynamo.mark_static(x, 3)


def _pretrained_windows(
    block: str, rel_pos: str | None, sizes: Sequence[int | tuple[int, int] | None] | None, num_stages: int
) -> list[tuple[int, int] | None]:
    """Each stage's pre-training window from ``pretrained_window_sizes`` (None: the stage's own), checked."""
    if block not in BLOCK_TYPES:
        raise ValueError(f"block must be one of {', '.join(BLOCK_TYPES)}, got {block!r}")
    if block != "v2":
        if sizes is not None:
            raise ValueError("pretrained_window_sizes is an option of V2 blocks (block='v2')")
        return [None] * num_stages
    if rel_pos is not None:  # "table" too: a V2 block would silently use its CPB in place of the table asked for
        raise ValueError(
            f"rel_pos is an option of V1 blocks (V2 blocks always use the CPB: leave rel_pos unset), got {rel_pos!r}"
        )
    if sizes is None:
        return [None] * num_stages
    if not isinstance(sizes, Sequence) or isinstance(sizes, str):
        raise ValueError(
            f"pretrained_window_sizes needs one entry per stage ({num_stages}), each an int or (Wh, Ww), as timm's "
            f"argument; got {sizes!r}"
        )
    if len(sizes) != num_stages:
        raise ValueError(f"pretrained_window_sizes needs one entry per stage ({num_stages}), got {tuple(sizes)}")
    windows = [tuple(to_2tuple(w or 0)) for w in sizes]
    if any(len(w) != 2 or not all(is_int(v) for v in w) for w in windows):
        raise ValueError(f"pretrained_window_sizes: each entry is an int or (Wh, Ww), got {tuple(sizes)}")
    if any(h < 0 or w < 0 for h, w in windows):
        raise ValueError(f"pretrained_window_sizes must be >= 0 (0: the stage's window), got {tuple(sizes)}")
    return [None if w == (0, 0) else (int(w[0]), int(w[1])) for w in windows]


def _act_layer(act_layer: str | type[nn.Module]) -> type[nn.Module]:
    """The MLPs' activation class: ``act_layer`` itself, or the class timm's ``get_act_layer`` gives its name."""
    if not isinstance(act_layer, str):
        return act_layer
    try:
        layer = get_act_layer(act_layer)
    except KeyError:
        layer = None
    if layer is None:  # an unknown name is a KeyError, "" is None
        raise ValueError(
            f"act_layer must be a class or an activation name timm knows ('gelu', 'relu'), got {act_layer!r}"
        )
    return layer


def _check_always_partition(always_partition: bool | None) -> None:
    """timm's ``always_partition``: None or False (timm's default) is what swinlite does; True is refused."""
    if always_partition:
        raise ValueError(
            "always_partition=True is not available: timm then lets padded tokens take part in attention, swinlite "
            "masks them (leave it unset or False)"
        )


def _init_weights(module: nn.Module) -> None:
    """Reference initialisation: truncated normal (std .02) linear weights, zero biases."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def _reset_module(module: nn.Module) -> None:
    """A module's initialisation as its constructor gives it, other than a linear's (:func:`_init_weights`), as timm's
    Swin-V2 ``init_weights`` resets it: its ``reset_parameters()`` (a :class:`RelativePositionBias`'s fills its index
    too), else its non-persistent buffers (:class:`ContinuousPositionBias`, whose parameters are its MLP's linears)."""
    if isinstance(module, nn.Linear):
        return
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()
    elif hasattr(module, "init_non_persistent_buffers"):
        module.init_non_persistent_buffers()
