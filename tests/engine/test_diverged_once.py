"""A divergence under torchrun, in two processes (forked: torch is already imported; they join the process group and
report, none trains): every process diverged at the same step printed the same ``error:`` line once per process
before; now rank 0 says it and the others exit with code 2 quietly. A loss that diverged on one process alone is said
by that process, named by its rank, and the other finds it in the store to say why it stops."""

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from rankforks import forked_pair, stay_until_reported

from swinlite.classification.task import ClassificationTask
from swinlite.engine import cli, distributed, handshake
from swinlite.engine.loop import TrainingDiverged
from swinlite.engine.trainer import Trainer

DIVERGED = "training diverged in epoch 1/2 at step 3/5: the loss is nan"
KEPT = "no epoch completed, nothing to resume was saved in out"
SAID = f"{DIVERGED}; {KEPT} (try a lower optim.lr, or optim.clip_grad)"
WAIT = 0.5  # train.dist_timeout: how long a diverged process waits for the others' divergence


def _diverging_run(info: distributed.DistInfo):
    """``run`` as the trainer ends it when this process's loss diverged."""
    trainer = SimpleNamespace(
        dist=info,
        cfg=SimpleNamespace(train=SimpleNamespace(dist_timeout=WAIT)),
        _restore_epoch_end=lambda: None,
        _kept=lambda: KEPT,
    )

    def run(*args, **kwargs):
        raise Trainer._diverged(trainer, TrainingDiverged(DIVERGED))

    return run


def _rank(rank: int, port: int, diverged: list[int], reports: list[Path]) -> None:
    """One process: joins the group; one in ``diverged`` reports how the scripts' entry ends, another (rank 0 alone
    in these tests) stays (it hosts the store) until the other has reported, then reports the notes it finds."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    info = distributed.launched()
    distributed.init_distributed(torch.device("cpu"), 10.0, handshake.launch_store(info, 10.0))
    if rank in diverged:
        cli.run = _diverging_run(info)
        try:
            reports[rank].write_text(f"exit {cli.run_from_cli(ClassificationTask, None, [])}")
        except Exception as e:
            reports[rank].write_text(f"{type(e).__name__}: {e}")
    stay_until_reported(reports, rank)  # the store's host stays until every other process is done with it
    if rank not in diverged:
        reports[rank].write_text("; ".join(distributed.notes_elsewhere(info)))
    os._exit(0)


@pytest.mark.parametrize(
    ("diverged", "expected"),
    [
        ([0, 1], [f"SharedDivergence: {SAID}", "exit 2"]),  # rank 0's error line alone
        ([1], [f"rank 1: {SAID}", f"TrainingDiverged: rank 1: {SAID}"]),  # rank 0 stops saying rank 1's line
    ],
)
def test_a_divergence_is_said_once_or_by_its_rank(diverged: list[int], expected: list[str], tmp_path: Path):
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    forked_pair(_rank, (diverged, reports), timeout=30)
    assert [r.read_text() if r.exists() else "" for r in reports] == expected
