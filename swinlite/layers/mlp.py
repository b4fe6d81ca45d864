"""Transformer MLP (fc1 -> GELU -> fc2) with the parameter names of timm's ``Mlp``."""

from __future__ import annotations

import torch
from torch import nn

from ..kernels.gelu_linear import gelu_linear
from ..kernels.row_blocks import mlp_rows


class Mlp(nn.Module):
    """fc1 -> activation -> dropout -> fc2 -> dropout, with the parameter names of timm's ``Mlp``.

    With exact GELU and no dropout between the layers, fc2(gelu(h)) runs in the kernel that recomputes
    the GELU in backward instead of storing it (:func:`~swinlite.kernels.gelu_linear.gelu_linear`);
    outputs and gradients are those of the plain composition, which runs in every other case.

    Args:
        dim: input and output channels.
        hidden: hidden channels.
        act_layer: activation; the recomputation applies to ``nn.GELU`` (approximate="none").
        drop: dropout after the activation and after fc2.
    """

    def __init__(
        self,
        dim: int,
        hidden: int,
        act_layer: type[nn.Module] = nn.GELU,
        drop: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, device=device, dtype=dtype)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden, dim, device=device, dtype=dtype)
        self.drop2 = nn.Dropout(drop)
        self.exact_gelu = isinstance(self.act, nn.GELU) and self.act.approximate == "none"
        self.recompute_act = self.exact_gelu and drop == 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., dim] -> [..., dim]."""
        h = self.fc1(x)  # (..., hidden)
        if self.recompute_act:
            return self.drop2(gelu_linear(h, self.fc2.weight, self.fc2.bias))
        return self.drop2(self.fc2(self.drop1(self.act(h))))

    @torch.jit.unused
    def forward_row_blocks(self, x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        """x + self(norm(x)) for CPU inference in row blocks (:func:`~swinlite.kernels.row_blocks.mlp_rows`).

        Needs exact GELU (``exact_gelu``) and inactive dropout. x: [..., dim], contiguous.
        """
        return mlp_rows(x, norm, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias)
