"""Errors every process of a run meets alike after the join, in two processes (forked: torch is already imported; they
join the process group and report, none trains): each process printed the same ``error:`` line before; now rank 0
says it and the others exit with code 2 quietly. An evaluation that failed on every process is said once rank 0 wrote
the trained epoch: the others ended at once before, and torchrun ended rank 0 in the middle of writing it. A data
refusal of one process alone is still said, named by its rank."""

import os
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from rankforks import forked_pair, report_and_exit

from swinlite.classification.task import ClassificationTask
from swinlite.engine import cli, distributed, handshake
from swinlite.engine.checkpoint import RESUME_FILE
from swinlite.engine.trainer import Trainer

WAIT = 5.0  # train.dist_timeout: how long a failed evaluation waits for the others' (they fail at once here)
SAVE_SECONDS = 1.0  # how long rank 0 takes to write resume.pt (a Swin-B's, with AdamW's state: ~1.3 GB)
UNKNOWN = "the val annotations have category ids the training annotations lack: [7]"


def _failing_evaluation(info: distributed.DistInfo, out: Path) -> Callable[..., None]:
    """``run`` as the trainer ends it when this process's evaluation of a trained epoch failed."""

    def scores(model: object, loader: object) -> dict[str, float]:
        raise KeyError("area")

    def save_position() -> None:
        if info.is_main:
            time.sleep(SAVE_SECONDS)
            (out / RESUME_FILE).write_text("whole")

    trainer = SimpleNamespace(
        dist=info,
        out=out,
        cfg=SimpleNamespace(train=SimpleNamespace(dist_timeout=WAIT)),
        loaders=[None, None],
        scores=scores,
        save_position=save_position,
    )

    def run(*args, **kwargs) -> None:
        Trainer.evaluate(trainer, None, "epoch 1/1")

    return run


def _refusing_data(info: distributed.DistInfo, out: Path, refusing: list[int]) -> Callable[..., None]:
    """``run`` building the trainer of a task whose data check refuses on the processes ``refusing``."""

    class Refusing(ClassificationTask):
        def build_datasets(self) -> tuple[list[int], list[int]]:
            if self.ctx.dist.rank in refusing:
                raise ValueError(UNKNOWN)
            return [0] * 4, [0] * 2

    def run(task: type, cfg: object, **kwargs) -> None:
        Trainer(Refusing, cfg, info, torch.device("cpu"), out)

    return run


def _rank(rank: int, port: int, case: str, out: Path, refusing: list[int], reports: list[Path]) -> None:
    """One process: joins the group and reports how the scripts' entry ends (rank 1: with what resume.pt held as it
    ended); rank 0 then stays (it hosts the store) until the other has reported."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    info = distributed.launched()
    distributed.init_distributed(torch.device("cpu"), 10.0, handshake.launch_store(info, 10.0))
    cli.run = _failing_evaluation(info, out) if case == "evaluation" else _refusing_data(info, out, refusing)
    try:
        said = f"exit {cli.run_from_cli(ClassificationTask, None, [])}"
    except Exception as e:
        said = f"{type(e).__name__}: {e}"
    if rank and case == "evaluation":
        resume = out / RESUME_FILE
        said += f"; {RESUME_FILE}: {resume.read_text() if resume.exists() else 'missing'}"
    report_and_exit(reports, rank, said)


def test_an_evaluation_failed_everywhere_is_said_once_after_the_save(tmp_path: Path):
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    forked_pair(_rank, ("evaluation", tmp_path, [], reports), timeout=30)
    said = (
        f"SharedEvaluationFailure: evaluation after training epoch 1/1 failed (KeyError: 'area'); the trained epoch is "
        f"saved in {tmp_path / RESUME_FILE}: fix the cause and --resume to evaluate it"
    )
    assert [r.read_text() if r.exists() else "" for r in reports] == [said, f"exit 2; {RESUME_FILE}: whole"]


@pytest.mark.parametrize(
    ("refusing", "said"),
    [
        ([0, 1], f"SharedError: {UNKNOWN}"),  # rank 0's error line alone
        ([1], f"SharedError: rank 1: {UNKNOWN}"),  # one process's alone: rank 0 says it, by its rank
    ],
)
def test_a_data_refusal_after_the_join_is_said_once(refusing: list[int], said: str, tmp_path: Path):
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    forked_pair(_rank, ("data", tmp_path, refusing, reports), timeout=30)
    assert [r.read_text() if r.exists() else "" for r in reports] == [said, "exit 2"]
