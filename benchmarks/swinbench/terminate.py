"""SIGTERM (``kill``, a scheduler's stop) unwinds the benchmark as Ctrl-C does, instead of the default exit on the
spot, which left the temporary files behind (``--contended``'s photos folder).

The same handler as ``swinlite.engine.cli.terminate_as_interrupt``, which the benchmark does not import: that module
loads the whole training engine (its plots need matplotlib, of the ``train`` extra, which the benchmark does not
otherwise need).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the benchmark is, as Ctrl-C's KeyboardInterrupt is: the same unwinding."""


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the block (once: a second one ends the process at once, as by default).
    A process forked in the block (a DataLoader worker, which multiprocessing ends by SIGTERM at exit) inherits the
    handler: there it ends the process as the default does, rather than raise (and print a traceback) in it."""
    owner = os.getpid()

    def handler(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if os.getpid() != owner:
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)  # benchmark.py runs in the main thread
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
