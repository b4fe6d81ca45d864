"""What a training run prints and records of each epoch: the progress lines' loss and the steps they are logged at,
the epoch line and its metrics.csv cells, the lr schedule warning of a resume, the divergence error."""

import contextlib
import csv
import dataclasses
import math
import re
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from enginekit import TASKS, copied_run, finished_run, overrides, script_main, tiny_config
from timm.scheduler import StepLRScheduler
from torch import nn

from swinlite.engine import progress, run
from swinlite.engine.checkpoint import load_resume
from swinlite.engine.loop import EpochPosition, StepSettings, train_one_epoch
from swinlite.engine.task import StepOutput
from swinlite.engine.trainer import RunState, Trainer


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(data folder, run): a finished classification run of ``train.epochs=1``, copied by each test that resumes it."""
    return finished_run(tmp_path_factory.mktemp("one_epoch"), **{"train.epochs": 1})


def test_the_progress_line_shows_the_epoch_s_running_loss_and_the_step_s(capsys, monkeypatch):
    """The progress showed the last step's loss while the epoch line, metrics.csv and TensorBoard give the epoch's
    running mean per image: losses 1, 3, 5 (one image each) now show running 1, 2, 3, each step's in brackets."""
    monkeypatch.setattr(progress, "_tty", lambda: False)
    model = nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    batches = [torch.full((1, 1), float(v)) for v in (1, 3, 5)]
    train_one_epoch(
        model, batches, lambda m, x: StepOutput(x.sum() + 0 * m(x).sum(), 1), optimizer,
        StepLRScheduler(optimizer, decay_t=1000, t_in_epochs=False), EpochPosition(),
        StepSettings(torch.device("cpu"), log_interval=1), total=3, scaler=torch.amp.GradScaler("cpu", enabled=False),
    )  # fmt: skip
    shown = [line.split(" loss ")[1].split(" lr")[0] for line in capsys.readouterr().out.splitlines()]
    assert shown == ["1.0000 (step 1.0000)", "2.0000 (step 3.0000)", "3.0000 (step 5.0000)"]


def test_tensorboard_logs_at_the_steps_the_progress_lines_show():
    """Every 3 steps of 7-step epochs: TensorBoard logged at the run's steps 9, 12 (steps 2 and 5 of epoch 2), the
    progress lines at steps 3, 6 and 7 of each epoch; TensorBoard now logs there too (run steps 10, 13, 14)."""
    logged = []
    fake = SimpleNamespace(
        state=RunState(sums={"train_loss": 2.0}, count=1), steps_per_epoch=7,
        cfg=SimpleNamespace(train=SimpleNamespace(log_interval=3, epochs=2), optim=SimpleNamespace(accum_steps=1)),
        optimizer=torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1),
        tensorboard=SimpleNamespace(step=lambda step, loss, lr: logged.append(step)),
        _saving_in_epoch=contextlib.nullcontext,
    )  # fmt: skip
    for batch in range(1, 8):  # epoch 2
        fake.state.step, fake.state.batch = 7 + batch, batch
        Trainer._log_step(fake)
    assert logged == [10, 13, 14]


def test_an_epoch_trained_before_the_resume_has_no_rate(folder: Path, tmp_path: Path, monkeypatch, capsys):
    """Its evaluation failed, the resume evaluated it: nothing was trained after the resume, and metrics.csv and the
    epoch line gave 0.0 img/s; now the cell is empty (not measured) and the line says it trained before the resume."""
    evaluate = TASKS["classification"].evaluate

    def fails(self, model, loader):
        raise KeyError("area")

    monkeypatch.setattr(TASKS["classification"], "evaluate", fails)
    cfg = tiny_config("classification", folder, tmp_path / "run", **{"train.epochs": 1, "train.max_iters": 1})
    with pytest.raises(ValueError, match="fix the cause and --resume"):
        run(TASKS["classification"], cfg)
    monkeypatch.setattr(TASKS["classification"], "evaluate", evaluate)
    capsys.readouterr()
    out = run(TASKS["classification"], cfg, resume=True)
    assert "(trained before the resume)" in capsys.readouterr().out
    with open(out / "metrics.csv") as f:
        assert next(csv.DictReader(f))["train_img_s"] == ""


