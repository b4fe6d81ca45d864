"""What a training run prints and records of each epoch: the progress lines' loss and the steps they are logged at,
the epoch line and its metrics.csv cells, the lr schedule warning of a resume, the divergence error."""

import csv
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from enginekit import TASKS, overrides, script_main, tiny_config
from timm.scheduler import StepLRScheduler
from torch import nn

from swinlite.engine import progress, run
from swinlite.engine.checkpoint import load_resume
from swinlite.engine.loop import EpochPosition, StepSettings, train_one_epoch
from swinlite.engine.task import StepOutput
from swinlite.engine.trainer import RunState, Trainer


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
        cfg=SimpleNamespace(train=SimpleNamespace(log_interval=3), optim=SimpleNamespace(accum_steps=1)),
        optimizer=torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1),
        tensorboard=SimpleNamespace(step=lambda step, loss, lr: logged.append(step)),
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
    cfg = tiny_config("classification", folder, tmp_path / "run", **{"train.epochs": 1})
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
    settings = {"train.epochs": 1, "train.ema_decay": 0.9}
    out = run(TASKS["classification"], tiny_config("classification", folder, tmp_path / "run", **settings))
    with open(out / "metrics.csv") as f:
        assert float(next(csv.DictReader(f))["epoch_time"]) >= 1.5


def test_raising_train_epochs_names_the_lr_on_both_schedules(folder: Path, tmp_path: Path, capsys):
    """A finished 1-epoch run resumed with train.epochs=2: the warning named no cause and no lr; now it names the
    changed setting, the lr of the first resumed step on the new schedule and on the saved one, and the warm restart."""
    out = run(TASKS["classification"], tiny_config("classification", folder, tmp_path / "run", **{"train.epochs": 1}))
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
    assert f"no epoch completed, nothing was saved in {out} (try a lower optim.lr" in error, error
    assert "last good epoch" not in error
