"""A deployment path: a model compiled for inference with inductor's freezing.

Freezing folds the weights into the compiled graph as constants, so inductor can pre-pack them for the
CPU matmul libraries (oneDNN / MKL), fuse bias and activation into the matmul, and constant-fold what
depends only on weights and input size (relative position bias, shift masks, window indices). The price:
the callable computes with the weights the model held when it was compiled, and only without autograd.

Recompiles: the compiled graph is specialised to the input shape (batch, height, width) it first sees; every
new shape compiles again (as long as the first time, less the C++ kernels already built), and after
``torch._dynamo.config.recompile_limit`` shapes (8 by default) dynamo runs further shapes eagerly. Inputs of many
sizes (detection) should be padded by the caller to a few canvas sizes, e.g. 800×1344 and 1344×800 for
torchvision's detection transform (which pads each batch to multiples of 32 anyway); the padded canvas is what
the backbone then computes on. Symbolic shapes (``torch.compile(dynamic=True)``) are not offered: tracing
swinlite's window geometry symbolically did not finish in minutes even for the smallest model.

Caches: inductor keeps the C++ kernels it builds on disk (``TORCHINDUCTOR_CACHE_DIR``), so a second process
skips their compilation; the lowered graph itself is not cached, because the pre-packed oneDNN weights cannot be
serialised (CPU). Measured compile and warm-start times: ``python scripts/benchmark.py --compile``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

_DEFAULT_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-8}


def optimize_for_inference(
    model: nn.Module,
    example_input: torch.Tensor,
    *,
    mode: str | None = None,
    check: bool = True,
) -> Callable[[torch.Tensor], Any]:
    """Compile ``model`` for inference with inductor freezing, warm it up on ``example_input`` and return it.

    Args:
        model: a module in eval mode (dropout and stochastic depth off); it is not modified.
        example_input: an input batch, e.g. images [B, 3, H, W], on the model's device. It is run once to
            compile, so the returned callable is fast from its first call at this shape.
        mode: ``torch.compile`` mode, e.g. ``"max-autotune-no-cudagraphs"`` (longer compile, tuned matmuls).
        check: compare the compiled output on ``example_input`` with the eager output (fp32: |diff| <= 1e-4).

    Returns:
        ``fn(x)`` computing ``model(x)`` under ``torch.inference_mode``, with the weights as they are now.

    Raises:
        ValueError: ``model`` is in training mode.
        RuntimeError: ``check`` found the compiled output differs from eager beyond the tolerance.
    """
    if model.training:
        raise ValueError("optimize_for_inference expects a model in eval mode; call model.eval() first")
    import torch._inductor.config  # noqa: F401  (loaded here: ``import swinlite`` stays light)

    with torch._inductor.config.patch(freezing=True), torch.inference_mode():
        compiled = torch.compile(model, dynamic=False, mode=mode)
        output = compiled(example_input)  # compiles now: freezing reads the weights at this call

    def run(x: torch.Tensor) -> Any:
        with torch._inductor.config.patch(freezing=True), torch.inference_mode():  # a recompile freezes too
            return compiled(x)

    if check:
        _check_close(model, example_input, output)
    return run


def _check_close(model: nn.Module, x: torch.Tensor, output: Any) -> None:
    with torch.inference_mode():
        expected = model(x)
    tolerance = _DEFAULT_TOLERANCE.get(x.dtype, 1e-2)
    try:
        torch.testing.assert_close(output, expected, atol=tolerance, rtol=tolerance)
    except AssertionError as e:
        raise RuntimeError(f"the compiled model's output differs from eager beyond {tolerance:g}: {e}") from e
