"""Patch merging: 2x2 neighbourhood -> one token with twice the channels (Swin's downsampling)."""

import torch
import torch.nn.functional as F
from torch import nn


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
        B, H, W, C = x.shape
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
        H, W = x.shape[1], x.shape[2]
        # (B, H/2, dh, W/2, dw, C) -> (B, H/2, W/2, dw, dh, C): dh varies fastest, the reference order
        x = x.reshape(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 4, 2, 5).flatten(3)  # (B, H/2, W/2, 4C)
        return self.reduction(self.norm(x))
