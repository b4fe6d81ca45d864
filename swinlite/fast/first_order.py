"""The fast path's gradient kernels compute first derivatives only: a second-order gradient raises, naming the remedy.

The backwards of the GELU recompute, the recomputed and the Triton window attention and the oneDNN linears write
their gradients with ops that have no derivative (``out=`` products, in-place GELU backward, oneDNN's linear); the
token gather's backward, a gather of the gradient, has one and is left to run. Autograd runs a backward with grad
mode on exactly when it records a graph of the gradient (``torch.autograd.grad(..., create_graph=True)``,
``backward(create_graph=True)``), for double backward: there each of those backwards calls
:func:`refuse_double_backward` first, before torch's own error from an ``out=`` op (which names neither swinlite nor
the remedy).

- Pinned by: ``tests/fast/test_fast_double_backward.py``.
"""

import torch

DOUBLE_BACKWARD_ERROR = (
    "swinlite's fast path computes first derivatives only (create_graph=True asks for second ones): build the model "
    "with fast=False (timm.create_model(name, fast=False)) for double backward"
)


def refuse_double_backward() -> None:
    """Raise a RuntimeError naming ``fast=False`` when called from a backward that records its own graph
    (``create_graph=True``); first-order backward (grad mode off) passes."""
    if torch.is_grad_enabled():
        raise RuntimeError(DOUBLE_BACKWARD_ERROR)
