"""A deployment path: a model compiled for inference with inductor's freezing.

Freezing folds the weights into the compiled graph as constants, so inductor can pre-pack them for the
CPU matmul libraries (oneDNN / MKL), fuse bias and activation into the matmul, and constant-fold what
depends only on weights (the relative position bias); the shift masks and window indices, which depend only on the
input size, come from swinlite's cache (``swinlite.models.swin``: "the cache inside torch.compile"). The price:
the callable computes with the weights the model held when it was compiled, and only without autograd. A float64
model on the CPU compiles without freezing (oneDNN's weight packing takes no float64 weights).

Recompiles: the compiled graph is specialised to the input shape (batch, height, width) it first sees; every
new shape compiles again (as long as the first time, less the C++ kernels already built), and after
``torch._dynamo.config.recompile_limit`` shapes (8 by default) dynamo runs further shapes eagerly. Inputs of many
sizes (detection) should be padded by the caller to a few canvas sizes, e.g. 800×1344 and 1344×800 for
torchvision's detection transform (which pads each batch to multiples of 32 anyway); the padded canvas is what
the backbone then computes on. The limit is the process's, not the callable's: every call of
:func:`optimize_for_inference` compiles swinlite's forward once more (a copy of the model), so after 8 calls or shapes
in one process a new call serves eagerly (its ``path`` says ``"eager"``, with a warning). Symbolic shapes
(``torch.compile(dynamic=True)``) are not offered: the window geometry specialises them on height and width, so
every new size compiles again all the same.

Caches: inductor keeps the C++ kernels it builds on disk (``TORCHINDUCTOR_CACHE_DIR``), so a second process
skips their compilation; the lowered graph itself is not cached, because the pre-packed oneDNN weights cannot be
serialised (CPU). Measured compile and warm-start times: ``python scripts/benchmark.py --compile``.

Batches of one stream (a loader's last batch, a batch with unreadable images left out) are smaller than the
first: :class:`FixedBatch` pads them to the compiled batch size, so one compile serves them all.

Compiled is not always faster: on an AVX2-only AMD EPYC the compiled Swin-T runs level with the eager row blocks,
ahead of them on an AVX-512 Xeon (docs/performance.md, "Compiled inference"). So the compiled graph and the eager model
are both timed on the example, in turn (:func:`swinlite.fast.measured.fastest_now`), and the faster serves every call;
the eager one runs a copy of the model made then, so either way the callable computes with the weights of the call.
``fn.path`` says which.

On CUDA the default mode is ``"reduce-overhead"``: the compiled graph is replayed as a CUDA graph, one launch per
call instead of one per kernel. The model first runs eagerly on the example, which both gives the output the check
compares with and times the attention kernels the dispatch table leaves to measurement on CUDA
(:mod:`swinlite.fast.measured`), so the compiled graph holds the kernels measured fastest. A CUDA graph writes its
outputs into memory it reuses on the next call: the returned callable hands back copies.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch._dynamo.utils import counters
from torch.utils._pytree import tree_map

from .device import load_compiler_quietly
from .fast.measured import fastest_now
from .fast.row_blocks import compute_dtype

_DEFAULT_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-8}
# timed rounds of the compiled graph against eager: on a 2-core EPYC, where the two run within 10 % of each other,
# the median of three once served the slower (docs/performance.md, r8)
CHOICE_ROUNDS = 5


def optimize_for_inference(
    model: nn.Module,
    example_input: torch.Tensor,
    *,
    mode: str | None = None,
    check: bool = True,
) -> Optimized:
    """Compile ``model`` for inference with inductor freezing, warm it up on ``example_input``, and return the faster
    of the compiled graph and the eager model on that input (timed in turn, median of :data:`CHOICE_ROUNDS` after a
    warm-up).

    Args:
        model: a module in eval mode (dropout and stochastic depth off); it is not modified.
        example_input: an input batch, e.g. images [B, 3, H, W], on the model's device. It is run once to
            compile, so the returned callable is fast from its first call at this shape.
        mode: ``torch.compile`` mode, e.g. ``"max-autotune-no-cudagraphs"`` (longer compile, tuned matmuls); default
            :func:`compile_mode`: CUDA graphs on CUDA.
        check: compare the compiled output on ``example_input`` with the eager output (fp32: |diff| <= 1e-4).

    Returns:
        ``fn(x)`` computing ``model(x)`` under ``torch.inference_mode``, with the weights as they are now;
        ``fn.path`` is ``"compiled"`` or ``"eager"``, the one that was faster; ``fn.seconds`` what building it took
        (compiling, checking, timing the two).

    Raises:
        ValueError: ``model``, or a module of it, is in training mode.
        RuntimeError: ``check`` found the compiled output differs from eager beyond the tolerance.
    """
    check_eval_mode(model, "optimize_for_inference")  # a module of it in training mode passed the model's own flag
    start = time.perf_counter()
    import torch._inductor.config  # noqa: F401  (loaded here: ``import swinlite`` stays light)

    load_compiler_quietly()

    # a copy: the callable keeps the weights of this moment (inductor's frozen graph still reads the live tensors
    # it does not fold, so a later in-place change to the caller's model reached part of it)
    model = copy.deepcopy(model)

    mode = compile_mode(example_input.device.type, mode)
    cuda_graphs = uses_cuda_graphs(example_input.device.type, mode)
    with torch.inference_mode():
        expected = model(example_input) if check or cuda_graphs else None  # eager first: kernel timings, the reference
    settings = _freezing(example_input)
    graphs = counters["stats"]["unique_graphs"]
    with torch._inductor.config.patch(settings), torch.inference_mode():
        compiled = torch.compile(model, dynamic=False, mode=mode)
        output = compiled(_not_inference(example_input))  # compiles now: freezing reads the weights at this call
    if counters["stats"]["unique_graphs"] == graphs:  # dynamo ran the call eagerly: its recompile limit was reached
        warnings.warn(
            f"optimize_for_inference: torch.compile compiled nothing (this process reached "
            f"torch._dynamo.config.recompile_limit, {torch._dynamo.config.recompile_limit}, for swinlite's forward: "
            f"one compile per call of optimize_for_inference and per input shape); serving the eager model. Raise "
            f"the limit before the calls to compile more",
            stacklevel=2,
        )
        return Optimized(_eager(model), "eager", time.perf_counter() - start)

    def run(x: torch.Tensor) -> Any:
        x = _not_inference(x)
        with torch._inductor.config.patch(settings), torch.inference_mode():  # a recompile gets the same settings
            if not cuda_graphs:
                return compiled(x)
            torch.compiler.cudagraph_mark_step_begin()
            return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, compiled(x))

    if check:  # under autocast the model computes in autocast's dtype, whatever the input's
        _check_close(expected, output, compute_dtype(example_input))

    eager = _eager(model)
    candidates = {"compiled": lambda: run(example_input), "eager": lambda: eager(example_input)}
    path = fastest_now(candidates, example_input.device, repeats=CHOICE_ROUNDS)
    return Optimized(eager if path == "eager" else run, path, time.perf_counter() - start)


def _not_inference(x: torch.Tensor) -> torch.Tensor:
    """``x``, or a copy of it that is a normal tensor where it is an inference tensor (made under
    ``torch.inference_mode``: :class:`FixedBatch`'s padded batch, a caller's). The graph is compiled for the example's
    kind, and dynamo guards on a tensor's dispatch keys, which differ: such a batch compiled the whole graph again."""
    if not isinstance(x, torch.Tensor) or not x.is_inference():
        return x
    with torch.inference_mode(False):
        return x.clone()


