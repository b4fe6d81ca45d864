"""The engine's run of any task: gradient accumulation, a failed evaluation that keeps the trained epoch, a
diverged run that keeps the last good files, --overwrite that removes the old run once the new one can start."""

import hashlib
import importlib
import math
import multiprocessing
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from enginekit import DATA_FIXTURE, TASKS, copied_run, overrides, script_main, tiny_config
from single_thread import one_thread_only
from timm.optim import param_groups_weight_decay
from torch.utils.data import Dataset, DistributedSampler, TensorDataset
from trainkit import make_folder

from swinlite.classification.task import ClassificationTask
from swinlite.engine import cli, optim, run, trainer
from swinlite.engine.checkpoint import load_resume, non_finite, save_resume, set_rng_state
from swinlite.engine.distributed import DistInfo, SharedError
from swinlite.engine.loaders import build_loaders
from swinlite.engine.optim import build_optimizer
from swinlite.engine.run import remove_replaced_run
from swinlite.engine.sampling import EpochSampler
from swinlite.engine.sections import DataConfig
from swinlite.files import TASK_FILES
from swinlite.io import read_metadata, read_state_dict

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the COCO file's quirks warn; tests/detection checks
CPU = torch.device("cpu")


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_accumulated_micro_batches_step_like_the_whole_batch(tmp_path: Path):
    """Batches of 4 against micro-batches of 2 accumulated by 2: the same images, steps and gradients (SGD)."""
    folder = make_folder(tmp_path / "data", per_class=4)  # 12 images: 3 steps of 4
    sgd = {"optim.opt": "momentum", "optim.momentum": 0.0, "train.epochs": 1, "train.deterministic": True}
    whole = run(TASKS["classification"], tiny_config("classification", folder, tmp_path / "a", **sgd,
                                                    **{"data.batch_size": 4}))  # fmt: skip
    split = run(TASKS["classification"], tiny_config("classification", folder, tmp_path / "b", **sgd,
                                                    **{"data.batch_size": 2, "optim.accum_steps": 2}))  # fmt: skip
    plain = run(TASKS["classification"], tiny_config("classification", folder, tmp_path / "c", **sgd,
                                                    **{"data.batch_size": 2}))  # fmt: skip
    a, b, c = (read_state_dict(out / "last.safetensors") for out in (whole, split, plain))
    assert load_resume(whole / "resume.pt")["step"] == load_resume(split / "resume.pt")["step"] == 3
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=1e-6)
    assert not all(torch.allclose(c[k], a[k], rtol=1e-5, atol=1e-6) for k in a)  # without accumulation: other steps


@pytest.mark.parametrize("task", list(TASKS))
def test_failed_evaluation_keeps_the_trained_epoch(task: str, tmp_path: Path, request, monkeypatch):
    data = request.getfixturevalue(DATA_FIXTURE[task])
    settings = {"train.epochs": 2, "train.deterministic": True, "train.max_iters": 1}  # epochs of one step
    reference = run(TASKS[task], tiny_config(task, data, tmp_path / "ref", **settings))
    evaluate = TASKS[task].evaluate

    def fails(self, model, loader):
        raise KeyError("area")  # as pycocotools on val annotations without "area"

    monkeypatch.setattr(TASKS[task], "evaluate", fails)
    message = r"evaluation after training epoch 1/2 failed \(KeyError: 'area'\); the trained epoch is saved in "
    with pytest.raises(ValueError, match=message + r".*resume.pt: fix the cause and --resume"):
        run(TASKS[task], tiny_config(task, data, tmp_path / "run", **settings))
    saved = load_resume(tmp_path / "run" / "resume.pt")
    assert (saved["epoch"], saved["history"]) == (0, []) and saved["batch"] > 0  # epoch 1 trained, not evaluated
    monkeypatch.setattr(TASKS[task], "evaluate", evaluate)
    resumed = run(TASKS[task], tiny_config(task, data, tmp_path / "run", **settings), resume=True)
    assert _equal(read_state_dict(reference / "last.safetensors"), read_state_dict(resumed / "last.safetensors"))
    ref, got = load_resume(reference / "resume.pt"), load_resume(resumed / "resume.pt")
    assert [r["train_loss"] for r in ref["history"]] == [r["train_loss"] for r in got["history"]]
    assert ref["history"][0][TASKS[task].metric] == got["history"][0][TASKS[task].metric]


def _finished_run(root: Path, **settings: object) -> tuple[Path, Path]:
    """(data folder, output folder) of a finished 1-epoch classification run of scripts/train.py in ``root``."""
    from trainkit import make_folder

    data, out = make_folder(root / "data"), root / "out"
    with one_thread_only():
        argv = overrides("classification", data, out, **{"train.epochs": 1, **settings})
        assert script_main("classification", argv) == 0
    return data, out


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> tuple[Path, Path]:
    """(data folder, output folder) of one finished 1-epoch classification run, copied by the tests that resume it."""
    return _finished_run(tmp_path_factory.mktemp("good_run"))


@pytest.fixture(scope="module")
def layer_decay_run(tmp_path_factory) -> tuple[Path, Path]:
    """(data folder, output folder) of a finished 1-epoch run with optim.layer_decay=0.5 and train.ema_decay=0.5,
    copied by the tests."""
    settings = {"optim.layer_decay": 0.5, "train.ema_decay": 0.5}
    return _finished_run(tmp_path_factory.mktemp("layer_decay_run"), **settings)


@pytest.fixture(scope="module")
def zero_decay_run(tmp_path_factory) -> tuple[Path, Path]:
    """(data folder, output folder) of a finished 1-epoch run with optim.weight_decay=0."""
    return _finished_run(tmp_path_factory.mktemp("zero_decay_run"), **{"optim.weight_decay": 0.0})


@pytest.fixture(scope="module")
def one_group_run(tmp_path_factory) -> tuple[Path, Path]:
    """zero_decay_run as swinlite saved it before it kept two groups at weight decay 0: in timm's one group, without
    the parameter names (which the saved state is regrouped by where a file records them)."""

    def one_group(model: torch.nn.Module, decay: float) -> list[dict]:
        return param_groups_weight_decay(model, decay, no_weight_decay_list=optim.no_weight_decay_names(model))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(optim, "weight_decay_groups", one_group)
        folder, out = _finished_run(tmp_path_factory.mktemp("one_group_run"), **{"optim.weight_decay": 0.0})
    save_resume(out / "resume.pt", {k: v for k, v in load_resume(out / "resume.pt").items() if k != "param_names"})
    return folder, out


