"""best.safetensors and best_ema.safetensors follow the history of the resume file after a kill at any point of an
epoch's save: new best weights wait under a pending name until resume.pt records their epoch; a resume brings the
last weights, metrics.csv and curves.png a cut save left ahead back to it; an evaluation of weights a run replaces
goes before them."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from enginekit import TASKS, copied_run, overrides, script_main, tiny_config
from single_thread import one_thread_only

from swinlite.engine import checkpoint, run, trainer
from swinlite.engine.checkpoint import load_resume
from swinlite.io import read_metadata, read_state_dict

TASK = TASKS["classification"]
SETTINGS = {
    "train.epochs": 2,
    "train.max_iters": 1,
    "train.ema_decay": 0.5,
    "train.best_of": "raw",
    "schedule.warmup_epochs": 0,
}
PENDING = (".best.safetensors.pending", ".best_ema.safetensors.pending")
EVALUATION = ("eval.json", "confusion_matrix.png")  # scripts/evaluate.py's, beside the checkpoint


def evaluated(out: Path, checkpoint: str) -> None:
    """What scripts/evaluate.py writes for ``--checkpoint runs/demo/<checkpoint>`` (its path as typed)."""
    (out / "eval.json").write_text(json.dumps({"checkpoint": f"runs/demo/{checkpoint}", "top1": 50.0}))
    (out / "confusion_matrix.png").write_bytes(b"a plot")


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


def killed_at_epoch_2(out: Path, data: Path, before: bool, patch: pytest.MonkeyPatch) -> None:
    """A run of ``SETTINGS`` scoring 50 then 70 (70 only where ``out`` holds epoch 1, resumed), killed as epoch 2's
    save writes resume.pt: ``before`` it (its last.safetensors, metrics.csv and pending best weights written) or after
    it."""
    resume = (out / "resume.pt").is_file()
    save_resume = trainer.save_resume

    def killed(path, state):
        at_epoch_2 = state["epoch"] == 2
        if at_epoch_2 and before:
            raise Killed
        save_resume(path, state)
        if at_epoch_2:  # after it: its best weights still pending
            raise Killed

    patch.setattr(trainer, "save_resume", killed)
    scored([70.0] if resume else [50.0, 70.0], patch)
    with pytest.raises(Killed):
        run(TASK, tiny_config("classification", data, out, **SETTINGS), resume=resume)


@pytest.fixture(scope="module")
def killed_before_resume_2(tmp_path_factory) -> tuple[Path, Path]:
    """(data folder, run): ``killed_at_epoch_2`` before its resume.pt, copied by each test."""
    from trainkit import make_folder

    root = tmp_path_factory.mktemp("killed_before_resume_2")
    with one_thread_only(), pytest.MonkeyPatch.context() as patch:
        data = make_folder(root / "data")
        killed_at_epoch_2(root / "run", data, True, patch)
    return data, root / "run"


@pytest.mark.parametrize("before", [True, False])
def test_a_kill_around_the_resume_file_leaves_best_files_of_the_history(
    before, killed_before_resume_2, first_epoch, tmp_path, capsys, monkeypatch
):
    """Killed after epoch 2's best.safetensors was written but before its resume.pt, a run resumed into an epoch 2
    that scores lower than epoch 1 ended 'done: best val_top1 50.00 at epoch 1' with best.safetensors (and
    best_ema.safetensors) holding the killed run's epoch 2. (Killed after it: the run that trained epoch 2 resumed
    ``first_epoch``.)"""
    folder, run_dir = killed_before_resume_2 if before else first_epoch
    out = shutil.copytree(run_dir, tmp_path / "run")
    if not before:
        with monkeypatch.context() as patch:
            killed_at_epoch_2(out, folder, before, patch)
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
    """Epoch 3's pending weights with a resume file of 3 epochs (killed between the two): completed, and an
    evaluation of the replaced best.safetensors (run after the kill) removed first; with one of 2 (killed before it):
    removed, best.safetensors and its evaluation as they were."""
    weights = {"w": torch.zeros(1)}
    for epochs_done, kept in ((3, "new"), (2, "old")):
        checkpoint.save_weights(tmp_path / "best.safetensors", weights, {"epoch": 2, "kept": "old"})
        checkpoint.save_weights(tmp_path / PENDING[0], weights, {"epoch": 3, "kept": "new"})
        evaluated(tmp_path, "best.safetensors")
        paths = [tmp_path / "best.safetensors", tmp_path / "best_ema.safetensors"]
        checkpoint.settle_pending(paths, epochs_done, EVALUATION)
        assert read_metadata(tmp_path / "best.safetensors")["kept"] == kept
        left = ["best.safetensors", *(EVALUATION if kept == "old" else ())]
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(left)


@pytest.fixture(scope="module")
def first_epoch(tmp_path_factory) -> tuple[Path, Path]:
    """(data folder, run): a run of epoch 1 of ``SETTINGS``, its evaluations scoring 50, copied by each test."""
    from trainkit import make_folder

    root = tmp_path_factory.mktemp("first_epoch")
    with one_thread_only(), pytest.MonkeyPatch.context() as patch:
        scored([50.0], patch)
        data = make_folder(root / "data")
        out = run(TASK, tiny_config("classification", data, root / "run", **SETTINGS | {"train.epochs": 1}))
    return data, out


@pytest.mark.parametrize(
    ("checkpoint_evaluated", "scores", "removed"),
    [("best.safetensors", [50.0, 70.0], True), ("best.safetensors", [50.0, 40.0], False),
     ("last.safetensors", [50.0, 40.0], True)],
)  # fmt: skip
def test_a_run_removes_an_evaluation_of_the_weights_it_replaces(
    checkpoint_evaluated, scores, removed, first_epoch, tmp_path, monkeypatch
):
    """evaluate.py's eval.json and confusion_matrix.png of best.safetensors stayed beside the better weights of a
    resumed run, nothing telling that they describe the replaced ones. An evaluation of weights the run keeps stays."""
    folder, out = copied_run(first_epoch, tmp_path / "run")  # epoch 1 scored scores[0]
    assert load_resume(out / "resume.pt")["history"][0]["val_top1"] == scores[0]
    scored(scores[1:], monkeypatch)
    evaluated(out, checkpoint_evaluated)
    run(TASK, tiny_config("classification", folder, out, **SETTINGS), resume=True)
    assert read_metadata(out / "best.safetensors")["epoch"] == (2 if scores[1] > scores[0] else 1)
    assert [(out / name).exists() for name in EVALUATION] == [not removed] * 2


@pytest.mark.parametrize(
    ("described", "removed"),
    [("runs/x/best.safetensors", True), ("{folder}/best.safetensors", True), ("{other}/best.safetensors", False),
     ("{folder}/ema.safetensors", False), ("{moved}/best.safetensors", True)],
)  # fmt: skip
def test_an_evaluation_is_removed_only_of_the_weights_replaced(described, removed, tmp_path):
    """An eval.json of another folder's best.safetensors (an absolute path, its name alike) was removed from the run's
    folder as one of the run's; a relative path (from wherever evaluate.py ran) is told by its name, and so is an
    absolute one no longer there: the run folder moved since (`mv runs/a runs/b`), it was kept beside new weights."""
    folder = tmp_path / "run"
    folder.mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "best.safetensors").write_bytes(b"another folder's weights")
    path = described.format(folder=folder, other=tmp_path / "other", moved=tmp_path / "before_the_move")
    (folder / "eval.json").write_text(json.dumps({"checkpoint": path}))
    checkpoint.clear_evaluation(folder, ["best.safetensors"], ("eval.json",))
    assert (folder / "eval.json").exists() == (not removed)


@pytest.mark.parametrize("recorded", [True, False])
def test_a_task_of_your_owns_evaluation_record_is_read_as_eval_json(recorded: bool, tmp_path: Path, monkeypatch):
    """A task's evaluate script recording its checkpoint in reg_eval.json (Task.evaluation_files): its results stayed
    beside the weights that replaced those they describe, for only an eval.json was read. The record is the first of
    the files, the only one read: without it (an evaluation killed before writing it), every save parsed the others
    until one held a record (evaluate_detection.py's detections.json of COCO val, 80 MB: 4 s an epoch)."""
    files = ("reg_eval.json", "reg_detections.json")
    if recorded:
        (tmp_path / "reg_eval.json").write_text(json.dumps({"checkpoint": str(tmp_path / "best.safetensors")}))
    (tmp_path / "reg_detections.json").write_text(json.dumps([{"checkpoint": "best.safetensors"}] * 1000))
    read = []
    read_bytes = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda path: read.append(path.name) or read_bytes(path))
    checkpoint.clear_evaluation(tmp_path, ["best.safetensors"], files)
    assert [name for name in files if (tmp_path / name).exists()] == ([] if recorded else ["reg_detections.json"])
    assert read == ["reg_eval.json"]  # tried alone, there or not


