"""Learnable relative position bias table (Swin / T5 style), for windows of any dimension."""

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .rel_pos_index import relative_position_index


class RelativePositionBias(nn.Module):
    """One learnable scalar per (relative offset, head), gathered into a (heads, N, N) bias.

    The table has prod(2w - 1) rows, one per offset ``coords_i - coords_j`` (query minus key), and
    ``num_heads`` columns, as in Swin. It works for 1-D windows (sequences) as well as 2-D and 3-D.

    Args:
        window: window size per axis.
        num_heads: number of attention heads.
    """

    def __init__(
        self,
        window: Sequence[int],
        num_heads: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.window = tuple(int(w) for w in window)
        self.num_heads = num_heads
        self.num_tokens = 1
        num_offsets = 1
        for w in self.window:
            self.num_tokens *= w
            num_offsets *= 2 * w - 1
        self.table = nn.Parameter(torch.empty(num_offsets, num_heads, device=device, dtype=dtype))
        self.register_buffer(
            "index", torch.empty(self.num_tokens, self.num_tokens, dtype=torch.long, device=device), persistent=False
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.table, std=0.02)
        self.init_non_persistent_buffers()

    def init_non_persistent_buffers(self) -> None:
        """Fill the index buffer; call after ``to_empty()`` when the model was built on the meta device."""
        with torch.no_grad():
            self.index.copy_(relative_position_index(self.window, device=self.index.device))

    def forward(self) -> torch.Tensor:
        """Returns the bias, shape (heads, N, N)."""
        bias = self.table[self.index.view(-1)]  # (N*N, heads)
        return bias.view(self.num_tokens, self.num_tokens, self.num_heads).permute(2, 0, 1)  # (heads, N, N)


def resize_rel_pos_bias_table(
    table: torch.Tensor, old_window: Sequence[int], new_window: Sequence[int]
) -> torch.Tensor:
    """Resize a 2-D Swin bias table bicubically in its (2Wh - 1, 2Ww - 1) offset grid.

    Args:
        table: bias table, shape ((2Wh - 1) * (2Ww - 1), heads).
        old_window: window the table was learned for, (Wh, Ww).
        new_window: window to resize to.

    Returns:
        Table of shape ((2Wh' - 1) * (2Ww' - 1), heads), same dtype as ``table``.
    """
    old_h, old_w = (2 * int(w) - 1 for w in old_window)
    new_h, new_w = (2 * int(w) - 1 for w in new_window)
    if table.ndim != 2 or table.shape[0] != old_h * old_w:
        raise ValueError(
            f"table of shape {tuple(table.shape)} does not fit window {tuple(old_window)}: "
            f"expected ({old_h * old_w}, heads)"
        )
    if (old_h, old_w) == (new_h, new_w):
        return table
    num_heads = table.shape[1]
    grid = table.T.reshape(1, num_heads, old_h, old_w).float()  # (1, heads, 2Wh-1, 2Ww-1)
    grid = F.interpolate(grid, size=(new_h, new_w), mode="bicubic", align_corners=False)
    return grid.reshape(num_heads, new_h * new_w).T.contiguous().to(table.dtype)  # (rows, heads)
