"""benchmark.py --contended: after Ctrl-C (which reaches the busy-core process with the benchmark) a stray "Process
SpawnProcess-1:" traceback came before "interrupted"; the "loader" rows' % of matmul ceiling is of the quiet ceiling,
which the header did not say."""

import os
import signal
import time
from contextlib import nullcontext
from dataclasses import asdict

import pytest
from swinbench import contended
from swinbench.report import markdown_table
from swinbench.swin import BenchConfig, machine_info


def _state(pid: int) -> str | None:
    """The process's state letter (R, S, T, Z...), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads a process's state from /proc")
def test_the_busy_core_process_ignores_ctrl_c(monkeypatch):
    pids = []
    real_kill = os.kill
    monkeypatch.setattr(contended.os, "kill", lambda pid, sig: pids.append(pid) or real_kill(pid, sig))
    with contended.busy_core() as set_busy:
        set_busy(True)
        real_kill(pids[0], signal.SIGINT)  # as Ctrl-C sends it to the whole process group
        time.sleep(0.5)
        assert _state(pids[0]) in ("R", "S"), "the busy process exited on Ctrl-C (and printed its traceback)"


def test_the_header_says_the_loader_rows_use_the_quiet_ceiling(monkeypatch):
    def start(cfg: BenchConfig, tasks: tuple[str, ...]):
        result = dict(config=asdict(cfg), machine=machine_info("cpu"), max_output_difference={})
        return dict.fromkeys(cfg.models), None, result | dict(gflop_per_image=dict.fromkeys(tasks, 0.01))

    monkeypatch.setattr(contended, "start_run", start)
    monkeypatch.setattr(contended, "busy_core", lambda: nullcontext(lambda active: None))
    monkeypatch.setattr(contended, "photo_loader", lambda *args: nullcontext())
    monkeypatch.setattr(contended, "make_step", lambda *args: lambda: None)
    monkeypatch.setattr(contended, "_predict_pass", lambda *args: None)
    monkeypatch.setattr(contended, "matmul_step", lambda *args: (lambda: None, 1))
    cfg = BenchConfig(batch=1, img_size=32, models=("swinlite", "timm"), tasks=("inference",), warmup=0, repeats=1)
    table = markdown_table(contended.run_contended(cfg, log=lambda _: None, order_seed=0))
    assert "its % of matmul ceiling is of the quiet ceiling" in table
