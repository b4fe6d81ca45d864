"""Two training processes (DDP over gloo) where one stops progressing: the other fails after train.dist_timeout
with an error naming the stalled rank, instead of waiting forever; for every task. One with nothing to evaluate
keeps in step with the other; one whose evaluation fails alone leaves the other without waiting for it."""

import multiprocessing
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from enginekit import DATA_FIXTURE, TASKS, tiny_config
from torch.utils.data import DataLoader, Subset

from swinlite.engine import loop, run, trainer


def _no_val_shard(real):
    """``build_loaders`` whose val loader holds no sample (a shard of a split smaller than the processes)."""

    def build(train_ds, val_ds, *args, **kwargs):
        train, val = real(train_ds, val_ds, *args, **kwargs)
        return train, DataLoader(Subset(val_ds, []), batch_size=2, collate_fn=val.collate_fn)

    return build


def _fails(self, model, loader):
    raise KeyError("area")


def _rank(task: str, fault: str, rank: int, port: int, data: Path, out: Path, report: Path) -> None:
    """One process of the run (forked: torch is already imported); rank 1 has the ``fault``."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    if rank == 1 and fault == "stall":
        loop.optimizer_step = lambda *args: time.sleep(600)  # alive, not progressing
    if rank == 1 and fault == "no_val":
        trainer.build_loaders = _no_val_shard(trainer.build_loaders)
    settings = {"data.batch_size": 2, "train.dist_timeout": 3}
    if fault != "stall":  # one step an epoch: the evaluations are what these faults concern
        settings["train.max_iters"] = 1
    if fault == "evaluation_fails":  # rank 1 waited train.dist_timeout for rank 0 (in its evaluation), not the wait
        settings["train.dist_timeout"], trainer.EVALUATED_ALIKE_WAIT = 60, 1.0
    if rank == 1 and fault == "evaluation_fails":
        TASKS[task].evaluate = _fails
    try:
        run(TASKS[task], tiny_config(task, data, out, **settings))
        report.write_text("finished")
    except Exception as e:
        report.write_text(f"{type(e).__name__}: {e}")
    os._exit(0)


def _two_ranks(task: str, fault: str, tmp_path: Path, data: Path) -> list[str]:
    """Run rank 0 and rank 1 (with the ``fault``) to the end of rank 0; what each reported (rank 1 may not have)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fork = multiprocessing.get_context("fork")
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    procs = [fork.Process(target=_rank, args=(task, fault, r, port, data, tmp_path / "out", reports[r]))
             for r in range(2)]  # fmt: skip
    for p in procs:
        p.start()
    try:
        procs[0].join(timeout=120)
        ended = [r.read_text() if r.exists() else "" for r in reports]
        assert procs[0].exitcode == 0, ended
        if fault == "stall":
            assert procs[1].is_alive(), ended  # rank 0 gave up; rank 1 still hangs
        else:
            procs[1].join(timeout=60)
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join()
    return [r.read_text() if r.exists() else "" for r in reports]


@pytest.mark.filterwarnings("ignore::UserWarning")  # the COCO file's quirks warn; tests/detection checks them
@pytest.mark.parametrize("task", ["detection"])  # the engine's, the same for every task (6 s each to run)
def test_stalled_rank_is_named_after_the_timeout(task: str, tmp_path: Path, request: pytest.FixtureRequest):
    message = _two_ranks(task, "stall", tmp_path, request.getfixturevalue(DATA_FIXTURE[task]))[0]
    assert message.startswith("StalledRankError: rank 1 stopped progressing (a collective waited train.dist_timeout=3")
    assert not (tmp_path / "out" / ".lock").exists()  # rank 0 released the output folder


@pytest.mark.parametrize(
    ("fault", "rank1"),
    [
        # DDP's buffer broadcast in the first evaluation forward met rank 1's next collective: a timeout, blamed on a
        # "stalled" process, the trained epoch lost
        ("no_val", "finished"),
        # rank 1 saved the epoch alone: its save's collective met one of rank 0's evaluation
        ("evaluation_fails", "EvaluationFailed: rank 1: evaluation after training epoch 1/2 failed (KeyError: 'area') "
                             "on this process alone"),
    ],
)  # fmt: skip
def test_evaluation_keeps_the_processes_in_step(fault: str, rank1: str, tmp_path: Path, folder: Path):
    ended = _two_ranks("classification", fault, tmp_path, folder)
    assert ended[1].startswith(rank1), ended
    # rank 0 cannot evaluate without rank 1; it says why rank 1 ended, not "see the other ranks"
    failed = rank1.removeprefix("EvaluationFailed: ").removesuffix(" on this process alone")
    rank0 = "finished" if fault == "no_val" else f"PeerGoneError: rank 0: another process failed: {failed}"
    assert ended[0].startswith(rank0), ended
