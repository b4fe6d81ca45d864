"""benchmark.py --contended ended by SIGTERM (or kill -9) during timing left its busy-core process (multiprocessing
spawn) reparented to init, spinning at 100 % forever (or paused by SIGSTOP forever), and the resource tracker with
it. The busy process now ends with the benchmark whatever ends it, running or paused."""

import os
import signal
import sys
import time

import pytest
from swinbench import contended


def _alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _benchmark(busy: bool, write: int) -> None:
    """A benchmark stand-in in a forked child of this process (no torch import of its own): the busy-core process
    started, resumed or left paused, its pid written to ``write``, then waiting. SIGTERM ends it as it ends a fresh
    interpreter (the default action: no unwinding)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    pids = []
    real_kill = contended.os.kill
    contended.os.kill = lambda pid, sig: pids.append(pid) or real_kill(pid, sig)
    with contended.busy_core() as set_busy:
        set_busy(busy)
        os.write(write, f"{pids[0]}\n".encode())
        time.sleep(120)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads a process's state from /proc")
@pytest.mark.parametrize(("state", "sig"), [("busy", signal.SIGTERM), ("paused", signal.SIGKILL)])
def test_the_busy_core_process_ends_with_the_benchmark(state, sig):
    read, write = os.pipe()
    driver = os.fork()
    if driver == 0:
        try:
            os.close(read)
            _benchmark(state == "busy", write)
        finally:
            sys.stderr.flush()
            os._exit(1)
    os.close(write)
    try:
        with open(read) as pipe:
            busy = int(pipe.readline())
        assert _alive(busy)
        os.kill(driver, sig)
        _, status = os.waitpid(driver, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == sig
        deadline = time.monotonic() + 5
        while _alive(busy) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _alive(busy)
        if left:
            os.kill(busy, signal.SIGKILL)
        assert not left, f"the {state} busy-core process outlived the benchmark ended by {sig.name}"
    finally:
        try:
            os.kill(driver, signal.SIGKILL)
            os.waitpid(driver, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
