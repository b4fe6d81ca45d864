"""Two training processes (DDP over gloo) where one stops progressing: the other fails after train.dist_timeout
with an error naming the stalled rank, instead of waiting forever."""

import multiprocessing
import os
import signal
import socket
import time
from pathlib import Path

from trainkit import tiny_config

from swinlite.train import engine, train


def _rank(rank: int, port: int, data: Path, out: Path, report: Path) -> None:
    """One process of the run (forked: torch is already imported); rank 1 hangs in its first optimizer step."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    if rank == 1:
        engine.optimizer_step = lambda *args: time.sleep(600)  # alive, not progressing
    try:
        train(tiny_config(data, out, **{"data.batch_size": 4, "train.dist_timeout": 3}))
        report.write_text("finished")
    except Exception as e:
        report.write_text(f"{type(e).__name__}: {e}")
    os._exit(0)


def test_stalled_rank_is_named_after_the_timeout(tmp_path: Path, folder: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fork = multiprocessing.get_context("fork")
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    procs = [fork.Process(target=_rank, args=(r, port, folder, tmp_path / "out", reports[r])) for r in range(2)]
    for p in procs:
        p.start()
    try:
        procs[0].join(timeout=120)
        assert procs[0].exitcode == 0 and procs[1].is_alive()  # rank 0 gave up; rank 1 still hangs
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join()
    message = reports[0].read_text()
    assert message.startswith("StalledRankError: rank 1 stopped progressing (a collective waited train.dist_timeout=3")
    assert not (tmp_path / "out" / ".lock").exists()  # rank 0 released the output folder