def _freezing(example_input: torch.Tensor) -> dict[str, bool]:
    """Inductor's settings: freezing, but for float64 on the CPU. There inductor's freezing packs weights for oneDNN,
    which takes float, bfloat16 and half only ("itensor_view_from_dense expects float/bfloat16/half/int8/fp8 tensor
    input"), and once a process has frozen a graph the packing applies whatever ``cpp.weight_prepack`` says."""
    return {"freezing": not (example_input.device.type == "cpu" and example_input.dtype == torch.float64)}


def _eager(model: nn.Module) -> Callable[[torch.Tensor], Any]:
    @torch.inference_mode()
    def run(x: torch.Tensor) -> Any:
        return model(x)

    return run


class Optimized:
    """What :func:`optimize_for_inference` returns: ``fn(x)`` runs the model; ``path`` is ``"compiled"`` or
    ``"eager"``, whichever ran the example faster; ``seconds`` is how long building it took."""

    def __init__(self, fn: Callable[[torch.Tensor], Any], path: str, seconds: float) -> None:
        self._fn, self.path, self.seconds = fn, path, seconds

    def __call__(self, x: torch.Tensor) -> Any:
        return self._fn(x)


def compile_mode(device_type: str, mode: str | None) -> str | None:
    """The ``torch.compile`` mode: the caller's, else CUDA graphs (``"reduce-overhead"``) on CUDA, inductor's default
    elsewhere."""
    if mode is None and device_type == "cuda":
        return "reduce-overhead"
    return mode