# every 1: a step checkpoint after each step (it saved NaN weights before); lr 1e6: the first step's weights are
# infinite while its loss is not, found by the step checkpoint's check (its error said what the run keeps twice)
@pytest.mark.parametrize(("every", "lr"), [(0, 1e12), (1, 1e12), (1, 1e6)])
def test_diverged_run_stops_and_keeps_the_last_good_files(good_run, tmp_path: Path, capsys, every: int, lr: float):
    folder, out = copied_run(good_run, tmp_path / "out")
    good = {name: (out / name).read_bytes() for name in ("last.safetensors", "best.safetensors", "resume.pt")}
    capsys.readouterr()
    settings = {"train.epochs": 3, "optim.lr": lr, "schedule.warmup_epochs": 0, "train.save_every_steps": every}
    assert script_main("classification", ["--resume", *overrides("classification", folder, out, **settings)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: training diverged in epoch 2")
    assert lines[0].count(f"{out} keeps the files of the last good epoch") == 1  # once: it was said twice
    kept = ("last.safetensors", "best.safetensors") if every else good  # step checkpoints replace resume.pt
    assert {name: (out / name).read_bytes() for name in kept} == {name: good[name] for name in kept}
    assert non_finite(read_state_dict(out / "last.safetensors")) == []
    assert non_finite(load_resume(out / "resume.pt")["model"]) == []  # never NaN weights to resume from


def test_a_fresh_run_that_diverges_leaves_no_files(folder: Path, tmp_path: Path):
    """The fresh-run case of the test above (the same for its every parametrization): no weights, no resume file."""
    fresh = tmp_path / "fresh"
    assert script_main("classification", overrides("classification", folder, fresh, **{"optim.lr": 1e12})) == 2
    assert not list(fresh.glob("*.safetensors")) and not (fresh / "resume.pt").exists()


@pytest.mark.parametrize(
    ("files", "removed"),
    [
        (["classes.csv", "images/00000_holiday.png", "notes.txt"], []),
        (["sources.json", "classes.csv"], ["classes.csv", "sources.json"]),
        (["sources.json", "classes.csv", "labels/00000_a.png"], ["classes.csv", "labels/", "sources.json"]),
        (
            ["sources.json", "classes.csv", "overlays/00000_a.png", "images/mine.jpg"],
            ["classes.csv", "overlays/", "sources.json"],
        ),
        (["sources.json", "images/00000_a.png"], ["images/", "sources.json"]),
        (["sources.json", "images/00001_b.png"], []),
        (["sources.json", "images/00000_a.png", "detections.json"], ["detections.json", "images/", "sources.json"]),
        (["eval.json", "notes.txt"], ["eval.json"]),
    ],
    ids=[
        "no_list",
        "segment_drawings_removed",
        "segment",
        "segment_beside_user_images",
        "detect_killed",
        "detect_unrecorded",
        "detect",
        "evaluation",
    ],
)
def test_overwrite_removes_a_scripts_outputs_only_where_it_wrote_them(tmp_path: Path, capsys, files, removed):
    """--overwrite removed every name any task's scripts write: a user's classes.csv, sources.json or images/ in the
    folder too. A drawing script's files go where the sources.json beside its drawings names them (a killed run's
    too), or, its drawings gone (a kill while --overwrite removed them), where that record is beside its other files,
    named in a note."""
    out = tmp_path / "out"
    for name in files:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text('{"00000_a.png": "a.png"}' if name == "sources.json" else "a file")
    remove_replaced_run(out, DistInfo(), TASKS["classification"])
    kept = {name.split("/")[0] for name in files} - {name.rstrip("/") for name in removed}
    assert {p.name for p in out.iterdir()} == kept
    note = f"note: removed what scripts wrote in {out}, which --overwrite clears with any old run: "
    lines = [line.removeprefix(note) for line in capsys.readouterr().out.splitlines() if line.startswith(note)]
    assert sorted(", ".join(lines).split(", ")) == sorted(removed) if removed else lines == []


@pytest.mark.parametrize("task", TASKS)
def test_overwrite_by_another_task_removes_the_old_tasks_own_files(tmp_path: Path, task: str):
    """A segmentation run over a classification run's folder (--overwrite) kept its scan.json.gz, which no
    segmentation run reads: a folder mixing two runs. The new task's own files stay, for its run to read."""
    assert TASKS[task].output_files == TASK_FILES[task]
    out = tmp_path / "out"
    out.mkdir()
    for name in (name for names in TASK_FILES.values() for name in names):
        (out / name).write_text("a task's own file")
    remove_replaced_run(out, DistInfo(), TASKS[task])
    assert sorted(p.name for p in out.iterdir()) == sorted(TASK_FILES[task])


def test_overwrite_removes_the_old_run_once_the_new_one_is_known_to_start(folder: Path, tmp_path: Path, capsys):
    out = tmp_path / "out"
    first = {"train.epochs": 1, "train.ema_decay": 0.5, "train.tensorboard": True}
    assert script_main("classification", overrides("classification", folder, out, **first)) == 0
    assert {"ema.safetensors", "best_ema.safetensors", "scan.json.gz"} <= {p.name for p in out.iterdir()}
    (out / "notes.txt").write_text("the user's own file")
    # the evaluate scripts' results of the old weights: this task's, and another's (the folder may have held a
    # detection or segmentation run: its results stayed beside the new run's weights)
    for name in ("eval.json", "confusion_matrix.png", "detections.json", "per_class_iou.csv"):
        (out / name).write_text("an evaluation of the replaced run")
    # detect.py's and segment.py's drawings and lists of the old weights: removed whole (detections.json alone was,
    # the drawings and sources.json beside the new weights), unless a drawings folder holds the user's own images
    for name in ("images/00000_a.png", "labels/00000_a.png", "overlays/00000_a.png", "classes.csv"):
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_text("drawn with the replaced run's weights")
    (out / "sources.json").write_text('{"00000_a.png": "a.png"}')  # the record naming the drawings
    (out / "overlays" / "mine.jpg").write_text("the user's own image")
    assert script_main("classification", ["--overwrite", *overrides("classification", folder, out)]) == 2
    assert (
        f"{out / 'overlays'} holds files no run wrote there ({out / 'overlays' / 'mine.jpg'}" in capsys.readouterr().err
    )
    (out / "overlays" / "mine.jpg").unlink()
    kept = sorted(p.name for p in out.iterdir())
    mistyped = overrides("classification", tmp_path / "no_data", out, **{"train.epochs": 1})
    assert script_main("classification", ["--overwrite", *mistyped]) == 2  # a missing data folder: refused first
    assert sorted(p.name for p in out.iterdir()) == kept
    (tmp_path / "empty").mkdir()
    broken = overrides("classification", tmp_path / "empty", out, **{"train.epochs": 1})
    assert script_main("classification", ["--overwrite", *broken]) == 2  # found by the data scan: kept too
    assert sorted(p.name for p in out.iterdir()) == kept
    capsys.readouterr()
    one_epoch = overrides("classification", folder, out, **{"train.epochs": 1})
    assert script_main("classification", ["--overwrite", *one_epoch]) == 0
    assert f"data: scan read from {out / 'scan.json.gz'}" in capsys.readouterr().out  # the old run's, of this data
    assert sorted(p.name for p in out.iterdir()) == [
        "best.safetensors", "config.yaml", "curves.png", "last.safetensors", "metrics.csv", "notes.txt", "resume.pt",
        "scan.json.gz",
    ]  # fmt: skip
    # a run killed before its first save left its settings and TensorBoard events: a fresh run kept them, two runs'
    # events mixed in the folder; they are removed, with a note; an evaluation's results (no run's) are kept, and
    # the data scan is read by the next run, not removed with the rest (the scan of a large dataset takes minutes)
    for name in ("resume.pt", "best.safetensors", "last.safetensors", "metrics.csv"):
        (out / name).unlink()
    for name in ("events.out.tfevents.1.host", "eval.json"):
        (out / name).write_text("a run killed before its first save")
    assert script_main("classification", one_epoch) == 0
    printed = capsys.readouterr().out
    note = f"note: {out} held the files of a run that ended before its first save; removed config.yaml, curves.png, "
    assert note + "events.out.tfevents.1.host\n" in printed
    assert f"data: scan read from {out / 'scan.json.gz'}" in printed
    assert not (out / "events.out.tfevents.1.host").exists() and (out / "notes.txt").exists()
    assert (out / "eval.json").read_text() == "a run killed before its first save"


@pytest.mark.parametrize(
    ("at_step", "told"),
    [(1, "interrupted before the first save; nothing to resume ("), (4, "interrupted; continue from {out}/resume.pt")],
)
def test_interrupt_points_to_the_resume_file_only_when_there_is_one(
    at_step, told, folder, tmp_path, capsys, monkeypatch
):
    """Ctrl-C in a fresh run's first epoch said "continue with --resume", which then found nothing to resume."""
    task, steps = TASKS["classification"], []
    train_step = task.train_step

    def interrupted(self, model, batch):
        steps.append(1)
        if len(steps) == at_step:  # 3 steps an epoch
            raise KeyboardInterrupt
        return train_step(self, model, batch)

    monkeypatch.setattr(task, "train_step", interrupted)
    out = tmp_path / "out"
    assert script_main("classification", overrides("classification", folder, out)) == 130
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(told.format(out=out)), lines
    assert (out / "resume.pt").is_file() == (at_step > 3)


def test_an_interrupt_during_the_first_save_leaves_nothing_to_resume(folder, tmp_path, capsys, monkeypatch):
    """Ctrl-C at the first metrics.csv said "nothing to resume", yet left last.safetensors and the pending best
    weights, and the next plain run was refused ("holds a run's weights ... pass --overwrite"). The run's files go."""

    def interrupted(history, path):
        raise KeyboardInterrupt

    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(trainer, "write_csv", interrupted)
        assert script_main("classification", overrides("classification", folder, out)) == 130
    assert capsys.readouterr().err.startswith("interrupted before the first save; nothing to resume (")
    assert sorted(p.name for p in out.iterdir()) == ["scan.json.gz"]  # the data scan stays, for the next run
    assert script_main("classification", overrides("classification", folder, out, **{"train.epochs": 1})) == 0


def test_a_metric_that_is_nan_is_a_warning_and_no_best_file_is_listed(folder, tmp_path, capsys, monkeypatch):
    """A detection val file without an object to score logged 'val AP nan' every epoch, wrote no best.safetensors,
    and the closing summary listed it."""
    task = TASKS["classification"]
    monkeypatch.setattr(task, "evaluate", lambda self, model, loader: {"val_loss": 1.0, "val_top1": math.nan})
    out = tmp_path / "out"
    assert script_main("classification", overrides("classification", folder, out)) == 0
    printed = capsys.readouterr().out
    assert printed.count("warning: val_top1 of epoch ") == 2 and "is NaN (did the evaluation score nothing?)" in printed
    assert not (out / "best.safetensors").exists() and (out / "last.safetensors").is_file()
    listed = [Path(line.split(":", 1)[1].strip()) for line in printed.splitlines() if line.startswith("  ")]
    assert listed and all(path.is_file() for path in listed), listed


@pytest.mark.parametrize(
    ("best_of", "raw", "weights", "named"),
    [
        ("both", math.nan, "ema", "val_top1_ema"),
        ("ema", 50.0, "ema", "val_top1_ema"),
        ("both", 50.0, "raw", "val_top1"),
    ],
)
def test_best_of_picks_and_names_the_weights_it_chose(
    best_of, raw, weights, named, folder, tmp_path, capsys, monkeypatch
):
    """train.best_of=both with the raw weights' metric NaN ignored the EMA weights' number: no best.safetensors.
    train.best_of=ema with the raw and EMA scores tied ended 'done: best val_top1 50.00' though the file held the EMA
    weights; both picks the raw weights on a tie."""
    task, calls = TASKS["classification"], []

    def evaluate(self, model, loader):  # the raw weights first, then the EMA weights
        calls.append("ema" if len(calls) % 2 else "raw")
        return {"val_loss": 1.0, "val_top1": raw if calls[-1] == "raw" else 50.0}

    monkeypatch.setattr(task, "evaluate", evaluate)
    settings = {"train.epochs": 1, "train.ema_decay": 0.5, "train.best_of": best_of}
    out = run(task, tiny_config("classification", folder, tmp_path / "out", **settings))
    meta = read_metadata(out / "best.safetensors")
    assert (meta["weights"], meta["val_top1"]) == (weights, 50.0)
    assert f"done: best {named} 50.00 at epoch 1\n" in capsys.readouterr().out


def test_a_resume_with_other_settings_continues_on_them(layer_decay_run, tmp_path: Path, capsys):
    """EMA turned off on --resume: metrics.csv and curves.png crashed on the first row's EMA columns (every later
    --resume too); fewer steps per epoch (train.max_iters, or another number of processes): the saved step put the
    lr past the schedule's end."""
    folder, out = copied_run(layer_decay_run, tmp_path / "run")  # EMA 0.5, 1 epoch
    saved = load_resume(out / "resume.pt")
    assert saved["step"] == 3  # 24 images in batches of 8
    save_resume(out / "resume.pt", saved | {"rng": saved["rng"] * 2, "partial": saved["partial"] * 2})  # 2 processes
    settings = {"train.epochs": 2, "train.max_iters": 2, "optim.layer_decay": 0.5}  # no EMA; 2 steps an epoch
    run(TASKS["classification"], tiny_config("classification", folder, out, **settings), resume=True)
    log = capsys.readouterr().out
    assert f"resumed from {out / 'resume.pt'} at the start of epoch 2/2\n" in log  # was "epoch 1"
    assert "warning: saved with 2 processes, resuming with 1 process\n" in log  # was "with 1"
    saved = load_resume(out / "resume.pt")
    assert saved["step"] == 2 * 2  # epoch 2 counted as this run's schedule counts it: from step 2, not 3
    rows = (out / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert "val_top1_ema" in header and rows[2].split(",")[header.index("val_top1_ema")] == ""
    assert (out / "curves.png").stat().st_size > 0


def test_a_rank_the_saved_run_lacked_draws_a_stream_of_its_own(good_run, tmp_path: Path, monkeypatch):
    """--resume of a 1-process run under 2 processes gave rank 1 rank 0's saved RNG state (2 to 4 paired them): the
    ranks drew the same drop-path masks and mixup lambdas for the rest of the run. Rank 0 still gets its own state
    exactly; a rank without one gets a stream of its own, the same again when the same file is resumed."""
    distributed = importlib.import_module("swinlite.engine.distributed")
    monkeypatch.setattr(distributed, "all_gather_object", lambda obj, info: [obj] * info.world_size)  # no group
    folder, out = copied_run(good_run, tmp_path / "run")
    saved = load_resume(out / "resume.pt")
    cfg = tiny_config("classification", folder, out, **{"train.epochs": 2})
    resumed = trainer.Trainer(TASKS["classification"], cfg, DistInfo(), torch.device("cpu"), out)

    def draws(rank: int, world: int) -> list[float]:
        resumed.dist = DistInfo(rank, world)  # what load_resume reads of the process's place (no process group)
        resumed.load_resume(out / "resume.pt")
        return [*torch.rand(3).tolist(), float(np.random.rand()), random.random()]

    set_rng_state(saved["rng"][0], CPU)
    rank0 = [*torch.rand(3).tolist(), float(np.random.rand()), random.random()]
    assert draws(0, 2) == rank0
    rank1 = draws(1, 2)
    assert all(a != b for a, b in zip(rank1, rank0, strict=True))
    assert draws(1, 2) == rank1
    assert all(a != b for a, b in zip(draws(2, 3), rank1, strict=True))


@pytest.mark.parametrize(("ranks", "said"), [(2, "{path} does not fit"), (1, "rank 1: {path} does not fit")])
def test_a_resume_file_refused_as_it_loads_is_said_once(ranks, said, good_run, tmp_path, monkeypatch):
    """resume.pt refused as it loads, after the data scan ("does not fit this run's model"): under torchrun every
    process printed its error line. Each raises a SharedError now (rank 0 alone says it): rank 0's message, or the
    rank's that refused where rank 0 did not."""
    folder, out = copied_run(good_run, tmp_path / "run")
    cfg = tiny_config("classification", folder, out, **{"train.epochs": 2, "model.kwargs.mlp_ratio": 2})
    resumed = trainer.Trainer(TASKS["classification"], cfg, DistInfo(), torch.device("cpu"), out)
    resumed.dist = DistInfo(1, 2)  # what load_resume reads of the process's place (no process group)

    def gathered(obj: str | None, info: DistInfo) -> list[str | None]:  # the refusals: both ranks' or rank 1's
        return [obj if rank >= 2 - ranks else None for rank in range(2)]

    monkeypatch.setattr(importlib.import_module("swinlite.engine.distributed"), "all_gather_object", gathered)
    with pytest.raises(SharedError, match=re.escape(said.format(path=out / "resume.pt") + " this run's model")):
        resumed.load_resume(out / "resume.pt")


def test_ema_turned_on_at_resume_starts_from_the_resumed_weights(good_run, tmp_path: Path, capsys, monkeypatch):
    """train.ema_decay set at --resume on a run saved without EMA: the EMA kept the random initial weights it was
    built from (EMA top-1 19 % against the raw weights' 89 % in the demo)."""
    (folder, out), task = copied_run(good_run, tmp_path / "run"), TASKS["classification"]
    trained = load_resume(out / "resume.pt")["model"]
    at_start = {}

    def fit(self):  # the weights the resumed run trains on
        at_start["ema"] = {k: v.clone() for k, v in self.ema.module.state_dict().items()}

    monkeypatch.setattr(trainer.Trainer, "fit", fit)
    run(task, tiny_config("classification", folder, out, **{"train.ema_decay": 0.9}), resume=True)
    assert _equal(at_start["ema"], trained)
    note = "note: train.ema_decay is new to this run; the EMA starts from the resumed weights"
    assert note in capsys.readouterr().out


@pytest.mark.parametrize(
    ("saved_scale", "fp16", "scale"), [(None, True, 65536.0), (8.0, True, 8.0), (8.0, False, None)]
)
def test_train_amp_changed_at_resume_is_taken(saved_scale, fp16, scale, good_run, tmp_path, capsys, monkeypatch):
    """train.amp=fp16 at --resume of a run saved with none or bf16 crashed with a traceback: GradScaler refuses the
    empty state a disabled one saved. Its loss scale starts afresh now, with a note; a saved fp16 scale is taken by an
    fp16 run and left by another (fp16 is CUDA's alone: an fp16 run is one whose scaler is enabled)."""
    (folder, out), task = copied_run(good_run, tmp_path / "run"), TASKS["classification"]
    if saved_scale is not None:
        saved = load_resume(out / "resume.pt")
        save_resume(
            out / "resume.pt", saved | {"scaler": torch.amp.GradScaler("cpu", init_scale=saved_scale).state_dict()}
        )
    if fp16:
        monkeypatch.setattr(trainer, "autocast_dtype", lambda *args, **kwargs: torch.float16)
    at_start = {}

    def fit(self):  # the scaler the resumed run trains with
        at_start["scale"] = self.scaler.get_scale() if self.scaler.is_enabled() else None

    monkeypatch.setattr(trainer.Trainer, "fit", fit)
    run(task, tiny_config("classification", folder, out), resume=True)
    assert at_start["scale"] == scale
    note = "note: train.amp=fp16 is new to this run; its loss scale starts afresh\n"
    assert (note in capsys.readouterr().out) == (saved_scale is None)


@pytest.mark.parametrize(
    ("saved_run", "changed", "decays"),
    [
        (
            "layer_decay_run",
            {"optim.layer_decay": 0.8, "optim.weight_decay": 0.5, "optim.betas": "[0.5,0.9]"},
            {0, 0.5},
        ),
        ("good_run", {"optim.weight_decay": 0.0}, {0.0}),
        ("zero_decay_run", {"optim.weight_decay": 0.05}, {0.0, 0.05}),
        ("one_group_run", {"optim.weight_decay": 0.05}, {0.0, 0.05}),
        ("one_group_run", {"optim.weight_decay": 0.0}, {0.0}),
    ],
)
def test_optimizer_settings_changed_at_resume_are_the_ones_used(
    saved_run, changed, decays, tmp_path: Path, request, monkeypatch
):
    """optim.weight_decay, optim.betas and optim.layer_decay changed at --resume were warned about and written to
    config.yaml, but the optimizer's load_state_dict put the saved groups' values back: the run went on with the
    old ones. Now the groups hold the new settings and the saved moments. optim.weight_decay changed to or from 0 was
    refused after the data scan (timm's groups: one at 0, two else); a file saved in that one group is taken."""
    folder, out = copied_run(request.getfixturevalue(saved_run), tmp_path / "run")
    task = TASKS["classification"]
    saved = load_resume(out / "resume.pt")["optimizer"]
    assert (len(saved["param_groups"]) == 1) == (saved_run == "one_group_run")
    cfg = tiny_config("classification", folder, out, **changed)
    at_start = {}

    def fit(self):  # the optimizer the resumed run trains with, and one built afresh from the new settings
        settings = ("betas", "weight_decay", "lr_scale", "eps")
        at_start["got"] = [{k: g.get(k) for k in settings} for g in self.optimizer.param_groups]
        fresh = build_optimizer(self.model, cfg.optim, global_batch=cfg.data.batch_size)
        at_start["fresh"] = [{k: g.get(k) for k in settings} for g in fresh.param_groups]
        names = {id(p): name for name, p in self.model.named_parameters()}
        at_start["state"] = {names[id(p)]: s["exp_avg"] for p, s in self.optimizer.state.items()}
        at_start["order"] = [names[id(p)] for g in self.optimizer.param_groups for p in g["params"]]  # its numbers
        at_start["model_order"] = [name for name, p in self.model.named_parameters() if p.requires_grad]

    monkeypatch.setattr(trainer.Trainer, "fit", fit)
    run(task, cfg, resume=True)
    got = at_start["got"]
    assert got == at_start["fresh"] and len(got) > 1
    assert {g["weight_decay"] for g in got} == decays
    if saved_run == "layer_decay_run":
        assert {g["betas"] for g in got} == {(0.5, 0.9)}
        assert [g["lr_scale"] for g in got] != [g["lr_scale"] for g in saved["param_groups"]]  # 0.8 ** depth, not 0.5
    # the saved moments by parameter name: timm's one group numbers the parameters in the model's order
    order = at_start["model_order"] if len(saved["param_groups"]) == 1 else at_start["order"]
    moments = {order[i]: s["exp_avg"] for i, s in saved["state"].items()}
    assert at_start["state"].keys() == moments.keys()
    assert all(torch.equal(at_start["state"][name], moments[name]) for name in moments)


@pytest.fixture(scope="module")
def first_step_checkpoint(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(data folder, run, step checkpoint): a 1-epoch run saving after every step, and a copy of the step checkpoint
    that a kill after its first step leaves."""
    from trainkit import make_folder

    root, saves = tmp_path_factory.mktemp("step1"), []
    folder, save_resume = make_folder(root / "data"), trainer.save_resume

    def keep_first(path, state):  # the step checkpoint a kill after the first step leaves
        save_resume(path, state)
        if state["batch"] and not saves:
            saves.append(shutil.copy(path, root / "step1.pt"))

    with one_thread_only(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer, "save_resume", keep_first)
        config = tiny_config("classification", folder, root / "ref", **STEP_CHECKPOINTS)
        reference = run(TASKS["classification"], config)
    return folder, reference, Path(saves[0])


STEP_CHECKPOINTS = {"train.epochs": 1, "train.save_every_steps": 1}


@pytest.mark.parametrize(
    ("changed", "tweak", "steps", "why"),
    [  # 24 images: 6 batches of 4; 3 of 8 in 2 steps
        ({"data.batch_size": 4}, None, 6, "its position counts batches of data.batch_size=8 with optim.accum_steps=1, "
         "this run's 4 with 1"),
        ({"optim.accum_steps": 2}, None, 2, "its position counts batches "),
        ({"train.seed": 1}, None, 3, "its position is in an order of 24 training samples shuffled by train.seed=0, "
         "this run's of 24 by train.seed=1"),
        ({}, "image added", 3, "its position is in an order of 24 training samples shuffled by train.seed=0, "
         "this run's of 25 by train.seed=0"),  # 25 images: the last one dropped
        ({}, "older file", 3, "the file, from an older swinlite, does not record the order of the training split"),
    ],
)  # fmt: skip
def test_a_step_checkpoint_resumed_with_another_batch_or_order_restarts_its_epoch(
    changed, tweak, steps, why, first_step_checkpoint, tmp_path, capsys, monkeypatch
):
    """A step checkpoint after batch 1 of 8 images resumed with data.batch_size=4 skipped 4 images (its batch count
    times the new size) and left 4 of the epoch untrained; with optim.accum_steps=2 it counted the saved single
    steps on as pairs, and the run ended at step 3 of a schedule of 2. With another train.seed or an image added to
    the training split it skipped the first 8 images of another order: some were trained twice, others never. A file
    from before the order was saved cannot tell whether it changed."""
    task, (folder, reference, step1) = TASKS["classification"], first_step_checkpoint
    settings = STEP_CHECKPOINTS
    assert (load_resume(step1)["batch"], load_resume(step1)["step"]) == (1, 1)
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(reference / "config.yaml", out / "config.yaml")
    shutil.copy(step1, out / "resume.pt")
    if tweak == "image added":
        folder = shutil.copytree(folder, tmp_path / "data")
        shutil.copy(folder / "train" / "c0" / "0.png", folder / "train" / "c0" / "copy.png")
    if tweak == "older file":
        save_resume(out / "resume.pt", {k: v for k, v in load_resume(step1).items() if k != "order"})
    images, train_step = [], task.train_step

    def counted(self, model, batch):
        output = train_step(self, model, batch)
        images.append(output.size)
        return output

    monkeypatch.setattr(task, "train_step", counted)
    capsys.readouterr()
    run(task, tiny_config("classification", folder, out, **settings, **changed), resume=True)
    printed = capsys.readouterr().out
    assert f"warning: the step checkpoint's epoch restarts from its beginning ({why}" in printed
    assert f"resumed from {out / 'resume.pt'} at the start of epoch 1/1\n" in printed
    assert sum(images) == 24  # the whole epoch
    assert load_resume(out / "resume.pt")["step"] == steps


@pytest.mark.parametrize(("before", "now"), [(None, 0.5), (0.5, None)])
def test_layer_decay_turned_on_or_off_at_resume_of_a_file_without_names_is_refused_before_the_data_scan(
    before, now, good_run, layer_decay_run, tmp_path, capsys, monkeypatch
):
    """optim.layer_decay none -> 0.5 at --resume scanned the data, built the model, then failed to load the optimizer
    ("loaded state dict has a different number of parameter groups"), a refusal the docs did not list. Only a resume
    file that records no parameter names (from before they were saved) is refused: one with them is regrouped by them
    (test_resume_refusals)."""
    folder, saved = good_run if before is None else layer_decay_run  # a finished 1-epoch run with layer_decay before
    out, task = shutil.copytree(saved, tmp_path / "run"), TASKS["classification"]
    save_resume(out / "resume.pt", {k: v for k, v in load_resume(out / "resume.pt").items() if k != "param_names"})
    scans, build_datasets = [], task.build_datasets

    def scanned(self):
        scans.append(1)
        return build_datasets(self)

    monkeypatch.setattr(task, "build_datasets", scanned)
    capsys.readouterr()
    settings = {"train.epochs": 2, "optim.layer_decay": now}
    assert script_main("classification", ["--resume", *overrides("classification", folder, out, **settings)]) == 2
    name = lambda value: "none" if value is None else value  # noqa: E731
    error = capsys.readouterr().err.strip().splitlines()
    said = f"error: --resume: optim.layer_decay was {name(before)}, now {name(now)}: the saved optimizer's parameter"
    assert len(error) == 1 and error[0].startswith(said)
    assert f"and {out / 'resume.pt'} records no parameter names to regroup its state by" in error[0]
    assert scans == [] and not (out / ".lock").exists()
    assert load_resume(out / "resume.pt")["epoch"] == 1


@pytest.mark.parametrize(("rank", "hints"), [("0", 1), ("1", 0)])
def test_only_rank_0_says_where_to_continue_after_an_interrupt(rank, hints, folder, tmp_path, capsys, monkeypatch):
    """Ctrl-C under torchrun printed "interrupted; continue from ... with --resume" once per process."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run", interrupted)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    assert cli.run_from_cli(TASKS["classification"], None, overrides("classification", folder, tmp_path)) == 130
    assert capsys.readouterr().err.count("interrupted") == hints


@pytest.mark.parametrize("where", ["output folder", "data scan"])
@pytest.mark.parametrize(("rank", "lines"), [("0", 1), ("1", 0)])
def test_a_problem_every_process_raises_is_said_once(where, rank, lines, folder, tmp_path, capsys, monkeypatch):
    """Rank 0's problem with the output folder or the data (its scan), broadcast so that every process stops: under
    torchrun each printed its 'error:' line; rank 0 alone says it now, every process exits with code 2."""
    engine_run = importlib.import_module("swinlite.engine.run")
    classification_task = importlib.import_module("swinlite.classification.task")
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(engine_run, "join", lambda device, timeout, settings: DistInfo(int(rank), 2))
    if where == "output folder":
        (out / "resume.pt").write_bytes(b"")  # a run's: a fresh run is refused
        problem = f"{out} already holds a run; pass --resume to continue it"
        monkeypatch.setattr(engine_run, "broadcast_object", lambda obj, info: obj if info.is_main else problem)
    else:
        problem = "data dir has a class without val images"  # rank 0's scan's, broadcast
        monkeypatch.setattr(engine_run, "broadcast_object", lambda obj, info: obj)
        monkeypatch.setattr(classification_task, "broadcast_object", lambda obj, info: problem)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    assert script_main("classification", overrides("classification", folder, out)) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == lines and err.count(problem) == lines, err


PREFLIGHT = {  # a refusal before the processes join, by case: (its settings, words of its error line)
    "data": ({}, "nowhere"),
    "output folder": ({}, "is a file; expected a folder"),
    "config key": ({"optim.lrr": 1}, "unknown config key 'optim.lrr'"),
}


@pytest.mark.parametrize("problem", list(PREFLIGHT))
@pytest.mark.parametrize(("rank", "local_rank", "said"), [("0", "0", True), ("1", "1", False), ("2", "0", True)])
def test_a_refusal_before_the_processes_join_is_said_once_per_machine(
    problem, rank, local_rank, said, folder, tmp_path, capsys, monkeypatch
):
    """A missing --data-dir, an output folder that cannot be used, an unknown key: under torchrun every process found
    it before joining the others, and each printed its 'error:' line. Each machine's first process (local rank 0;
    here 2 machines of 2) says it now, the others exit with code 2 too, without a word."""
    settings, words = PREFLIGHT[problem]
    data, out = (tmp_path / "nowhere" if problem == "data" else folder), tmp_path / "out"
    if problem == "output folder":
        out.write_text("")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    assert script_main("classification", overrides("classification", data, out, **settings)) == 2
    err = capsys.readouterr().err
    if said:
        assert err.count("error: ") == 1 and words in err, err
    else:
        assert err == ""


GLOO_RESET = (
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:40213: Connection reset by peer"
)
GLOO_CLOSED = (
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:60633. This is "
    "typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an error."
)


@pytest.mark.parametrize(
    ("rank", "error", "saved", "line"),
    [
        ("0", GLOO_RESET, True, "error: rank 0: another process of the run ended (Connection reset by peer); continue "
                                "from {out}/resume.pt with --resume"),
        ("1", GLOO_CLOSED, False, "error: rank 1: another process of the run ended (Connection closed by peer) before "
                                  "the first save; nothing to resume"),
    ],
)  # fmt: skip
def test_another_process_ending_is_one_line_with_where_to_continue(
    rank, error, saved, line, folder, tmp_path, capsys, monkeypatch
):
    """A process of the run killed (or failed): the others' next collective failed with a ~50-line traceback of
    gloo's, exit code 1 and no word of the resume file."""
    engine_run = importlib.import_module("swinlite.engine.run")
    out = tmp_path / "out"
    out.mkdir()
    if saved:
        (out / "resume.pt").write_bytes(b"")

    def collective_fails(*args):
        raise RuntimeError(error)

    monkeypatch.setattr(engine_run, "join", lambda device, timeout, settings: DistInfo(int(rank), 2))
    monkeypatch.setattr(engine_run, "prepare_output", collective_fails)  # its broadcast: a collective
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    assert cli.run_from_cli(TASKS["classification"], None, overrides("classification", folder, out)) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line.format(out=out)), lines


@pytest.mark.parametrize(
    ("rank", "error", "line"),
    [
        ("1", "Timed out waiting 1000ms for recv operation to complete", "error: rank 1: a collective waited "
         "train.dist_timeout=1 s while the run prepared its data; rank 0 may still be at it (building the demo data, "
         "scanning the dataset): if so, raise train.dist_timeout; else rank 0 names the stalled process, or is it"),
        ("0", GLOO_CLOSED, "error: rank 0: another process of the run ended (Connection closed by peer; did it time "
         "out waiting while this one prepared the data? then raise train.dist_timeout) before the first save"),
    ],
)  # fmt: skip
def test_a_timeout_while_rank_0_prepares_the_data_names_the_setting(rank, error, line, folder, tmp_path, capsys,
                                                                     monkeypatch):  # fmt: skip
    """Rank 0 building the demo data or scanning a large dataset for longer than train.dist_timeout: rank 1, waiting
    for its scan, said "rank 0 names the stalled process, or is it", and rank 0 that another process ended; neither
    named the likely cause nor the setting to raise."""
    engine_run = importlib.import_module("swinlite.engine.run")
    classification_task = importlib.import_module("swinlite.classification.task")

    def scan_shared(obj, info):  # rank 1 waited past the timeout for rank 0's scan, or rank 0 found rank 1 gone
        raise RuntimeError(error)

    monkeypatch.setattr(engine_run, "join", lambda device, timeout, settings: DistInfo(int(rank), 2))
    monkeypatch.setattr(engine_run, "broadcast_object", lambda obj, info: obj)  # the output folder's: no problem
    monkeypatch.setattr(classification_task, "broadcast_object", scan_shared)
    monkeypatch.setattr(engine_run, "stalled_ranks", lambda info, wait: None)  # rank 0, busy, does not answer
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    argv = overrides("classification", folder, tmp_path / "out", **{"train.dist_timeout": 1})
    assert cli.run_from_cli(TASKS["classification"], None, argv) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), lines


def test_sigterm_unwinds_as_ctrl_c_does_and_exits_143(folder, tmp_path, capsys, monkeypatch):
    """SIGTERM (a kill, torchrun's agent stopping the processes left after one failed) ended the run on the spot:
    exit code 143, no word of the resume file, and OUT/.lock left for the next run to take over with a note."""
    task, steps = TASKS["classification"], []
    train_step = task.train_step

    def terminated(self, model, batch):
        steps.append(1)
        if len(steps) == 4:  # the first step of epoch 2 (3 steps an epoch)
            os.kill(os.getpid(), signal.SIGTERM)
        return train_step(self, model, batch)

    monkeypatch.setattr(task, "train_step", terminated)
    out, unhandled = tmp_path / "out", []

    def handler(signum, frame):  # what the run's own handler replaces (the default would end pytest)
        unhandled.append(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        code = script_main("classification", overrides("classification", folder, out))
        assert signal.getsignal(signal.SIGTERM) is handler  # put back after the run
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (code, unhandled) == (143, [])
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"terminated; continue from {out / 'resume.pt'} with --resume"]
    assert not (out / ".lock").exists() and load_resume(out / "resume.pt")["epoch"] == 1


def _wait_for_sigterm(ready) -> None:
    ready.set()  # a signal that comes while Python sets up after the fork is dropped: wait for this
    time.sleep(120)


def test_a_process_forked_under_the_sigterm_handler_ends_as_by_default(capfd):
    """The data scan's forked pool, ended by Pool.terminate's SIGTERM, and loader workers inherited the run's
    handler: each raised Terminated and printed a traceback instead of ending."""
    fork = multiprocessing.get_context("fork")
    with cli.terminate_as_interrupt():
        ready = fork.Event()
        child = fork.Process(target=_wait_for_sigterm, args=(ready,))
        child.start()
        assert ready.wait(timeout=60)
        os.kill(child.pid, signal.SIGTERM)
        child.join(timeout=60)
    assert child.exitcode == -signal.SIGTERM
    assert "Terminated" not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("train", "val", "drop_last", "message"),
    [
        # 3 samples are 2 a process with the sampler's padding repeat: one batch each (refused before)
        (2, 4, True, "the training split has 2 samples, fewer than one batch a process (data.batch_size=2; each of 2"),
        (1, 4, False, "the training split has 1 samples, fewer than 2 processes"),
        # a process evaluated nothing: the processes went out of step and waited train.dist_timeout
        (4, 1, True, "the validation split has 1 samples, fewer than 2 processes"),
    ],
)
def test_splits_too_small_for_the_processes_are_refused(train: int, val: int, drop_last: bool, message: str):
    split = lambda n: TensorDataset(torch.arange(float(n)))  # noqa: E731
    with pytest.raises(ValueError, match=re.escape(message)):
        build_loaders(split(train), split(val), DataConfig(batch_size=2), 0, DistInfo(0, 2), CPU, drop_last=drop_last)
    build_loaders(split(3), split(2), DataConfig(batch_size=2), 0, DistInfo(0, 2), CPU, drop_last=drop_last)


