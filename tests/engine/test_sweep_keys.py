"""A sweep: ``run`` called twice in the same two processes (forked: torch is already imported; they join the process
group and leave it, none trains), on one launch store that keeps its keys (torchrun's agent's). The second run read
the first one's startup reports as its own before: ``optim.lr is 0.001 on rank 0 and 0.002 on rank 1``."""

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from rankforks import forked_pair

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
        try:
            info = handshake.join(torch.device("cpu"), 10.0, {"optim.lr": lr})
            distributed.all_gather_object(None, info)  # the group joined works
            distributed.cleanup(info)
            said.append("joined")
        except Exception as e:
            said.append(f"{type(e).__name__}: {e}")
        distributed.run_ended()
    reports[rank].write_text("; ".join(said))
    deadline = time.monotonic() + 30
    while not all(r.exists() for r in reports[rank + 1 :]) and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(0)


def test_a_sweeps_next_run_reads_its_own_startup_reports(tmp_path: Path):
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    forked_pair(_rank, (reports,), timeout=30)
    assert [r.read_text() if r.exists() else "" for r in reports] == ["joined; joined"] * 2
