"""Two training processes (DDP over gloo) where one stops progressing: the other fails after train.dist_timeout
with an error naming the stalled rank, instead of waiting forever; for every task."""

import multiprocessing
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from enginekit import DATA_FIXTURE, TASKS, tiny_config

from swinlite.engine import loop, run


def _rank(task: str, rank: int, port: int, data: Path, out: Path, report: Path) -> None:
    """One process of the run (forked: torch is already imported); rank 1 hangs in its first optimizer step."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    if rank == 1:
        loop.optimizer_step = lambda *args: time.sleep(600)  # alive, not progressing
    try:
        run(TASKS[task], tiny_config(task, data, out, **{"data.batch_size": 2, "train.dist_timeout": 3}))
        report.write_text("finished")
    except Exception as e:
        report.write_text(f"{type(e).__name__}: {e}")
    os._exit(0)


@pytest.mark.filterwarnings("ignore::UserWarning")  # the COCO file's quirks warn; tests/detection checks them
@pytest.mark.parametrize("task", ["detection"])  # the engine's, the same for every task (6 s each to run)
def test_stalled_rank_is_named_after_the_timeout(task: str, tmp_path: Path, request: pytest.FixtureRequest):
    data = request.getfixturevalue(DATA_FIXTURE[task])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fork = multiprocessing.get_context("fork")
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    procs = [fork.Process(target=_rank, args=(task, r, port, data, tmp_path / "out", reports[r])) for r in range(2)]
    for p in procs:
        p.start()
    try:
        procs[0].join(timeout=120)
        ended = [r.read_text() if r.exists() else "" for r in reports]
        assert procs[0].exitcode == 0 and procs[1].is_alive(), ended  # rank 0 gave up; rank 1 still hangs
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join()
    message = reports[0].read_text()
    assert message.startswith("StalledRankError: rank 1 stopped progressing (a collective waited train.dist_timeout=3")
    assert not (tmp_path / "out" / ".lock").exists()  # rank 0 released the output folder
