"""A sweep: ``run`` called twice in the same two processes (forked: torch is already imported; they join the process
group and leave it, none trains), on one launch store that keeps its keys (torchrun's agent's). The second run read
the first one's startup reports as its own before: ``optim.lr is 0.001 on rank 0 and 0.002 on rank 1``."""

import contextlib
import importlib
import os
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from rankforks import forked_pair, report_and_exit

from swinlite.engine import distributed, handshake

LRS = (0.001, 0.002)  # each run's, alike on every process
LATE = 0.5  # seconds rank 0 starts the second run after rank 1: rank 1 finds the first run's reports there


def _rank(rank: int, port: int, reports: list[Path]) -> None:
    """One process: joins and leaves the group once per run, as ``run`` does, then reports how the runs ended; rank 0
    then stays (it hosts the store) until the other has reported."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, wait_for_workers=False)
    handshake.launch_store = lambda info, timeout: store  # the agent's, for every run
    said = []
    for lr in LRS:
        time.sleep(LATE * (rank == 0 and lr != LRS[0]))
        distributed.run_started()
        try:
            info = handshake.join(torch.device("cpu"), 10.0, {"optim.lr": lr})
            distributed.all_gather_object(None, info)  # the group joined works
            distributed.cleanup(info)
            said.append("joined")
        except Exception as e:
            said.append(f"{type(e).__name__}: {e}")
    report_and_exit(reports, rank, "; ".join(said))


def test_a_sweeps_next_run_reads_its_own_startup_reports(tmp_path: Path):
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    forked_pair(_rank, (reports,), timeout=30)
    assert [r.read_text() if r.exists() else "" for r in reports] == ["joined; joined"] * 2


def test_an_error_after_a_run_posts_nothing_under_the_next_runs_keys(monkeypatch):
    """A process that posted its startup report and then ended its run on an error tells the launch nothing more on
    its way out (the script's ``tell_launch``): the keys moved at the run's end, so it posted a stray report under the
    next run's keys and waited 5 s (bounded at 20) for peers that never answer, delaying torchrun's SIGTERM."""
    run_module = importlib.import_module("swinlite.engine.run")
    monkeypatch.setattr(distributed, "_runs", 0)
    monkeypatch.setattr(distributed, "_started", False, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(handshake, "_posted", f"{handshake._prefix()}/1")  # joined: its report posted

    def refused(task):
        raise ValueError("an error after the join")

    told = []
    monkeypatch.setattr(run_module, "checked_alike", lambda info: contextlib.nullcontext())  # raised as after the join
    monkeypatch.setattr(run_module, "check_task", refused)
    monkeypatch.setattr(handshake, "refuse_with_peers", lambda info, error, wait: told.append(str(error)))
    with pytest.raises(ValueError, match="after the join"):
        run_module.run(None, None)
    handshake.refuse_before_checks("boom", 5.0)
    assert told == []