def test_val_shards_of_the_processes_split_the_validation_set():
    """Each process evaluates its own share, none twice: summed metrics count every sample once."""
    data = TensorDataset(torch.arange(5))
    cfg = DataConfig(batch_size=2, num_workers=0)
    shards = [build_loaders(data, data, cfg, 0, DistInfo(rank, 2), CPU)[1] for rank in (0, 1)]
    assert [torch.cat([batch for (batch,) in val]).tolist() for val in shards] == [[0, 2, 4], [1, 3]]


@pytest.mark.parametrize(("drop_last", "sizes"), [(True, [2, 2]), (False, [2, 2, 1])])
def test_a_partial_last_batch_is_kept_unless_dropped(drop_last: bool, sizes: list[int]):
    """Detection keeps partial batches (drop_last=False); classification and segmentation drop them."""
    data, cfg = TensorDataset(torch.arange(5)), DataConfig(batch_size=2, num_workers=0)
    train, _ = build_loaders(data, data, cfg, 0, DistInfo(), CPU, drop_last=drop_last)
    assert [len(batch) for (batch,) in train] == sizes


@pytest.mark.parametrize("device", ["cpu", "cuda:1"])
def test_batches_are_pinned_for_a_cuda_run_alone(device: str, monkeypatch):
    """Batches were pinned wherever CUDA exists: a train.device=cpu run made a CUDA context (an error on a busy or
    exclusive-process GPU) to page-lock memory no GPU reads."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    data = TensorDataset(torch.arange(4.0))
    loaders = build_loaders(data, data, DataConfig(batch_size=2), 0, DistInfo(), torch.device(device))
    assert [loader.pin_memory for loader in loaders] == [device != "cpu"] * 2


class _Draws(Dataset):
    """Five samples, each its index and a draw of torch's global generator (as an augmentation draws)."""

    def __len__(self) -> int:
        return 5

    def __getitem__(self, index: int) -> tuple[int, float]:
        return index, torch.rand(()).item()


