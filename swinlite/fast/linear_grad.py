"""fp32 linear layers with autograd through oneDNN, on the CPUs of
:data:`~swinlite.fast.blocks.ONEDNN_FP32_ON_THIS_CPU` (where PyTorch's BLAS runs Swin's linear shapes the slower).

The inference side is :func:`~swinlite.fast.row_blocks.onednn_linear`, oneDNN's linear op, which has no autograd
formula. Here a Function runs the forward and the input gradient (grad @ W) through that op and the weight gradient
(gradᵀ @ x) through PyTorch's BLAS: oneDNN's op takes its operands contiguous, and the transposes there would be
copies of whole activations. The input gradient needs Wᵀ, a copy of the weight: on few rows (batch 1 at the late
stages) it runs through the BLAS instead (:data:`ONEDNN_INPUT_GRAD_ROWS`).
:func:`~swinlite.fast.gelu_linear.gelu_linear` (the MLP's fc2 with its GELU recomputed) runs its forward and input
gradient through the same op.

- Saves: time in the fp32 CPU train step (``python benchmarks/linear_library_check.py --modes train``; figures:
  benchmarks/kernels.md, "fp32 linear layers through oneDNN").
- Torch ops: ``torch.ops.mkldnn._linear_pointwise`` (through ``onednn_linear``), ``torch.mm``. No double backward
  (the op has no derivative): a second-order gradient raises.
- Pinned by: ``tests/fast/test_linear.py`` (values and gradients against ``F.linear``, frozen weights, no bias; a
  whole model's gradients against the reference with the rule forced on).
"""

import torch

from .row_blocks import onednn_linear

# the input gradient through oneDNN from this many rows: it takes Wᵀ contiguous, a copy of the weight per call, which
# on fewer rows costs more than oneDNN gains over the BLAS, which reads Wᵀ in place (benchmarks/kernels.md, "fp32
# linear layers through oneDNN": the train step at batch 1)
ONEDNN_INPUT_GRAD_ROWS = 1024


def onednn_input_grad(grad: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """grad @ weight: grad [T, out_features], weight [out_features, in] -> [T, in]; through oneDNN (a new tensor) from
    :data:`ONEDNN_INPUT_GRAD_ROWS` rows, else through the BLAS (into ``out`` where given)."""
    if grad.shape[0] < ONEDNN_INPUT_GRAD_ROWS:
        return torch.mm(grad, weight, out=out)
    return onednn_linear(grad, weight.t().contiguous(), None)  # a linear whose weight is Wᵀ (in, out)


class _OneDnnLinear(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` of 2-D x: forward and input gradient by oneDNN, weight gradient by the BLAS.
    (2-D in and out: an output that is a view made inside the Function could not be modified in place after it.)"""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return onednn_linear(x, weight, bias)  # (T, out)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        x, weight = ctx.saved_tensors
        grad_x = onednn_input_grad(grad, weight) if ctx.needs_input_grad[0] else None  # (T, in)
        grad_weight = grad.t() @ x if ctx.needs_input_grad[1] else None  # (out, in)
        grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None  # (out,)
        return grad_x, grad_weight, grad_bias


def onednn_linear_with_grad(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` in fp32 on the CPU, with autograd, through oneDNN (module docstring).

    Args:
        x: [..., in].
        weight, bias: [out, in] and [out] or None.

    Returns:
        [..., out].
    """
    y = _OneDnnLinear.apply(x.reshape(-1, x.shape[-1]), weight, bias)  # (T, out)
    return y if x.dim() == 2 else y.view(*x.shape[:-1], weight.shape[0])  # (..., out)
