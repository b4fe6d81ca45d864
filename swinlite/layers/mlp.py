"""Transformer MLP (fc1 -> GELU -> fc2) that recomputes its GELU in backward instead of storing it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _GeluLinear(torch.autograd.Function):
    """``F.linear(gelu(h), weight, bias)`` saving only ``h``: gelu(h) is recomputed in backward.

    Autograd would keep both h (for GELU's backward) and gelu(h) (for the linear's weight gradient),
    4C channels each; recomputing the cheap GELU drops the second, about a quarter of a Swin block's
    activation memory, for one extra elementwise pass in backward.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(h, weight)
        ctx.has_bias = bias is not None
        return F.linear(F.gelu(h), weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        h, weight = ctx.saved_tensors
        # one (tokens, hidden) buffer holds gelu(h), then grad @ weight, then grad_h: fresh large
        # tensors cost page faults on CPU (glibc maps them anew each time): a third of this backward or more
        buf = F.gelu(h).reshape(-1, h.shape[-1])  # (tokens, hidden), contiguous
        grad_2d = grad.flatten(0, -2)  # (tokens, out)
        grad_weight = grad_2d.T @ buf  # (out, hidden)
        grad_bias = grad_2d.sum(0) if ctx.has_bias else None
        torch.mm(grad_2d, weight, out=buf)  # dL/dgelu(h)
        grad_h = buf.view(h.shape)  # (..., hidden)
        torch.ops.aten.gelu_backward.grad_input(grad_h, h, grad_input=grad_h)  # in place: dL/dh
        return grad_h, grad_weight, grad_bias


class Mlp(nn.Module):
    """fc1 -> GELU -> dropout -> fc2 -> dropout, with the parameter names of timm's ``Mlp``.

    While training with autograd (exact GELU, no dropout between the layers), the GELU output is
    recomputed in backward rather than kept (:class:`_GeluLinear`); outputs and gradients are those
    of the plain composition. Any other activation or a TorchScript model takes the plain path.

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
        self.recompute_act = isinstance(self.act, nn.GELU) and self.act.approximate == "none" and drop == 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., dim] -> [..., dim]."""
        h = self.fc1(x)  # (..., hidden)
        if not torch.jit.is_scripting() and self.recompute_act and torch.is_grad_enabled():
            return self.drop2(self._gelu_fc2(h))
        return self.drop2(self.fc2(self.drop1(self.act(h))))

    @torch.jit.unused
    def _gelu_fc2(self, h: torch.Tensor) -> torch.Tensor:
        """fc2(gelu(h)) through :class:`_GeluLinear`, in the dtype autocast would give the linear."""
        device_type = h.device.type
        if not torch.amp.is_autocast_available(device_type):  # e.g. the meta device
            return self.fc2(self.act(h))
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else h.dtype
        weight, bias = self.fc2.weight.to(dtype), self.fc2.bias
        with torch.autocast(device_type, enabled=False):
            return _GeluLinear.apply(h.to(dtype), weight, None if bias is None else bias.to(dtype))
