"""``stalled_ranks`` after a collective timed out, in two processes (forked: torch is already imported): every process
waits at most its ``wait``, not train.dist_timeout, and rank 0 names the ranks that did not answer."""

import json
import multiprocessing
import os
import signal
import socket
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from rankforks import forked_pair

from swinlite.engine import distributed, handshake

DIST_TIMEOUT = 10.0  # the process group's: gloo's monitored barrier held a rank other than 0 this long
WAIT = 0.5
REPLY_WAIT = 0.2  # a store's reply, in the test of a stopped store host


def _rank(rank: int, port: int, silent: int | None, reports: list[Path]) -> None:
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
    reports = [tmp_path / f"rank{r}.json" for r in range(2)]
    forked_pair(_rank, (silent, reports), timeout=30)
    answered = [json.loads(r.read_text()) if rank != silent else None for rank, r in enumerate(reports)]
    for rank, report in enumerate(answered):
        if report is not None:
            assert report["stalled"] == expected[rank], answered
            assert report["waited"] < WAIT + 2, answered


def _host_store(port: int) -> None:
    """The store's host (as rank 0 hosts it), until killed."""
    store = torch.distributed.TCPStore(
        "127.0.0.1", port, 2, True, timeout=timedelta(seconds=30), wait_for_workers=False
    )
    time.sleep(60)
    del store


def test_a_stopped_store_host_holds_no_one(monkeypatch: pytest.MonkeyPatch):
    """Rank 0 that hosts the store is stopped (SIGSTOP: alive, connected, never replying): a TCPStore client waited
    for its reply without limit (its timeout bounds no reply); every store call after a timed-out collective ends."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = multiprocessing.get_context("fork").Process(target=_host_store, args=(port,))
    host.start()
    try:
        store = torch.distributed.TCPStore("127.0.0.1", port, 2, False, timeout=timedelta(seconds=10))
        os.kill(host.pid, signal.SIGSTOP)
        monkeypatch.setattr(distributed, "_store", store)
        monkeypatch.setattr(distributed, "STORE_REPLY_WAIT", REPLY_WAIT)
        info = distributed.DistInfo(rank=1, world_size=2, local_rank=1)
        start = time.monotonic()
        assert distributed.notes_elsewhere(info) == []
        assert distributed.stalled_ranks(info, wait=REPLY_WAIT) is None
        assert distributed.all_answer(info, REPLY_WAIT, "rank 1: evaluation failed") is False
        assert time.monotonic() - start < 5 * REPLY_WAIT + 1
    finally:
        os.kill(host.pid, signal.SIGKILL)
        host.join()
