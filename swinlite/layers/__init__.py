"""Swin building blocks: relative position encodings, window geometry and attention, blocks."""

from .patch_merging import PatchMerging
from .rel_pos_bias import RelativePositionBias, resize_rel_pos_bias_table
from .rel_pos_cpb import ContinuousPositionBias
from .rel_pos_index import relative_position_index
from .swin_block import SwinBlock, WindowAttention
from .window import (
    effective_shift,
    window_attention_mask,
    window_geometry,
    window_partition,
    window_reverse,
)

__all__ = [
    "ContinuousPositionBias",
    "PatchMerging",
    "RelativePositionBias",
    "SwinBlock",
    "WindowAttention",
    "effective_shift",
    "relative_position_index",
    "resize_rel_pos_bias_table",
    "window_attention_mask",
    "window_geometry",
    "window_partition",
    "window_reverse",
]
