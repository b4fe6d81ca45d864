"""A process of its own for a test's run that must die (SIGKILL) or be killed: a forked child of the test's process,
without the seconds a fresh interpreter takes to import torch, timm and swinlite again.

Not for a run that trains: a backward pass in a forked child fails ("Unable to handle autograd's threading in
combination with fork-based multiprocessing") once the pytest worker has used autograd's threads, as torch.export
and torch.compile tests do before it in a full run. File writes and inference (no_grad) are what it serves."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable


def forked(child: Callable[[], object], kill_after: str | None = None) -> tuple[int, str]:
    """Run ``child()`` in a forked child process, its stdout and stderr into a pipe, and return (its wait status, what
    it printed). With ``kill_after``, SIGKILL it once it prints a line starting with that. The child ends with
    ``child()``'s return value as its exit code (1 on an exception, whose traceback is in the output): nothing of it
    returns into pytest."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            os.dup2(write, 1)
            os.dup2(write, 2)
            sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)
            result = child()
            code = result if type(result) is int else 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            os._exit(code)
    os.close(write)
    lines = []
    with open(read) as output:
        for line in output:
            lines.append(line)
            if kill_after is not None and line.startswith(kill_after):
                os.kill(pid, signal.SIGKILL)
                break
    _, status = os.waitpid(pid, 0)
    return status, "".join(lines)


def killed(status: int) -> bool:
    """Whether a wait status is that of a process ended by SIGKILL."""
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
