"""``stalled_ranks`` after a collective timed out, in two processes (forked: torch is already imported): every process
waits at most its ``wait``, not train.dist_timeout, and rank 0 names the ranks that did not answer."""

import json
import multiprocessing
import os
import signal
import socket
import time
from pathlib import Path

import pytest
import torch

from swinlite.engine import distributed, handshake

DIST_TIMEOUT = 10.0  # the process group's: gloo's monitored barrier held a rank other than 0 this long
WAIT = 0.5


def _rank(rank: int, silent: int | None, port: int, reports: list[Path]) -> None:
    """One process: joins the group, then answers ``stalled_ranks`` unless it is the ``silent`` one, which stays (it
    may host the store) until the other has reported."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    info = distributed.launched()
    distributed.init_distributed(torch.device("cpu"), DIST_TIMEOUT, handshake.launch_store(info, DIST_TIMEOUT))
    if rank == silent:
        deadline = time.monotonic() + 30
        while not reports[1 - rank].exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        start = time.monotonic()
        stalled = distributed.stalled_ranks(info, wait=WAIT)
        reports[rank].write_text(json.dumps({"stalled": stalled, "waited": time.monotonic() - start}))
        time.sleep(0.5)  # the other reads the store rank 0 hosts
    os._exit(0)


@pytest.mark.parametrize(
    ("silent", "expected"),
    [
        (0, [None, None]),  # rank 1: rank 0 did not answer (gloo's monitored barrier held it train.dist_timeout)
        (1, [[1], None]),
        (None, [[], []]),
    ],
)
def test_every_rank_waits_at_most_its_wait(silent: int | None, expected: list, tmp_path: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fork = multiprocessing.get_context("fork")
    reports = [tmp_path / f"rank{r}.json" for r in range(2)]
    procs = [fork.Process(target=_rank, args=(r, silent, port, reports)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=30)
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join()
    answered = [json.loads(r.read_text()) if rank != silent else None for rank, r in enumerate(reports)]
    for rank, report in enumerate(answered):
        if report is not None:
            assert report["stalled"] == expected[rank], answered
            assert report["waited"] < WAIT + 2, answered
