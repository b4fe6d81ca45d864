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
  (the op has no derivative): a second-order gradient raises. Under ``torch.compile``, outside a frozen graph
  (where inductor cannot lower oneDNN's op), the two calls are ops of our own, ``swinlite::onednn_linear`` (with its
  autograd formula) and ``swinlite::onednn_input_grad`` (``torch.library.custom_op``), which inductor calls as they
  are: :func:`traced_linear`, :func:`traced_input_grad`.
- Pinned by: ``tests/fast/test_linear.py`` (values and gradients against ``F.linear``, frozen weights, no bias; a
  whole model's gradients against the reference with the rule forced on; the ops' ``torch.library.opcheck``) and
  ``tests/models/test_compile_graph.py`` (a compiled train step: the ops, eager's output and gradients).
"""

from collections.abc import Callable

import torch

from .first_order import refuse_double_backward
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


def _linear_grads(
    ctx, grad: torch.Tensor, input_grad: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = onednn_input_grad
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The gradients of x [T, in], weight and bias from ``grad`` [T, out] (``ctx``: the saved x and weight,
    ``has_bias``, ``needs_input_grad``): the input gradient by ``input_grad`` (oneDNN), the weight gradient by the
    BLAS."""
    refuse_double_backward()
    x, weight = ctx.saved_tensors
    grad_x = input_grad(grad, weight) if ctx.needs_input_grad[0] else None  # (T, in)
    grad_weight = grad.t() @ x if ctx.needs_input_grad[1] else None  # (out, in)
    grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None  # (out,)
    return grad_x, grad_weight, grad_bias


def _save_for_grads(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    ctx.save_for_backward(x, weight)
    ctx.has_bias = bias is not None


class _OneDnnLinear(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` of 2-D x: forward and input gradient by oneDNN, weight gradient by the BLAS.
    (2-D in and out: an output that is a view made inside the Function could not be modified in place after it.)"""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        _save_for_grads(ctx, x, weight, bias)
        return onednn_linear(x, weight, bias)  # (T, out)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        return _linear_grads(ctx, grad)


@torch.library.custom_op("swinlite::onednn_linear", mutates_args=())
def _linear_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """:class:`_OneDnnLinear` as one op that ``torch.compile`` does not trace into: inductor lowers oneDNN's linear
    op only with its weight a constant of a frozen graph, and raises in another (a train step's)."""
    return onednn_linear(x, weight, bias)  # (T, out), a new tensor


@_linear_op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty(x.shape[0], weight.shape[0])


@torch.library.custom_op("swinlite::onednn_input_grad", mutates_args=())
def _input_grad_op(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """:func:`onednn_input_grad` as one op, the backward of ``swinlite::onednn_linear``."""
    return onednn_input_grad(grad, weight)  # (T, in), a new tensor


@_input_grad_op.register_fake
def _(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return grad.new_empty(grad.shape[0], weight.shape[1])


_linear_op.register_autograd(
    lambda ctx, grad: _linear_grads(ctx, grad, _input_grad_op),  # the input gradient as an op too, in the graph
    setup_context=lambda ctx, inputs, output: _save_for_grads(ctx, *inputs),
)


def compiling_frozen() -> bool:
    """Whether the graph ``torch.compile`` traces is one inductor freezes: ``torch._inductor.config.freezing`` (as
    ``swinlite.optimize_for_inference`` sets it) without autograd. Inductor lowers oneDNN's linear op
    (``mkldnn::_linear_pointwise``) only with its weight a constant of such a graph (and packs the weight there); in
    another it raises."""
    from torch._inductor import config  # imported here, as swinlite.optimize does (loaded by torch.compile)

    return config.freezing and not torch.is_grad_enabled()


def _as_op() -> bool:
    """Whether oneDNN's linear is called through this module's ops: while ``torch.compile`` traces a graph that is
    not frozen (:func:`compiling_frozen`), where inductor cannot lower oneDNN's own op and calls ours as it is."""
    return torch.compiler.is_compiling() and not compiling_frozen()


def traced_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """:func:`~swinlite.fast.row_blocks.onednn_linear` (no autograd), x [..., in] -> [..., out]; into a compiled
    graph that is not frozen as the op ``swinlite::onednn_linear`` (:func:`_as_op`)."""
    if not _as_op():
        return onednn_linear(x, weight, bias)
    y = _linear_op(x.reshape(-1, x.shape[-1]), weight, bias)  # (T, out)
    return y.view(*x.shape[:-1], weight.shape[0])


def traced_input_grad(grad: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`onednn_input_grad`; into a compiled graph that is not frozen as the op ``swinlite::onednn_input_grad``
    (which writes a new tensor, not ``out``)."""
    return _input_grad_op(grad, weight) if _as_op() else onednn_input_grad(grad, weight, out=out)


def onednn_linear_with_grad(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` in fp32 on the CPU, with autograd, through oneDNN (module docstring). While
    ``torch.compile`` traces, through the op ``swinlite::onednn_linear`` (:func:`_linear_op`, with its autograd
    formula), which inductor calls as it is (a train step compiled with F.linear ran PyTorch's BLAS, the slower on
    these CPUs); eager, through a Function (an op's Python dispatch would cost every call).

    Args:
        x: [..., in].
        weight, bias: [out, in] and [out] or None.

    Returns:
        [..., out].
    """
    rows = x.reshape(-1, x.shape[-1])  # (T, in)
    y = _linear_op(rows, weight, bias) if _as_op() else _OneDnnLinear.apply(rows, weight, bias)
    return y if x.dim() == 2 else y.view(*x.shape[:-1], weight.shape[0])  # (..., out)