def _drawn(dist: DistInfo, start: int = 0) -> list[tuple[int, float]]:
    """The samples of ``dist``'s shard of epoch 1 of ``_Draws`` seeded with 7, from its ``start``-th on."""
    train, _ = build_loaders(_Draws(), _Draws(), DataConfig(batch_size=1), 7, dist, CPU)
    train.sampler.set_epoch(1, start)
    return [train.dataset[key] for key in train.sampler]


def test_a_sample_that_pads_the_shards_draws_afresh():
    """2 processes over 5 samples: DistributedSampler pads rank 1's shard with rank 0's first sample, which both drew
    with one seed, that of (seed, epoch, index): the same crop, flip and jitter (in every epoch of a detection run,
    which keeps partial batches). The repeat now draws afresh; the first occurrences draw as one process does, and a
    run without padding as before."""
    single, (rank0, rank1) = _drawn(DistInfo()), (_drawn(DistInfo(rank, 2)) for rank in (0, 1))
    for index, x in single:  # the seed of (seed, epoch, index), as ever
        seed = int.from_bytes(hashlib.blake2b(f"7,1,{index}".encode(), digest_size=4).digest(), "little")
        assert x == torch.rand((), generator=torch.Generator().manual_seed(seed)).item()
    assert sorted(rank0 + rank1[:-1]) == sorted(single)
    (index, x), (repeated, repeat) = rank0[0], rank1[-1]
    assert repeated == index and repeat != x
    assert _drawn(DistInfo(1, 2), start=2) == rank1[2:]  # resumed inside the epoch: the same draws