def test_epoch_time_spans_the_ema_evaluation(folder: Path, tmp_path: Path, monkeypatch):
    """epoch_time ended before the EMA weights' evaluation: an EMA evaluation of 1.5 s did not count."""
    scores = Trainer.scores

    def slow_ema(self, model, loader):
        if model is self.ema.module:
            time.sleep(1.5)
        return scores(self, model, loader)

    monkeypatch.setattr(Trainer, "scores", slow_ema)
    settings = {"train.epochs": 1, "train.max_iters": 1, "train.ema_decay": 0.9}  # one step: the time is the sleep's
    out = run(TASKS["classification"], tiny_config("classification", folder, tmp_path / "run", **settings))
    with open(out / "metrics.csv") as f:
        assert float(next(csv.DictReader(f))["epoch_time"]) >= 1.5


def test_raising_train_epochs_names_the_lr_on_both_schedules(one_epoch, tmp_path: Path, capsys):
    """A finished 1-epoch run resumed with train.epochs=2: the warning named no cause and no lr; now it names the
    changed setting, the lr of the first resumed step on the new schedule and on the saved one, and the warm restart."""
    folder, out = copied_run(one_epoch, tmp_path / "run")
    steps = load_resume(out / "resume.pt")["step"]
    capsys.readouterr()
    run(TASKS["classification"], tiny_config("classification", folder, out, **{"train.epochs": 2}), resume=True)
    log = capsys.readouterr().out
    warning = next(line for line in log.splitlines() if "the lr schedule differs" in line)
    lrs = re.search(rf"the lr at step {steps + 1} is (\S+) on the new schedule, (\S+) on the saved one", warning)
    assert "(changed train.epochs: 1 -> 2)" in warning and "a warm restart" in warning and lrs, warning
    assert float(lrs[1]) > float(lrs[2])  # the lr rises again


def test_a_run_diverged_in_its_first_epoch_says_nothing_was_saved(folder: Path, tmp_path: Path, capsys):
    """It said that the folder 'keeps the files of the last good epoch', of which there were none."""
    out = tmp_path / "out"
    settings = {"train.epochs": 1, "optim.lr": 1e12, "schedule.warmup_epochs": 0}
    assert script_main("classification", overrides("classification", folder, out, **settings)) == 2
    error = capsys.readouterr().err
    assert f"no epoch completed, nothing to resume was saved in {out} (try a lower optim.lr" in error, error
    assert "last good epoch" not in error
    assert (out / "scan.json.gz").is_file()  # the data scan stays for the next run: not "nothing was saved"


def _diverging_at(monkeypatch, calls: int) -> None:
    """The classification task's training loss is NaN from its ``calls``-th step of this process on."""
    train_step, seen = TASKS["classification"].train_step, []

    def nan_later(self, model, batch):
        seen.append(1)
        out = train_step(self, model, batch)
        return out if len(seen) < calls else dataclasses.replace(out, loss=out.loss * math.nan)

    monkeypatch.setattr(TASKS["classification"], "train_step", nan_later)


def test_a_divergence_after_a_step_checkpoint_goes_back_to_the_last_good_epoch(
    one_epoch, tmp_path, capsys, monkeypatch
):
    """Epoch 2 saved its step 1 (weights ruined but finite), then diverged: the error said the folder kept the last good
    epoch, yet resume.pt held that step checkpoint, which every --resume diverged from again. Now resume.pt is back at
    the end of epoch 1, the error says so, and a --resume with sound settings trains on from there."""
    folder, out = copied_run(one_epoch, tmp_path / "out")
    epoch1 = load_resume(out / "resume.pt")
    capsys.readouterr()
    _diverging_at(monkeypatch, 2)
    settings = {"train.epochs": 2, "train.save_every_steps": 1}
    assert script_main("classification", ["--resume", *overrides("classification", folder, out, **settings)]) == 2
    error = capsys.readouterr().err
    assert f"{out} keeps the files of the last good epoch, 1/2, and {out / 'resume.pt'} is back at its end" in error
    assert "(the step checkpoint of step 1/" in error and "of epoch 2/2 is dropped" in error, error
    saved = load_resume(out / "resume.pt")
    assert (saved["epoch"], saved["batch"], saved["step"]) == (1, 0, epoch1["step"])
    assert not (out / ".resume.pt.epoch").exists()
    monkeypatch.undo()
    assert script_main("classification", ["--resume", *overrides("classification", folder, out, **settings)]) == 0
    assert load_resume(out / "resume.pt")["epoch"] == 2 and not (out / ".resume.pt.epoch").exists()