def killed_at_the_last_resume_file(out: Path, settings: dict, data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed as its last epoch's save writes resume.pt: last.safetensors, metrics.csv ... are written."""
    save_resume = trainer.save_resume

    def killed(path, state):
        if state["history"] and state["epoch"] == settings["train.epochs"]:
            raise Killed
        save_resume(path, state)

    with monkeypatch.context() as patch:
        patch.setattr(trainer, "save_resume", killed)
        with pytest.raises(Killed):
            run(TASK, tiny_config("classification", data, out, **settings))
    assert read_metadata(out / "last.safetensors")["epoch"] == settings["train.epochs"]


def test_a_resume_brings_the_files_a_cut_save_left_back_to_its_point(killed_before_resume_2, tmp_path, capsys):
    """Killed after epoch 2's last.safetensors and metrics.csv, before its resume.pt, and resumed with
    train.epochs=1: 'done: best val_top1 ... at epoch 1' beside last weights of epoch 2 and metrics.csv's epoch-2 row
    (TensorBoard was cut back). They are epoch 1's again, the weights those of resume.pt."""
    folder, out = copied_run(killed_before_resume_2, tmp_path / "run")
    assert read_metadata(out / "last.safetensors")["epoch"] == 2
    capsys.readouterr()
    run(TASK, tiny_config("classification", folder, out, **SETTINGS | {"train.epochs": 1}), resume=True)
    assert " at epoch 1\n" in capsys.readouterr().out  # done: best val_top1 ... at epoch 1
    saved = load_resume(out / "resume.pt")
    assert [read_metadata(out / name)["epoch"] for name in ("last.safetensors", "ema.safetensors")] == [1, 1]
    assert all(torch.equal(v, saved["model"][k]) for k, v in read_state_dict(out / "last.safetensors").items())
    assert [line.split(",")[0] for line in (out / "metrics.csv").read_text().splitlines()] == ["epoch", "1"]


def test_a_resume_of_a_step_checkpoint_removes_the_epochs_files_a_cut_save_left(folder, tmp_path, monkeypatch):
    """Resumed from a step checkpoint of the first epoch, the files of that epoch's end a kill cut short are gone
    (nothing of the epoch is done) until the epoch's end writes them: here the resumed run stops at once."""
    out = tmp_path / "run"
    settings = SETTINGS | {"train.epochs": 1, "train.max_iters": 2, "train.save_every_steps": 1}
    killed_at_the_last_resume_file(out, settings, folder, monkeypatch)

    def interrupted(self, model, batch):
        raise KeyboardInterrupt

    monkeypatch.setattr(TASK, "train_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(TASK, tiny_config("classification", folder, out, **settings), resume=True)
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "resume.pt", "scan.json.gz"]