def test_each_epoch_is_distributed_samplers_own_shuffle_of_that_epoch():
    sampler = EpochSampler(list(range(8)), num_replicas=1, rank=0, seed=0)
    reference = DistributedSampler(list(range(8)), num_replicas=1, rank=0, seed=0)
    orders = []
    for epoch in (0, 1, 0):
        sampler.set_epoch(epoch)
        reference.set_epoch(epoch)
        keys = list(sampler)
        assert keys == [(epoch, index, 0) for index in reference]
        orders.append([index for _, index, _ in keys])
    assert sorted(orders[0]) == sorted(orders[1]) == list(range(8))
    assert orders[0] != orders[1] and orders[2] == orders[0]  # reshuffled per epoch, the same for the same epoch


def test_a_loader_worker_leaves_the_first_sigterm_to_the_run():
    """SIGTERM sent to the whole process group (Slurm's scancel, kill -- -PGID) ended the loader workers at once: the
    unwinding run's loader then printed "Exception ignored in _MultiProcessingDataLoaderIter.__del__ ... DataLoader
    worker (pid N) is killed by signal: Terminated" after its 'terminated' line. A worker now outlives the first
    SIGTERM, serves on and ends when its loader shuts it down; a second one ends it, as by default."""
    data = TensorDataset(torch.arange(8.0))
    cfg = DataConfig(batch_size=2, num_workers=1, persistent_workers=False)
    train, _ = build_loaders(data, data, cfg, seed=0, dist=DistInfo(), device=CPU)
    batches = iter(train)
    next(batches)  # the worker has started
    (worker,) = batches._workers
    os.kill(worker.pid, signal.SIGTERM)
    worker.join(timeout=1)  # time enough to end by it
    assert worker.is_alive()
    assert len(list(batches)) == 3  # it serves the rest of the epoch
    del batches  # the loader shuts it down
    worker.join(timeout=10)
    assert worker.exitcode == 0
    batches = iter(train)
    next(batches)
    (worker,) = batches._workers
    with pytest.raises(RuntimeError, match="killed by signal: Terminated"):  # the loader's word on a dead worker
        for _ in range(2):
            os.kill(worker.pid, signal.SIGTERM)
            time.sleep(0.5)  # the first one handled before the second comes
        worker.join(timeout=10)
        list(batches)
    assert worker.exitcode == -signal.SIGTERM


