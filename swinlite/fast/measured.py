"""Kernel choice by measurement: the first eager call of a shape times each candidate kernel, every later call of
that shape runs the fastest.

Where one kernel is not fastest at every shape and dtype of one device (CUDA window attention: explicit softmax,
SDPA or FlexAttention, for 49-token windows with a bias and a mask), the table in :mod:`swinlite.fast.blocks` names
``"fastest"`` and the layer asks :func:`fastest` here, as ``torch.backends.cudnn.benchmark`` does for convolutions.
The choice is made on the machine that runs the model, so it holds on every GPU without a table of GPUs.

What is timed is what runs: the forward, plus its backward where a gradient flows; each candidate once to warm up
(compilation, caches), then the median of a few rounds that run every candidate in turn, synchronising the device
around each (:func:`fastest_now`, which :func:`swinlite.optimize_for_inference` uses too). A candidate that
raises (a kernel that does not support the shape or dtype), in its warm-up or later, is left out. Where nothing can
be timed (inside ``torch.compile`` tracing, CUDA graph capture, TorchScript) the choice made earlier for the same key
is reused, else the caller's default.

Pinned by: ``tests/fast/test_measured.py`` (the fastest of candidates that take known times is chosen, once per key).
"""

import statistics
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager

import torch

CHOICES: dict[Hashable, str] = {}  # key -> the fastest candidate's name, for every key measured in this process


def can_measure(device: torch.device) -> bool:
    """Whether a kernel can be timed here: eager, and not while a CUDA graph is being captured."""
    if torch.compiler.is_compiling():
        return False
    return not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())


def fastest(
    key: Hashable, candidates: Mapping[str, Callable[[], object]], device: torch.device, default: str, repeats: int = 3
) -> str:
    """Name of the fastest of ``candidates`` for ``key``, timed on the first call for that key.

    Args:
        key: what the timing depends on (device, dtype, shapes, whether a gradient flows, ...).
        candidates: name -> a callable running that kernel once on inputs of the key's shapes.
        device: the device the candidates run on (synchronised around each run).
        default: the name to use where nothing can be timed and ``key`` was not timed before.
        repeats: timed runs per candidate after one warm-up run; the median counts.
    """
    choice = CHOICES.get(key)
    if choice is not None:
        return choice
    if not can_measure(device):
        return default
    with _apart_from_the_caller(device):
        choice = fastest_now(candidates, device, repeats)
    if choice is None:
        return default
    CHOICES[key] = choice
    return choice


@contextmanager
def _apart_from_the_caller(device: torch.device) -> Iterator[None]:
    """The timing trials as no part of the caller's computation: the tensors their forwards save for their backwards
    not seen by saved-tensor hooks around the call (gradient checkpointing's, which counted them in the first forward
    and not in its recomputation, where the choice is made: "A different number of tensors was saved"), and the
    random draws of their dropout undone (the caller's next draws as without the trials)."""
    devices = [torch.cuda.current_device() if device.index is None else device.index] if device.type == "cuda" else []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t), torch.random.fork_rng(devices):
        yield


def fastest_now(candidates: Mapping[str, Callable[[], object]], device: torch.device, repeats: int = 3) -> str | None:
    """Name of the fastest of ``candidates``, timed now: each run once to warm up (compilation, caches, allocator),
    then ``repeats`` rounds with every candidate once per round, in turn (a machine that slows down or speeds up
    meanwhile does so for all); the median counts. A candidate that raises, in its warm-up or a timed round (a kernel
    that does not take the shape or dtype, memory another candidate holds), is left out; None when every one does."""
    runs = {name: run for name, run in candidates.items() if _time_once(run, device) is not None}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name in list(times):
            elapsed = _time_once(runs[name], device)
            if elapsed is None:
                del times[name]
            else:
                times[name].append(elapsed)
    return min(times, key=lambda name: statistics.median(times[name])) if times else None


def _time_once(run: Callable[[], object], device: torch.device) -> float | None:
    """Seconds one run of ``run`` took, the device synchronised around it; None when it raised."""
    _synchronize(device)
    start = time.perf_counter()
    try:
        run()
        _synchronize(device)
    except (RuntimeError, NotImplementedError, ValueError):  # torch.OutOfMemoryError is a RuntimeError
        return None
    return time.perf_counter() - start


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
