"""Wall-clock timing of callables: warm-up, then the median of repeated runs."""

from __future__ import annotations

import os
import random
import signal
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

try:
    import resource
except ImportError:  # Windows
    resource = None

K = TypeVar("K")


def minor_faults() -> int | None:
    """Minor page faults of this process so far (pages mapped in on first touch); None where unknown."""
    return None if resource is None else resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class FaultCounted:
    """``fn`` as a callable that records the minor page faults of each of its calls (``faults``).

    On a CPU a buffer freshly mapped by the allocator is faulted in page by page, which can cost a model more time
    than the ops that first write it (docs/performance.md, "Page faults"); how many a model takes per call depends
    on the allocator's state, so the tables print it beside the time.
    """

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.faults: list[int] = []

    def __call__(self) -> None:
        before = minor_faults()
        self.fn()
        if before is not None:
            self.faults.append(minor_faults() - before)

    def median(self, last: int, per: int = 1) -> float | None:
        """Median faults of the ``last`` calls (the timed rounds), divided by ``per``; None where not counted."""
        counts = self.faults[-last:]
        return statistics.median(counts) / per if counts else None


def median_seconds(fn: Callable[[], object], warmup: int = 2, repeats: int = 5) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs after ``warmup`` untimed runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_seconds(fns: Sequence[Callable[[], object]], warmup: int = 2, repeats: int = 5) -> list[list[float]]:
    """Wall times of each callable in every round, timed alternately (A, B, A, B, ...) so drift hits all alike.

    Returns:
        ``times[i][r]``: seconds of ``fns[i]`` in round ``r``.
    """
    for fn in fns:
        for _ in range(warmup):
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - start)
    return times


def interleaved_median_seconds(fns: Sequence[Callable[[], object]], warmup: int = 2, repeats: int = 5) -> list[float]:
    """Median of :func:`interleaved_seconds` for each callable."""
    return [statistics.median(t) for t in interleaved_seconds(fns, warmup, repeats)]


def interleaved_line(steps: Mapping[str, Callable[[], object]], warmup: int, repeats: int, reference: str) -> str:
    """The median :func:`interleaved_seconds` of named callables as one line, "name 12 ms (1.20x timm), ...": each
    with its :func:`paired_ratio` to the one named ``reference``."""
    times = dict(zip(steps, interleaved_seconds(list(steps.values()), warmup, repeats), strict=True))
    return ", ".join(
        f"{n} {statistics.median(t) * 1e3:.0f} ms ({paired_ratio(times[reference], t):.2f}x {reference})"
        for n, t in times.items()
    )


def line_with_setting(
    target: object,
    name: str,
    steps: Mapping[str, tuple[Callable[[], object], object]],
    warmup: int,
    repeats: int,
    reference: str,
) -> str:
    """:func:`interleaved_line` of named steps, each run with ``target.<name>`` set to its own value: an A/B check of
    one setting of the code on the same model. ``steps``: name -> (step, value). The original value is restored."""
    original = getattr(target, name)

    def with_value(step: Callable[[], object], value: object) -> Callable[[], None]:
        def run() -> None:
            setattr(target, name, value)
            step()

        return run

    try:
        runs = {n: with_value(step, value) for n, (step, value) in steps.items()}
        return interleaved_line(runs, warmup, repeats, reference)
    finally:
        setattr(target, name, original)


def round_ratios(reference: Sequence[float], times: Sequence[float]) -> list[float]:
    """Per-round speed ratios ``reference[r] / times[r]`` of two callables timed in the same interleaved rounds."""
    if len(reference) != len(times) or not times:
        raise ValueError(
            f"expected the seconds of the same rounds, at least one: got {len(reference)} and {len(times)} rounds"
        )
    return [a / b for a, b in zip(reference, times, strict=True)]


def paired_ratio(reference: Sequence[float], times: Sequence[float]) -> float:
    """Speed ratio of two callables timed in the same interleaved rounds: the median of :func:`round_ratios`.

    Each round's two timings share that round's load, so a burst that slows one of them shows as one outlying round
    here, where the ratio of the two medians can pair a slow round of one with a quiet round of the other (rounds
    39/61/67/434/370 ms against 34/37/607/430/390 ms: medians 5.8x, per round 0.99x). Its spread is
    :func:`ratio_range`. Callables timed in different rounds have no pairs: compare their medians.
    """
    return statistics.median(round_ratios(reference, times))


def ratio_range(reference: Sequence[float], times: Sequence[float]) -> tuple[float, float]:
    """Smallest and largest per-round speed ratio ``reference[r] / times[r]`` (rounds of one interleaved run)."""
    ratios = round_ratios(reference, times)
    return min(ratios), max(ratios)


def shuffled_seconds(
    fns: Mapping[K, Callable[[], object]],
    before: Callable[[K], None],
    warmup: int = 2,
    repeats: int = 5,
    seed: int = 0,
) -> dict[K, list[float]]:
    """Wall times of each callable in every round, the callables of a round in a fresh random order.

    Args:
        fns: key -> callable.
        before: called with a callable's key just before it runs (untimed), e.g. to set up its condition.
        warmup: untimed runs of each callable first.
        repeats: timed rounds.
        seed: seed of the orders.

    Returns:
        ``times[key][r]``: seconds of ``fns[key]`` in round ``r``.
    """
    rng = random.Random(seed)
    keys = list(fns)
    for key in keys:
        before(key)
        for _ in range(warmup):
            fns[key]()
    times: dict[K, list[float]] = {key: [] for key in keys}
    for _ in range(repeats):
        for key in rng.sample(keys, len(keys)):
            before(key)
            start = time.perf_counter()
            fns[key]()
            times[key].append(time.perf_counter() - start)
    return times


def spin(ready, parent: int) -> None:
    """Keep one core busy (a pure Python loop) while process ``parent`` lives: the second process of
    ``--contended``; sets ``ready``. It ignores Ctrl-C, which reaches it with the benchmark (its process group): the
    benchmark stops it, and its KeyboardInterrupt traceback ("Process SpawnProcess-1:") came before the benchmark's
    "interrupted". It ends with the benchmark whatever ends that (SIGTERM, kill -9), where it spun on at 100 %
    reparented to init: Linux kills it then (:func:`_die_with_parent`, also while it is paused by SIGSTOP), and the
    loop checks every few milliseconds that its parent is still ``parent``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    ready.set()
    while os.getppid() == parent:
        for _ in range(100_000):
            pass


def _die_with_parent() -> None:
    """On Linux, have the kernel send this process SIGKILL when its parent exits (prctl PR_SET_PDEATHSIG), which
    ends it even while it is stopped; elsewhere nothing (:func:`spin`'s check of its parent remains)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