EXIT_WITH_PERSISTENT_WORKERS = """
import torch
from torch.utils.data import TensorDataset
from swinlite.engine.distributed import DistInfo
from swinlite.engine.loaders import build_loaders
from swinlite.engine.sections import DataConfig
data = TensorDataset(torch.arange(8.0))
cfg = DataConfig(batch_size=2, num_workers=2, persistent_workers=True)
train, _ = build_loaders(data, data, cfg, 0, DistInfo(), torch.device("cpu"))
print(len(list(train)))
"""


def test_a_process_exits_with_its_loaders_persistent_workers_alive():
    """At exit multiprocessing sends each daemonic process one SIGTERM and waits for it without a time limit: a
    persistent worker that left that SIGTERM to the run (the loader still referenced, by a global or by the
    traceback of the error that ends a script calling engine.run) kept the process from exiting, for ever."""
    result = subprocess.run([sys.executable, "-c", EXIT_WITH_PERSISTENT_WORKERS], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 0 and result.stdout == "4\n", result.stderr
    assert "killed by signal" not in result.stderr  # the loader's SIGCHLD handler saw a clean exit


class _Reports(Dataset):
    """Reports three errors through ``sys.excepthook``, as a worker's multiprocessing resource sharer thread does."""

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: int) -> int:
        error = (ConnectionResetError(104, "Connection reset by peer"), EOFError(), ValueError("a real fault"))[index]
        sys.excepthook(type(error), error, None)
        return index


