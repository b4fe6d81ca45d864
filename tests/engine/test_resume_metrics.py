"""What a resumed run records of its epochs: the time of an epoch resumed from a step checkpoint inside it, and the
best scores when the resume changed the validation set."""

import csv
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from enginekit import TASKS, tiny_config

from swinlite.engine import run, trainer
from swinlite.engine.checkpoint import load_resume
from swinlite.io import read_metadata

TASK = TASKS["classification"]


class Killed(BaseException):
    """A kill at a chosen point (a BaseException, as KeyboardInterrupt: no ``except Exception`` handles it)."""


def config(data: Path, out: Path, **settings: object) -> Any:
    """A tiny run without warm-up (of its few steps, a warm-up leaves none to decay: a warning)."""
    return tiny_config("classification", data, out, **{"schedule.warmup_epochs": 0, **settings})


def metrics(out: Path) -> list[dict[str, str]]:
    with open(out / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_an_epoch_resumed_from_a_step_checkpoint_counts_the_time_before_the_kill(folder, tmp_path, monkeypatch):
    """Resumed after step 2 of 3, the epoch's epoch_time was that of step 3 and its evaluation alone: a short epoch
    in metrics.csv, unmarked. It is the whole epoch's now, the time before the kill kept in the step checkpoint (as
    Lightning's Timer keeps its elapsed time over a resume); train_img_s stays the rate of the images trained since
    the resume, over their own time."""
    settings = {"train.epochs": 1, "train.save_every_steps": 1}  # 24 images: 3 steps of 8
    out, steps, train_step = tmp_path / "run", [], TASK.train_step

    def slow_then_killed(self, model, batch):
        steps.append(1)
        if len(steps) == 3:  # after the step checkpoint of step 2
            raise Killed
        time.sleep(1.0)
        return train_step(self, model, batch)

    with monkeypatch.context() as patch:
        patch.setattr(TASK, "train_step", slow_then_killed)
        with pytest.raises(Killed):
            run(TASK, config(folder, out, **settings))
    assert load_resume(out / "resume.pt")["batch"] == 2
    run(TASK, config(folder, out, **settings), resume=True)
    (row,) = metrics(out)
    assert float(row["epoch_time"]) >= 2.0
    assert float(row["train_img_s"]) > 24 / float(row["epoch_time"])  # not the epoch's images over its whole time


def scored(scores: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluations score ``scores`` in turn, one per epoch."""
    calls = []

    def evaluate(self, model, loader):
        calls.append(1)
        return {"val_loss": 1.0, "val_top1": scores[len(calls) - 1]}

    monkeypatch.setattr(TASK, "evaluate", evaluate)


def test_a_resume_on_another_validation_set_restarts_the_best(folder, tmp_path, capsys, monkeypatch):
    """--resume with another data.data_dir (its val split another set) warned of the changed setting, then compared
    the new set's scores with the old set's best: best.safetensors kept epoch 1's weights (90 on the old set) over
    epoch 2's (50 on the new one). The best restarts on the new set, with a note naming the old score; within the
    new set, a lower score (epoch 3's 40) keeps it."""
    other, out = shutil.copytree(folder, tmp_path / "other"), tmp_path / "run"
    scored([90.0, 50.0, 40.0], monkeypatch)
    run(TASK, config(folder, out, **{"train.epochs": 1}))
    capsys.readouterr()
    run(TASK, config(other, out, **{"train.epochs": 3}), resume=True)
    log = capsys.readouterr().out
    note = (
        f"note: the best so far (val_top1 90.00) was scored on another validation set (data.data_dir: {folder} -> "
        f"{other}), which does not compare with this one: the best restarts, the next evaluation's weights replace "
        "best.safetensors\n"
    )
    assert note in log
    assert read_metadata(out / "best.safetensors")["epoch"] == 2
    assert load_resume(out / "resume.pt")["best"] == 50.0


def test_a_resume_on_the_same_validation_set_keeps_the_best(folder, tmp_path, capsys, monkeypatch):
    """Another setting changed (optim.lr): the best is compared as before."""
    out = tmp_path / "run"
    scored([90.0, 50.0], monkeypatch)
    run(TASK, config(folder, out, **{"train.epochs": 1}))
    run(TASK, config(folder, out, **{"train.epochs": 2, "optim.lr": 1e-4}), resume=True)
    assert "validation set" not in capsys.readouterr().out
    assert read_metadata(out / "best.safetensors")["epoch"] == 1


@pytest.mark.parametrize(
    ("task", "keys"),
    [
        ("classification", set()),  # DIR/val
        ("detection", {"data.val_ann", "data.val_images"}),
        ("segmentation", {"data.val_images", "data.val_masks"}),
    ],
)
def test_the_validation_set_is_the_data_folder_and_the_val_paths_of_each_task(task, keys):
    assert set(trainer.val_set(TASKS[task].config())) == {"data.data_dir", "data.dataset", *keys}
