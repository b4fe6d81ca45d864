"""What a resumed run records of its epochs: the time of an epoch resumed from a step checkpoint inside it, and the
best scores when the resume changed the validation set (its settings, or its files)."""

import csv
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from enginekit import DATA_FIXTURE, TASKS, tiny_config
from single_thread import one_thread_only

from swinlite.engine import run, trainer
from swinlite.engine.checkpoint import load_resume, save_resume
from swinlite.engine.val_content import fingerprint
from swinlite.io import read_metadata

TASK = TASKS["classification"]


class Killed(BaseException):
    """A kill at a chosen point (a BaseException, as KeyboardInterrupt: no ``except Exception`` handles it)."""


def config(data: Path, out: Path, **settings: object) -> Any:
    """A tiny run without warm-up (of its few steps, a warm-up leaves none to decay: a warning), of one step an epoch
    unless ``settings`` say otherwise (the evaluations, scored by ``scored``, are what the tests read)."""
    return tiny_config("classification", data, out, **{"schedule.warmup_epochs": 0, "train.max_iters": 1, **settings})


def metrics(out: Path) -> list[dict[str, str]]:
    with open(out / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


SLEEP = 0.5  # each step before the kill: 1 s before the resume, which alone took about 0.2 s of a tiny epoch


def test_an_epoch_resumed_from_a_step_checkpoint_counts_the_time_before_the_kill(folder, tmp_path, monkeypatch):
    """Resumed after step 2 of 3, the epoch's epoch_time was that of step 3 and its evaluation alone: a short epoch
    in metrics.csv, unmarked. It is the whole epoch's now, the time before the kill kept in the step checkpoint (as
    Lightning's Timer keeps its elapsed time over a resume); train_img_s stays the rate of the images trained since
    the resume, over their own time."""
    settings = {"train.epochs": 1, "train.save_every_steps": 1, "train.max_iters": 3}  # 24 images: 3 steps of 8
    out, steps, train_step = tmp_path / "run", [], TASK.train_step

    def slow_then_killed(self, model, batch):
        steps.append(1)
        if len(steps) == 3:  # after the step checkpoint of step 2
            raise Killed
        time.sleep(SLEEP)
        return train_step(self, model, batch)

    with monkeypatch.context() as patch:
        patch.setattr(TASK, "train_step", slow_then_killed)
        with pytest.raises(Killed):
            run(TASK, config(folder, out, **settings))
    assert load_resume(out / "resume.pt")["batch"] == 2
    run(TASK, config(folder, out, **settings), resume=True)
    (row,) = metrics(out)
    assert float(row["epoch_time"]) >= 2 * SLEEP  # step 3 and the evaluation alone take a fraction of it
    assert float(row["train_img_s"]) > 24 / float(row["epoch_time"])  # not the epoch's images over its whole time


def scored(scores: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluations score ``scores`` in turn, one per epoch."""
    calls = []

    def evaluate(self, model, loader):
        calls.append(1)
        return {"val_loss": 1.0, "val_top1": scores[len(calls) - 1]}

    monkeypatch.setattr(TASK, "evaluate", evaluate)


@pytest.fixture(scope="module")
def scored_90(tmp_path_factory) -> tuple[Path, Path]:
    """(data folder, run): a finished 1-epoch run whose evaluation scored val_top1 90, copied by the tests that resume
    it (their own evaluations scored with ``scored``)."""
    from trainkit import make_folder

    root = tmp_path_factory.mktemp("scored_90")
    with one_thread_only(), pytest.MonkeyPatch.context() as patch:
        scored([90.0], patch)
        out = run(TASK, config(make_folder(root / "data"), root / "run", **{"train.epochs": 1}))
    return root / "data", out


def resumable(scored_90: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path, Path]:
    """(data folder, a copy of it: another validation set, a copy of the scored_90 run in ``tmp_path``)."""
    folder, out = scored_90
    return folder, shutil.copytree(folder, tmp_path / "other"), shutil.copytree(out, tmp_path / "run")


def test_a_resume_on_another_validation_set_restarts_the_best(scored_90, tmp_path, capsys, monkeypatch):
    """--resume with another data.data_dir (its val split another set) warned of the changed setting, then compared
    the new set's scores with the old set's best: best.safetensors kept epoch 1's weights (90 on the old set) over
    epoch 2's (50 on the new one). The best restarts on the new set, with a note naming the old score; within the
    new set, a lower score (epoch 3's 40) keeps it."""
    folder, other, out = resumable(scored_90, tmp_path)  # epoch 1 scored 90
    scored([50.0, 40.0], monkeypatch)
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


def test_a_resume_on_the_same_validation_set_keeps_the_best(scored_90, tmp_path, capsys, monkeypatch):
    """Another setting changed (optim.lr): the best is compared as before."""
    folder, _, out = resumable(scored_90, tmp_path)  # epoch 1 scored 90
    scored([50.0], monkeypatch)
    capsys.readouterr()
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


# Other names of the data folder than the first run's ./data: without the ./, absolute, absolute then through ``..``,
# with a trailing slash; each is compared with the resume file's record, and the last two are resumed on in turn.
SPELLINGS = ["data", "{tmp}/data", "./data/../data", "data/"]


def test_one_data_folder_named_two_ways_keeps_the_best(folder, tmp_path, capsys, monkeypatch):
    """The paths were compared as strings: ``cls`` and ``cls/`` restarted the best, and best.safetensors took epoch 2's
    worse weights on the very same val set. They compare resolved: each spelling is the resume file's val set, and
    the run resumed under the last spellings in turn (each resume's epoch scored 50 against epoch 1's 90) keeps epoch
    1's weights."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    scored([90.0, 50.0, 50.0], monkeypatch)
    run(TASK, config("./data", out, **{"train.epochs": 1}))
    saved = load_resume(out / "resume.pt")["val_set"]
    for spelling in SPELLINGS:  # as given, not as Path spells it
        assert trainer.val_set_changes(saved, config(spelling.format(tmp=tmp_path), out)) == [], spelling
    for epochs, spelling in enumerate(SPELLINGS[-2:], 2):
        run(TASK, config(spelling.format(tmp=tmp_path), out, **{"train.epochs": epochs}), resume=True)
        assert "validation set" not in capsys.readouterr().out, spelling
        assert read_metadata(out / "best.safetensors")["epoch"] == 1, spelling


def val_config(task: str, data_dir: str, **paths: str | None) -> Any:
    """The config of ``task`` on ``data_dir`` with the ``data.val_*`` ``paths`` given (None: left unset)."""
    settings = {"data.data_dir": data_dir, **{f"data.{k}": "null" if v is None else v for k, v in paths.items()}}
    return TASKS[task].load_config(None, [f"{k}={v}" for k, v in settings.items()])


DET_VAL = {"val_ann": "det/ann.json", "val_images": "det/images"}
SEG_VAL = {"val_images": "seg/images", "val_masks": "seg/masks"}


@pytest.mark.parametrize(
    ("task", "before", "after"),
    [
        ("detection", DET_VAL, {**DET_VAL, "val_ann": "./det/ann.json"}),
        ("detection", DET_VAL, {"val_ann": "det//ann.json", "val_images": "det/x/../images/"}),
        ("segmentation", SEG_VAL, {**SEG_VAL, "val_masks": "./seg/masks/"}),
    ],
)
def test_a_val_path_named_two_ways_is_one_validation_set(task, before, after, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    saved = trainer.val_set(val_config(task, "d", **before))
    assert trainer.val_set_changes(saved, val_config(task, "d", **after)) == []
    absolute = {k: str(tmp_path / v) for k, v in before.items()}
    assert trainer.val_set_changes(saved, val_config(task, "d", **absolute)) == []


@pytest.mark.parametrize(
    ("task", "paths", "changed"),
    [
        ("detection", DET_VAL, []),  # the explicit paths are the whole val set
        ("segmentation", SEG_VAL, []),
        ("detection", {**DET_VAL, "val_images": None}, ["data.data_dir"]),  # its images under DIR
        ("segmentation", {**SEG_VAL, "val_masks": None}, ["data.data_dir"]),
        ("classification", {}, ["data.data_dir"]),  # DIR/val
    ],
)
def test_the_data_folder_changes_the_validation_set_only_where_it_holds_it(task, paths, changed, tmp_path):
    """data.data_dir restarted the best though data.val_ann and data.val_images (or segmentation's images and masks)
    named the val set, unchanged: it counts only where a val path is left under it, or the task has none."""
    saved = trainer.val_set(val_config(task, str(tmp_path / "old"), **paths))
    differ = trainer.val_set_changes(saved, val_config(task, str(tmp_path / "new"), **paths))
    assert [line.partition(":")[0] for line in differ] == changed


def removed(image: Path) -> None:
    image.unlink()


def moved_to_another_class(image: Path) -> None:
    image.rename(image.parent.parent / "c1" / "moved.png")


def rewritten(image: Path) -> None:
    """The same bytes written again (a copy over it, a ``touch``): another modification time, the same file."""
    image.write_bytes(image.read_bytes())


@pytest.mark.parametrize(
    ("task", "image", "change", "older_file", "files"),
    [
        ("classification", "val/c0/0.png", removed, False, "24 samples then, 23 now"),
        ("classification", "val/c0/0.png", moved_to_another_class, False, "24 samples then and now, not all the same"),
        ("classification", "val/c0/0.png", rewritten, False, None),
        ("classification", "val/c0/0.png", removed, True, None),  # a resume file from before the fingerprint
        ("detection", "val2017/*", removed, False, "5 samples then, 4 now"),
        ("segmentation", "images/validation/00.png", removed, False, "6 samples then, 5 now"),
    ],
)
def test_a_resume_after_the_val_files_changed_restarts_the_best(
    task, image, change, older_file, files, request, tmp_path, capsys
):
    """An image removed from the val folder, or moved to another class folder, under the same settings: the best
    was kept, a score of the old set compared with the new set's (classification even scanned its folders again,
    saying they changed). It restarts, the note saying the files changed; the same files rewritten do not restart it,
    nor does a resume file that predates the fingerprint (its settings alone compared, as then)."""
    data, out = request.getfixturevalue(DATA_FIXTURE[task]), tmp_path / "run"
    settings = {"train.max_iters": 1, "schedule.warmup_epochs": 0}  # one step an epoch
    run(TASKS[task], tiny_config(task, data, out, **settings, **{"train.epochs": 1}))
    if older_file:
        saved = load_resume(out / "resume.pt")
        del saved["val_content"]
        save_resume(out / "resume.pt", saved)
    change(sorted(data.glob(image))[0])
    capsys.readouterr()
    run(TASKS[task], tiny_config(task, data, out, **settings, **{"train.epochs": 2}), resume=True)
    log = capsys.readouterr().out
    if files is None:
        assert "validation set" not in log
    else:
        assert f"was scored on another validation set (the validation files changed: {files}), " in log
        assert read_metadata(out / "best.safetensors")["epoch"] == 2


def test_the_val_files_fingerprint_is_of_the_files_as_they_are(tmp_path, monkeypatch):
    """The samples in any order, their folder named any way, a file rewritten: one fingerprint; a file of another size
    or another label: another."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "val").mkdir()
    for name in ("a.png", "b.png"):
        (tmp_path / "val" / name).write_bytes(b"12345")
    before = fingerprint([(Path("val/a.png"), "cat"), (Path("val/b.png"), "dog")])
    (tmp_path / "val" / "a.png").write_bytes(b"12345")
    assert fingerprint([(tmp_path / "val" / "b.png", "dog"), (Path("./val/x/../a.png"), "cat")]) == before
    assert fingerprint([(Path("val/a.png"), "dog"), (Path("val/b.png"), "dog")]) != before
    (tmp_path / "val" / "b.png").write_bytes(b"1234")
    assert fingerprint([(Path("val/a.png"), "cat"), (Path("val/b.png"), "dog")]) != before
    assert fingerprint([]) is None


def test_val_labels_held_as_numpy_numbers_or_tensors_are_their_numbers():
    """A label held as np.int64 or a 0-d tensor failed the run's start: 'Object of type int64 is not JSON
    serializable'; any other value JSON cannot hold is named."""
    plain = fingerprint([(Path("a.png"), 3, 0.5)])
    assert fingerprint([(Path("a.png"), np.int64(3), np.float32(0.5))]) == plain
    assert fingerprint([(Path("a.png"), torch.tensor(3), torch.tensor(0.5))]) == plain
    with pytest.raises(ValueError, match=r"^Task.val_samples\(\) returned a sample holding tensor\(\[3\]\) \(Tensor\)"):
        fingerprint([(Path("a.png"), torch.tensor([3]))])


def test_the_summary_names_the_epoch_of_the_best_weights_after_a_restart(scored_90, tmp_path, capsys, monkeypatch):
    """After the val set changed, the summary named the first epoch scoring the best score: epoch 1's 90, of the old
    set, while best.safetensors held epoch 3's 90 of the new one. It names epoch 3, and still does after a further
    resume (the epoch is in resume.pt)."""
    _, other, out = resumable(scored_90, tmp_path)  # epoch 1 scored 90
    scored([50.0, 90.0, 80.0], monkeypatch)
    for epochs in (3, 4):
        capsys.readouterr()
        run(TASK, config(other, out, **{"train.epochs": epochs}), resume=True)
        assert "done: best val_top1 90.00 at epoch 3\n" in capsys.readouterr().out
        assert read_metadata(out / "best.safetensors")["epoch"] == 3


def test_a_resume_file_without_the_best_epoch_names_the_first_epoch_of_the_best_score(
    folder, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    scored([50.0, 90.0, 80.0], monkeypatch)
    run(TASK, config(folder, out, **{"train.epochs": 2}))
    saved = load_resume(out / "resume.pt")
    del saved["best_epoch"]  # as a run of an older swinlite wrote it
    save_resume(out / "resume.pt", saved)
    capsys.readouterr()
    run(TASK, config(folder, out, **{"train.epochs": 3}), resume=True)
    assert "done: best val_top1 90.00 at epoch 2\n" in capsys.readouterr().out


def test_a_resume_with_no_epoch_left_keeps_the_best_of_another_validation_set(scored_90, tmp_path, capsys):
    """Nothing is evaluated: no note that the best restarts, and it does not (the summary names it)."""
    _, other, out = resumable(scored_90, tmp_path)  # epoch 1 scored 90
    capsys.readouterr()
    run(TASK, config(other, out, **{"train.epochs": 1}), resume=True)
    log = capsys.readouterr().out
    assert "validation set" not in log
    assert "done: best val_top1 90.00 at epoch 1\n" in log