def uses_cuda_graphs(device_type: str, mode: str | None) -> bool:
    """Whether inductor replays the compiled graph as a CUDA graph (its ``reduce-overhead`` and ``max-autotune``)."""
    return device_type == "cuda" and mode in ("reduce-overhead", "max-autotune")


def _check_close(expected: Any, output: Any, dtype: torch.dtype) -> None:
    tolerance = _DEFAULT_TOLERANCE.get(dtype, 1e-2)
    try:
        torch.testing.assert_close(output, expected, atol=tolerance, rtol=tolerance)
    except AssertionError as e:
        raise RuntimeError(f"the compiled model's output differs from eager beyond {tolerance:g}: {e}") from e


class FixedBatch(nn.Module):
    """``model`` through :func:`optimize_for_inference`, compiled once for the example's batch size.

    A smaller batch is padded with zero images to that size and the padded rows of every output tensor are
    dropped, so a loader's last batch (or one with unreadable images left out) costs no recompile. Each image's
    output depends on that image alone (a model in eval mode has no batch statistics), so padding changes no result.

    Args:
        model: a module in eval mode on the device of ``example_input``; ``.to()`` another device afterwards
            does not move the compiled weights.
        example_input: a full batch [B, ...] of the shape every later batch has, B rows or fewer.
    """

    def __init__(self, model: nn.Module, example_input: torch.Tensor) -> None:
        super().__init__()
        self.model = model  # held for .eval() / .parameters(); the compiled callable has its own weights
        self.batch_size = example_input.shape[0]
        self._compiled = optimize_for_inference(model, example_input)

    def forward(self, x: torch.Tensor) -> Any:
        n = x.shape[0]
        if n > self.batch_size:
            raise ValueError(f"a batch of {n}, but the model was compiled for batches of at most {self.batch_size}")
        if n < self.batch_size:
            x = torch.cat([x, x.new_zeros(self.batch_size - n, *x.shape[1:])])  # [batch_size, ...]
        return tree_map(lambda t: t[:n] if isinstance(t, torch.Tensor) else t, self._compiled(x))

    def report(self) -> str:
        """One line for a script's ``--compile``: what serves, and how long building it took."""
        served = {
            "compiled": "the compiled graph serves",
            "eager": "the eager model serves (it ran the example faster, or nothing was compiled)",
        }[self._compiled.path]
        return f"--compile: built for batches of {self.batch_size} in {self._compiled.seconds:.0f} s; {served}"


def check_eval_mode(model: nn.Module, user: str) -> None:
    """ValueError unless ``model`` and every module in it are in eval mode (``timm.create_model`` returns a model in
    training mode): traced in training mode, dropout and stochastic depth are random operations of the graph, whose
    outputs change at every call. ``user``: the caller (:func:`optimize_for_inference`, the export functions)."""
    name = next((name for name, module in model.named_modules() if module.training), None)
    if name is not None:
        where = f" (its {name} is in training mode)" if name else ""
        raise ValueError(f"{user} expects a model in eval mode{where}; call model.eval() first")
