"""Swin models; importing this registers the ``swinlite_*`` variants with timm.

:mod:`.swin` is the reference model, in paper order; :mod:`.variants` registers the variants and applies the
fast path (:mod:`swinlite.fast`); the relative position encodings (:mod:`.swin`) are shared with :mod:`swinlite.seq`.
:func:`clear_caches` empties the caches of window masks, gather indices and position indices (:mod:`.tensor_cache`).
"""

from . import variants
from .swin import (
    BlockOptions,
    ContinuousPositionBias,
    PatchMerging,
    PatchMergingV2,
    RelativePositionBias,
    SwinBlock,
    SwinStage,
    SwinTransformer,
    SwinV2Block,
    WindowAttention,
    WindowAttentionV2,
    relative_position_index,
)
from .tensor_cache import clear_caches

__all__ = [
    "BlockOptions",
    "ContinuousPositionBias",
    "PatchMerging",
    "PatchMergingV2",
    "RelativePositionBias",
    "SwinBlock",
    "SwinStage",
    "SwinTransformer",
    "SwinV2Block",
    "WindowAttention",
    "WindowAttentionV2",
    "clear_caches",
    "relative_position_index",
    "variants",
]
