"""Warnings under ``torchrun``: each shown once for the run, and a problem of one process never hidden.

Every process checks the same settings, reads the same annotation files and builds the same model, so each would
print the same warnings (a warm-up cut short, images skipped, timm's logged notes) once per process.
:class:`SharedWarnings` keeps those of the other processes back and shows only the ones rank 0 did not have; what
a process meets alone while training (an image of its shard that does not decode) is shown by it, as
``rank N: warning: ...`` (:func:`rank_prefixed`). A single process shows everything as it comes.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Callable, Iterator
from types import TracebackType

from .distributed import DistInfo, SharedError, broadcast_object


class SharedWarnings:
    """Inside ``with`` (entered as often as needed): rank 0 shows its warnings, Python's and those logged
    through ``logging``'s last-resort handler (timm's), as they come; every other process keeps its own back.
    :meth:`settle`, a collective, then shows on each other process what rank 0 did not have. When the work inside
    raises, the process shows what it kept back at once (there is no rank 0 to compare with), unless it raised a
    :class:`~swinlite.engine.distributed.SharedError`: another process says that problem, and shows what it met on
    the way there, the same work; this one exits quietly.

    Not for work done in loader workers: a worker would keep its warnings in its own memory.

    Args:
        info: this process's place (:func:`~swinlite.engine.distributed.launched` before the process group is joined;
            it must be by :meth:`settle`).
    """

    def __init__(self, info: DistInfo) -> None:
        self.info = info
        self.kept: list[tuple[str, str]] = []  # (kind, text) of each warning met inside, in order
        self._exits: list[contextlib.ExitStack] = []

    def __enter__(self) -> SharedWarnings:
        stack = contextlib.ExitStack()
        self._exits.append(stack)
        if not self.info.enabled:
            return self
        show = warnings.showwarning  # swapped, not by catch_warnings: that would show "once" warnings again
        stack.callback(setattr, warnings, "showwarning", show)

        def keep(message, category, filename, lineno, file=None, line=None) -> None:
            self.kept.append((category.__name__, str(message)))
            if self.info.is_main:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = keep
        logged = _Kept(self)
        logging.lastResort.addFilter(logged)
        stack.callback(logging.lastResort.removeFilter, logged)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._exits.pop().close()
        if error is not None and not self.info.is_main and not isinstance(error, SharedError):
            self._show([])
            self.kept = []

    def settle(self) -> None:
        """Show, on every process but rank 0, the warnings it kept back that rank 0 did not have (all processes
        call it, after the work, once they have joined the process group)."""
        if not self.info.enabled:
            return
        main = broadcast_object(self.kept if self.info.is_main else None, self.info)
        if not self.info.is_main:
            self._show(main)
        self.kept = []

    def _show(self, main: list[tuple[str, str]]) -> None:
        """Print the warnings kept back that are not in ``main`` (rank 0's), as ``rank N: warning: ...`` lines."""
        for kind, text in self.kept:
            if (kind, text) not in main:
                line = text if kind == _LOGGED else f"warning: {' '.join(text.split())}"
                print(f"rank {self.info.rank}: {line}", file=sys.stderr, flush=True)


_LOGGED = "logged"  # the kind of a message logged through logging's last-resort handler


class _Kept(logging.Filter):
    """Keeps each record the last-resort handler (stderr, for loggers without a handler: timm's) would print; lets
    it print on rank 0 only."""

    def __init__(self, shared: SharedWarnings) -> None:
        super().__init__()
        self.shared = shared

    def filter(self, record: logging.LogRecord) -> bool:
        self.shared.kept.append((_LOGGED, record.getMessage()))
        return self.shared.info.is_main


@contextlib.contextmanager
def rank_prefixed(info: DistInfo) -> Iterator[None]:
    """Inside: the Python warnings a process other than rank 0 shows start with ``rank N:`` (its own: rank 0's lines
    are the run's log), in loader workers started inside too (they inherit it)."""
    if info.is_main:
        yield
        return
    plain: Callable[..., str] = warnings.formatwarning
    warnings.formatwarning = lambda *args, **kwargs: f"rank {info.rank}: {plain(*args, **kwargs)}"
    try:
        yield
    finally:
        warnings.formatwarning = plain
