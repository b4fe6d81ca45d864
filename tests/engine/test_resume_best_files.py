"""best.safetensors and best_ema.safetensors follow the history of the resume file after a kill at any point of an
epoch's save: new best weights wait under a pending name until resume.pt records their epoch."""

from pathlib import Path

import pytest
import torch
from enginekit import TASKS, overrides, script_main, tiny_config

from swinlite.engine import checkpoint, run, trainer
from swinlite.engine.checkpoint import load_resume
from swinlite.io import read_metadata

TASK = TASKS["classification"]
SETTINGS = {
    "train.epochs": 2,
    "train.max_iters": 1,
    "train.ema_decay": 0.5,
    "train.best_of": "raw",
    "schedule.warmup_epochs": 0,
}
PENDING = (".best.safetensors.pending", ".best_ema.safetensors.pending")


class Killed(BaseException):
    """A kill at a chosen point (a BaseException, as KeyboardInterrupt: no ``except Exception`` handles it)."""


def scored(scores: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluations score ``scores`` in turn, one per epoch for the raw and the EMA weights alike."""
    calls = []

    def evaluate(self, model, loader):
        calls.append(1)
        return {"val_loss": 1.0, "val_top1": scores[(len(calls) - 1) // 2]}

    monkeypatch.setattr(TASK, "evaluate", evaluate)


def assert_follows_history(out: Path) -> None:
    """Each best file holds the epoch of the history's best score (the first of equal ones), no pending file left."""
    history = load_resume(out / "resume.pt")["history"]
    for name, column in (("best.safetensors", "val_top1"), ("best_ema.safetensors", "val_top1_ema")):
        best = max(history, key=lambda row: row[column])
        assert read_metadata(out / name)["epoch"] == best["epoch"], name
    assert not [name for name in PENDING if (out / name).exists()]


@pytest.mark.parametrize("before", [True, False])
def test_a_kill_around_the_resume_file_leaves_best_files_of_the_history(before, folder, tmp_path, capsys, monkeypatch):
    """Killed after epoch 2's best.safetensors was written but before its resume.pt, a run resumed into an epoch 2
    that scores lower than epoch 1 ended 'done: best val_top1 50.00 at epoch 1' with best.safetensors (and
    best_ema.safetensors) holding the killed run's epoch 2."""
    out = tmp_path / "run"
    save_resume = trainer.save_resume

    def killed(path, state):
        at_epoch_2 = state["epoch"] == 2
        if at_epoch_2 and before:
            raise Killed
        save_resume(path, state)
        if at_epoch_2:  # after it: its best weights still pending
            raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(trainer, "save_resume", killed)
        scored([50.0, 70.0], patch)
        with pytest.raises(Killed):
            run(TASK, tiny_config("classification", folder, out, **SETTINGS))
    assert read_metadata(out / "best.safetensors")["epoch"] == 1  # epoch 2's are not there before its resume.pt
    assert [name for name in PENDING if (out / name).exists()] == list(PENDING)
    scored([40.0], monkeypatch)  # epoch 2, trained again, scores lower (another setting, or not deterministic)
    capsys.readouterr()
    run(TASK, tiny_config("classification", folder, out, **SETTINGS), resume=True)
    assert_follows_history(out)
    best = 1 if before else 2  # the redone epoch 2 does not count; one that was saved does
    assert f"done: best val_top1 {[50.0, 70.0][best - 1]:.2f} at epoch {best}\n" in capsys.readouterr().out


def test_a_first_epoch_killed_before_its_resume_file_leaves_no_best_file(folder, tmp_path, capsys, monkeypatch):
    """Its best weights were there with no resume file: a fresh run refuses the folder, --overwrite removes them."""
    out = tmp_path / "run"

    def killed(path, state):
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(trainer, "save_resume", killed)
        with pytest.raises(Killed):
            run(TASK, tiny_config("classification", folder, out, **SETTINGS))
    assert not (out / "best.safetensors").exists() and (out / PENDING[0]).is_file()
    assert script_main("classification", ["--overwrite", *overrides("classification", folder, out, **SETTINGS)]) == 0
    assert_follows_history(out)


def test_pending_weights_are_completed_only_when_the_resume_file_holds_their_epoch(tmp_path):
    """Epoch 3's pending weights with a resume file of 3 epochs (killed between the two): completed; with one of 2
    (killed before it): removed, best.safetensors as it was."""
    weights = {"w": torch.zeros(1)}
    for epochs_done, kept in ((3, "new"), (2, "old")):
        checkpoint.save_weights(tmp_path / "best.safetensors", weights, {"epoch": 2, "kept": "old"})
        checkpoint.save_weights(tmp_path / PENDING[0], weights, {"epoch": 3, "kept": "new"})
        checkpoint.settle_pending([tmp_path / "best.safetensors", tmp_path / "best_ema.safetensors"], epochs_done)
        assert read_metadata(tmp_path / "best.safetensors")["kept"] == kept
        assert sorted(p.name for p in tmp_path.iterdir()) == ["best.safetensors"]
