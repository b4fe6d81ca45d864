"""``fc2(gelu(h))`` for the MLP, recomputing the GELU in backward instead of storing its output.

Autograd would keep both h (for GELU's backward) and gelu(h) (for fc2's weight gradient), 4C channels
each; this kernel keeps only h and recomputes the cheap GELU in backward, one extra elementwise pass.

- Saves: activation memory of every MLP (the ``peak MB`` column) and, on CPU, fresh large allocations in
  backward; measure with ``python scripts/benchmark.py --size tiny --batch 8 --precisions fp32``
  (figures: benchmarks/kernels.md).
- Torch ops: ``torch.ops.aten.gelu_backward.grad_input``, the out= overload of GELU's public backward
  op, to write the gradient in place. Without autograd (no grad mode) or in TorchScript, which cannot
  script the autograd Function, the plain ``linear(gelu(h))`` runs. With ``onednn`` (fp32 on the CPUs of
  :data:`~swinlite.fast.blocks.ONEDNN_FP32_ON_THIS_CPU`) the forward and the gradient to gelu(h) run through oneDNN,
  as :mod:`swinlite.fast.linear_grad`'s linears, and so does the plain linear without autograd (the path a frozen
  compiled graph traces: ``swinlite.optimize_for_inference``'s fc2 as its other linears, 5 % faster on the AMD
  EPYC, benchmarks/kernels.md).
- Pinned by: ``tests/fast/test_mlp.py`` (``FastMlp`` against timm's ``Mlp``, fp32 and bf16 autocast),
  ``tests/fast/test_linear.py`` (through oneDNN, with and without autograd) and ``tests/fast/test_fast_block.py``
  (fast block against the reference block).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models.checks import autocast_available
from .first_order import refuse_double_backward
from .linear_grad import traced_input_grad, traced_linear
from .row_blocks import autocast_weights, compute_dtype


class _GeluLinear(torch.autograd.Function):
    """``F.linear(gelu(h), weight, bias)`` saving only ``h``: gelu(h) is recomputed in backward."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, onednn: bool) -> torch.Tensor:
        ctx.save_for_backward(h, weight)
        ctx.has_bias, ctx.onednn = bias is not None, onednn
        return (traced_linear if onednn else F.linear)(F.gelu(h), weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, None]:
        refuse_double_backward()
        h, weight = ctx.saved_tensors
        # one (tokens, hidden) buffer holds gelu(h), then grad @ weight, then grad_h: on CPU each fresh
        # large tensor costs page faults (glibc maps it anew each time)
        buf = F.gelu(h).reshape(-1, h.shape[-1])  # (tokens, hidden), contiguous
        grad_2d = grad.flatten(0, -2)  # (tokens, out)
        grad_weight = grad_2d.T @ buf  # (out, hidden)
        grad_bias = grad_2d.sum(0) if ctx.has_bias else None
        if ctx.onednn:  # oneDNN writes a new tensor (the BLAS into buf, on few rows)
            buf = traced_input_grad(grad_2d, weight, out=buf)  # dL/dgelu(h)
        else:
            torch.mm(grad_2d, weight, out=buf)  # dL/dgelu(h)
        grad_h = buf.view(h.shape)  # (..., hidden)
        torch.ops.aten.gelu_backward.grad_input(grad_h, h, grad_input=grad_h)  # in place: dL/dh
        return grad_h, grad_weight, grad_bias, None


def gelu_linear(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, onednn: bool = False) -> torch.Tensor:
    """``F.linear(F.gelu(h), weight, bias)`` (exact GELU), keeping only ``h`` for backward.

    Under autocast the linear runs in the dtype autocast would give it (float64 stays float64); gradients reach
    ``weight`` and ``bias`` in their own dtype.

    Args:
        h: fc1 output [..., hidden].
        weight: fc2 weight [out, hidden].
        bias: fc2 bias [out] or None.
        onednn: the linear and its input gradient through oneDNN (fp32 on the CPU, where
            :func:`~swinlite.fast.blocks.onednn_serves` says).

    Returns:
        [..., out].
    """
    if torch.jit.is_scripting():
        return F.linear(F.gelu(h), weight, bias)
    if not torch.is_grad_enabled():  # no autograd (e.g. a compiled inference graph): nothing to recompute
        if onednn:
            return traced_linear(F.gelu(h), weight, bias)
        return F.linear(F.gelu(h), *autocast_weights(h, weight, bias))
    return _gelu_linear_autograd(h, weight, bias, onednn)


@torch.jit.unused
def _gelu_linear_autograd(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, onednn: bool
) -> torch.Tensor:
    device_type = h.device.type
    if not autocast_available(device_type):  # e.g. the meta device
        return F.linear(F.gelu(h), weight, bias)
    dtype = compute_dtype(h)
    rows = h.reshape(-1, h.shape[-1]).to(dtype)  # (T, hidden): the Function's output is then no view of its own
    with torch.autocast(device_type, enabled=False):
        y = _GeluLinear.apply(rows, weight.to(dtype), None if bias is None else bias.to(dtype), onednn)  # (T, out)
    return y.view(*h.shape[:-1], weight.shape[0])  # (..., out)
