"""benchmark.py --contended ended by SIGTERM (or kill -9) during timing left its busy-core process (multiprocessing
spawn) reparented to init, spinning at 100 % forever (or paused by SIGSTOP forever), and the resource tracker with
it. The busy process now ends with the benchmark whatever ends it, running or paused."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# A benchmark stand-in: the busy-core process started, resumed or left paused, its pid printed, then waiting.
DRIVER = """
import sys, time
from swinbench import contended
pids = []
real_kill = contended.os.kill
contended.os.kill = lambda pid, sig: pids.append(pid) or real_kill(pid, sig)
with contended.busy_core() as set_busy:
    set_busy(sys.argv[1] == "busy")
    print(pids[0], flush=True)
    time.sleep(120)
"""


def _alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads a process's state from /proc")
@pytest.mark.parametrize(("state", "sig"), [("busy", signal.SIGTERM), ("paused", signal.SIGKILL)])
def test_the_busy_core_process_ends_with_the_benchmark(state, sig):
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(BENCHMARKS), *sys.path]), "OMP_NUM_THREADS": "1"}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, state], env=env, stdout=subprocess.PIPE, text=True)
    try:
        busy = int(driver.stdout.readline())
        assert _alive(busy)
        driver.send_signal(sig)
        driver.wait(timeout=30)
        deadline = time.monotonic() + 5
        while _alive(busy) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _alive(busy)
        if left:
            os.kill(busy, signal.SIGKILL)
        assert not left, f"the {state} busy-core process outlived the benchmark ended by {sig.name}"
    finally:
        driver.kill()
        driver.wait()