def test_a_divergence_after_a_resumed_step_checkpoint_without_an_epoch_says_what_resume_pt_holds(
    folder, tmp_path, capsys, monkeypatch
):
    """In its first epoch there is no epoch end to go back to: the step checkpoint stays, said as what it is."""
    out = tmp_path / "out"
    _diverging_at(monkeypatch, 3)
    settings = {"train.epochs": 1, "train.save_every_steps": 1}
    assert script_main("classification", overrides("classification", folder, out, **settings)) == 2
    error = capsys.readouterr().err
    held = f"no epoch completed; {out / 'resume.pt'} holds step 2/"
    assert held in error and "of epoch 1/1, which --resume continues from and may diverge from again" in error, error


def test_the_schedule_warning_names_settings_changed_since_the_resume_file(one_epoch, tmp_path, capsys, monkeypatch):
    """A resume with train.epochs=4 that diverged before saving rewrote config.yaml; the next one compared with it and
    named no cause. The settings the resume file was saved with are compared now."""
    folder, out = copied_run(one_epoch, tmp_path / "run")
    _diverging_at(monkeypatch, 1)
    with pytest.raises(ValueError, match="training diverged"):
        run(TASKS["classification"], tiny_config("classification", folder, out, **{"train.epochs": 2}), resume=True)
    monkeypatch.undo()
    capsys.readouterr()
    run(TASKS["classification"], tiny_config("classification", folder, out, **{"train.epochs": 2}), resume=True)
    warning = next(line for line in capsys.readouterr().out.splitlines() if "the lr schedule differs" in line)
    assert "(changed train.epochs: 1 -> 2)" in warning, warning


def test_layer_decay_turned_on_at_resume_changes_no_schedule(one_epoch, tmp_path, capsys):
    """optim.layer_decay turned on at --resume, the schedule alike, warned "the lr schedule differs from the saved one
    (changed settings, or the run was saved by a swinlite that did not scale ...)" with the same lr on both: the
    scheduler's state holds a value per parameter group (2 of weight decay, now 14 of layer decay)."""
    folder, out = copied_run(one_epoch, tmp_path / "run")
    capsys.readouterr()
    settings = {"train.epochs": 1, "optim.layer_decay": 0.5}
    run(TASKS["classification"], tiny_config("classification", folder, out, **settings), resume=True)
    log = capsys.readouterr().out
    assert "changed setting optim.layer_decay: None -> 0.5" in log and "the lr schedule differs" not in log, log


def test_the_schedule_warning_names_steps_per_epoch_changed_by_the_data(folder, tmp_path, capsys):
    """Images added before a --resume with the same settings: the warning gave the cause of changed settings or an
    old swinlite; it names the steps per epoch now."""
    cfg = tiny_config("classification", folder, tmp_path / "run", **{"train.epochs": 1})
    run(TASKS["classification"], cfg)
    for image in sorted((folder / "train").rglob("*.png")):
        shutil.copy(image, image.with_name(f"more_{image.name}"))
    capsys.readouterr()
    run(TASKS["classification"], cfg, resume=True)
    warning = next(line for line in capsys.readouterr().out.splitlines() if "the lr schedule differs" in line)
    assert "(the steps per epoch changed: 3 -> 6 (the data changed)): the lr at step 7" in warning, warning
