"""Fast kernels of the Swin block, and the function that picks them (:mod:`.dispatch`, a table).

Each kernel computes exactly what the reference path of ``SwinBlock`` (``fast=False``, in
``swinlite/layers/swin_block.py``) computes, and says in its docstring what it saves, which torch op it
relies on, its fallback, and the test that pins it to the reference.
"""

from .dispatch import select_attention_kernel, use_row_blocks
from .gather import gather_tokens, shifted_window_index
from .gelu_linear import gelu_linear
from .row_blocks import mlp_rows, window_attention_rows
from .window_sdpa import recomputed_window_attention, sdpa_window_attention, window_attn_mask

__all__ = [
    "gather_tokens",
    "gelu_linear",
    "mlp_rows",
    "recomputed_window_attention",
    "sdpa_window_attention",
    "select_attention_kernel",
    "shifted_window_index",
    "use_row_blocks",
    "window_attention_rows",
    "window_attn_mask",
]
