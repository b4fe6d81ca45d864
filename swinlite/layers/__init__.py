"""Swin building blocks: relative position encodings, window geometry and attention, blocks."""

from .patch_merging import PatchMerging
from .rel_pos_bias import RelativePositionBias, resize_rel_pos_bias_table
from .rel_pos_cpb import ContinuousPositionBias
from .rel_pos_index import relative_position_index
from .swin_block import SwinBlock
from .window import (
    cached_window_attention_mask,
    effective_shift,
    window_attention_mask,
    window_partition,
    window_reverse,
)
from .window_attention import WindowAttention

__all__ = [
    "ContinuousPositionBias",
    "PatchMerging",
    "RelativePositionBias",
    "SwinBlock",
    "WindowAttention",
    "cached_window_attention_mask",
    "effective_shift",
    "relative_position_index",
    "resize_rel_pos_bias_table",
    "window_attention_mask",
    "window_partition",
    "window_reverse",
]
