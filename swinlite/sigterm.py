"""SIGTERM (``kill``, a scheduler's stop, ``torchrun`` ending its processes) handled as Ctrl-C is: the process unwinds
(its ``finally`` blocks and context managers clean up) instead of the default exit on the spot, and its DataLoader
workers leave the first SIGTERM to it. Light on purpose (no torch): the training engine and ``scripts/benchmark.py``
both use it."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is as Ctrl-C's KeyboardInterrupt is: the same unwinding (a run's output
    folder lock released, TensorBoard closed, the process group left; the benchmark's temporary files removed)."""


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the block (once: a second one ends the process at once, as by default).
    Outside the main thread, where no handler can be set, SIGTERM is left as it is. A process forked in the block
    (a loader worker, the data scan's pool, which ``Pool.terminate`` ends by SIGTERM) inherits the handler: there
    it ends the process as the default does, rather than raise (and print a traceback) in it."""
    owner = os.getpid()

    def handler(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if os.getpid() != owner:
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def loader_worker_init() -> Callable[[int], None]:
    """A DataLoader's ``worker_init_fn`` for a process that unwinds on SIGTERM: :func:`leave_sigterm_to_the_owner`."""
    return functools.partial(leave_sigterm_to_the_owner, exiting=_exit_flag())


def leave_sigterm_to_the_owner(worker_id: int, exiting: ctypes.c_byte) -> None:
    """A loader worker's start: the first SIGTERM it gets is left to the process that owns the loader, which shuts
    its workers down as it unwinds (:func:`terminate_as_interrupt`); a second one ends the worker, as by default (the
    loader's own ``terminate`` of a worker that does not stop). Once the owner exits (``exiting``, set at its exit
    by :func:`_exit_flag`), the first SIGTERM ends the worker. A batch's handover the unwinding owner breaks off is
    not reported (:func:`_unless_broken_off`).

    A SIGTERM sent to the whole process group (Slurm's ``scancel``, ``kill -- -PGID``) ended the workers at once,
    and the unwinding owner's loader then printed "Exception ignored in _MultiProcessingDataLoaderIter.__del__ ...
    DataLoader worker (pid N) is killed by signal: Terminated" after its own ``terminated`` line. A worker whose
    owner is gone stops by torch's own watchdog.
    """
    signal.signal(signal.SIGTERM, functools.partial(_first_sigterm, exiting))
    sys.excepthook = functools.partial(_unless_broken_off, sys.excepthook)


def _first_sigterm(exiting: ctypes.c_byte, signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the worker
    if exiting.value:  # multiprocessing's exit handler: one SIGTERM, then a join without a time limit
        os._exit(0)  # (an exit code, not death by the signal, which the loader's SIGCHLD handler reports)


@functools.cache
def _exit_flag() -> ctypes.c_byte:
    """A flag the loader workers share with this process, set when it exits.

    At exit ``multiprocessing`` ends the daemonic processes still running, persistent loader workers among them
    (a loader that is still referenced: a global, or a frame of the traceback of the error that ends the
    script), with one SIGTERM each, then waits for them without a time limit: a worker that left that SIGTERM to
    its owner kept the process from exiting. Registered after ``multiprocessing``'s own exit handler, this one runs
    first (``atexit`` runs the last registered first)."""
    flag = multiprocessing.RawValue(ctypes.c_byte, 0)
    atexit.register(lambda: setattr(flag, "value", 1))
    return flag


def _unless_broken_off(report: Callable, kind: type[BaseException], error: BaseException, trace: object) -> None:
    """A loader worker's ``sys.excepthook``: ``report`` all but a ConnectionError or EOFError. The worker's
    ``multiprocessing`` resource sharer thread hands each batch's shared memory (its file descriptor) to the owner and
    reports a failed handover through ``sys.excepthook``; an owner that unwinds (a SIGTERM, Ctrl-C) breaks off the
    handover it was in ("ConnectionResetError: [Errno 104] Connection reset by peer", or an EOFError where it closed
    the connection before its request), and one that fails to receive a batch says so itself."""
    if not issubclass(kind, (ConnectionError, EOFError)):
        report(kind, error, trace)
