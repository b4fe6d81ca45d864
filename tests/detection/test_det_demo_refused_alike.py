"""Detection's data under torchrun, in two processes (forked: torch is already imported; they join the process group
and build the trainer's data, none trains) where rank 0's build of the demo data fails: rank 0 waited in the data
check's gather (``refused_alike``) while the other waited in the barrier after the build, up to train.dist_timeout;
now rank 0's error is every process's, said once."""

import os
from pathlib import Path

import pytest
import torch
from detkit import tiny_overrides
from rankforks import forked_pair, report_and_exit

from swinlite.detection import task
from swinlite.detection.task import DetectionTask
from swinlite.engine import cli, distributed, handshake
from swinlite.engine.trainer import Trainer

FAILED = "the demo data could not be built: no space left"
WAIT = 5.0  # train.dist_timeout: how long the old code's processes waited for each other


def _rank(rank: int, port: int, overrides: list[str], reports: list[Path]) -> None:
    """One process: joins the group and reports how the scripts' entry ends once the trainer has read the data;
    rank 0 then stays (it hosts the store) until the other has reported."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    info = distributed.launched()
    distributed.init_distributed(torch.device("cpu"), WAIT, handshake.launch_store(info, 10.0))
    cli.run = lambda task, cfg, **kwargs: Trainer(task, cfg, info, torch.device("cpu"), Path(cfg.train.output_dir))
    try:
        said = f"exit {cli.run_from_cli(DetectionTask, None, overrides)}"
    except Exception as e:
        said = f"{type(e).__name__}: {e}"
    report_and_exit(reports, rank, said)


def test_a_failed_demo_build_on_rank_0_stops_every_process_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def fail(root: object) -> None:
        raise ValueError(FAILED)

    monkeypatch.setattr(task, "build_digit_scenes", fail)  # the forked processes inherit it (rank 0 alone calls it)
    overrides = tiny_overrides(tmp_path / "digits", tmp_path / "out", **{"data.dataset": "digits"})
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    _, seconds = forked_pair(_rank, (overrides, reports), timeout=30)
    assert [r.read_text() if r.exists() else "" for r in reports] == [f"SharedError: {FAILED}", "exit 2"]
    assert seconds < WAIT, seconds