def test_a_loader_worker_reports_all_but_a_handover_the_run_broke_off(capfd):
    """The run, unwinding after the process group's SIGTERM, broke off a batch's handover: the worker's resource sharer
    thread printed a traceback ending "ConnectionResetError: [Errno 104] Connection reset by peer", or "EOFError" where
    the run closed the connection before its request (scripts/benchmark.py --contended, SIGTERM to its group)."""
    cfg = DataConfig(batch_size=1, num_workers=1, persistent_workers=False)
    loader, _ = build_loaders(_Reports(), _Reports(), cfg, seed=0, dist=DistInfo(), device=CPU)
    assert sorted(int(b) for b in loader) == [0, 1, 2]
    err = capfd.readouterr().err
    assert "ValueError: a real fault" in err and "Connection" not in err and "EOFError" not in err


def test_a_full_disk_at_the_resume_file_says_where_the_files_stand(good_run, tmp_path: Path, capsys, monkeypatch):
    """It said "the files already there are left as they were" while last.safetensors and metrics.csv were already
    an epoch ahead of resume.pt; --resume then trains the epoch again and rewrites them."""
    folder, out = copied_run(good_run, tmp_path / "out")  # a finished 1-epoch run
    save_resume = trainer.save_resume

    def full(path, state):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trainer, "save_resume", full)
    capsys.readouterr()
    resumed = ["--resume", *overrides("classification", folder, out, **{"train.epochs": 2})]
    assert script_main("classification", resumed) == 2
    error = capsys.readouterr().err
    assert "No space left on device" in error and "left as they were" not in error, error
    assert "resume.pt still ends before epoch 2/2: once there is room, --resume trains it again" in error, error
    monkeypatch.setattr(trainer, "save_resume", save_resume)
    assert script_main("classification", resumed) == 0
    assert load_resume(out / "resume.pt")["epoch"] == 2


def test_a_full_disk_at_the_first_save_says_to_run_again(good_run, tmp_path: Path, capsys, monkeypatch):
    """It said "resume.pt still ends before epoch 1/1: once there is room, --resume trains it again", but the run
    removes what its first save wrote as it ends (run.remove_unsaved): --resume said resume.pt does not exist."""
    fresh = overrides("classification", good_run[0], tmp_path / "out", **{"train.epochs": 1})

    def full(path, state):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(trainer, "save_resume", full)
        assert script_main("classification", fresh) == 2
    error = capsys.readouterr().err
    assert "No space left on device" in error and "--resume trains it again" not in error, error
    assert (
        f"nothing to resume is saved in {tmp_path / 'out'} (what epoch 1/1 wrote there is removed as the run ends): "
        "once there is room, run the same command again, without --resume"
    ) in error, error
    assert script_main("classification", fresh) == 0  # as it says


@pytest.mark.parametrize(
    "failing, settings",
    # a step's scalars; before a step checkpoint; the events file opened (its later events purged) as a resume starts
    [("add_scalar", {}), ("flush", {"train.save_every_steps": 1}), ("__init__", {})],
)
def test_a_full_disk_at_the_tensorboard_events_says_where_the_files_stand(
    good_run, tmp_path: Path, capsys, monkeypatch, failing: str, settings: dict
):
    """TensorBoard's writer thread meets the full disk; the next call of the run raises its OSError again, naming no
    file: the run ended with "error: [Errno 28] No space left on device", without the file or what to run once there is
    room (and closing the writer as the run ends raises it once more)."""
    summary_writer = pytest.importorskip("torch.utils.tensorboard").SummaryWriter
    folder, out = copied_run(good_run, tmp_path / "out")  # a finished 1-epoch run

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    resumed = ["--resume", *overrides("classification", folder, out, **{"train.epochs": 2, "train.tensorboard": True,
                                                                         **settings})]  # fmt: skip
    with monkeypatch.context() as patched:
        for name in (failing, "close"):
            patched.setattr(summary_writer, name, full)
        capsys.readouterr()
        assert script_main("classification", resumed) == 2
    error = capsys.readouterr().err
    assert f"cannot write {out / 'events.out.tfevents.*'}: No space left on device" in error, error
    assert "resume.pt still ends before epoch 2/2: once there is room, --resume trains it again" in error, error
    assert script_main("classification", resumed) == 0  # as it says


def test_a_home_path_in_a_setting_is_expanded(tmp_path: Path, capsys, monkeypatch):
    """bash leaves ~ unexpanded after 'train.output_dir=' (a dotted key is no shell name): the run made a folder
    named '~' in the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    settings = ["train.output_dir=~/runs/a", "data.data_dir=~/data", "model.name=~notapath"]
    assert cli.run_from_cli(ClassificationTask, None, settings, print_config=True) == 0
    printed, home = capsys.readouterr().out, tmp_path / "home"
    assert f"output_dir: {home / 'runs' / 'a'}" in printed and f"data_dir: {home / 'data'}" in printed, printed
    assert "name: ~notapath" in printed  # a model name is no path
