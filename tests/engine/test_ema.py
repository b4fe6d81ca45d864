"""train.ema_decay and train.ema_warmup: timm's EMA, its warm-up following the run's optimizer steps; the refusals."""

import re

import pytest
import torch
from enginekit import TASKS
from timm.scheduler import StepLRScheduler
from torch import nn

from swinlite.engine.loop import EpochPosition, StepSettings, train_one_epoch
from swinlite.engine.preflight import check_run
from swinlite.engine.task import StepOutput
from swinlite.engine.trainer import build_ema


def _decay(step: int, decay: float, warmup: bool) -> float:
    """timm's ModelEmaV3.get_decay written out: the first step copies; warm-up 1 - step^(-2/3), capped at decay."""
    return 0.0 if step <= 1 else min(1 - step ** (-2 / 3), decay) if warmup else decay


@pytest.mark.parametrize("start", [0, 100])  # a fresh run, and one resumed after 100 optimizer steps
@pytest.mark.parametrize("warmup", [True, False])
def test_ema_warmup_follows_the_runs_optimizer_steps(warmup: bool, start: int):
    """0.9998 without warm-up kept the initial weights through a short fine-tune (0.9998^1200 ≈ 0.79): with
    train.ema_warmup the decay of the run's step n is 1 - n^(-2/3), counted on from a resume's step."""
    model = nn.Linear(1, 1, bias=False)
    nn.init.zeros_(model.weight)
    ema = build_ema(model, 0.9998, warmup)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    train_one_epoch(
        model, [torch.ones(1, 1)] * 3, lambda m, x: StepOutput(m(x).sum(), 1), optimizer,
        StepLRScheduler(optimizer, decay_t=1000, t_in_epochs=False), EpochPosition(step=start),
        StepSettings(torch.device("cpu")), total=3, scaler=torch.amp.GradScaler("cpu", enabled=False), ema=ema,
    )  # fmt: skip
    expected = 0.0  # the weight is -k after k steps of SGD at lr 1 on a loss of gradient 1
    for k in range(1, 4):
        d = _decay(start + k, 0.9998, warmup)
        expected = d * expected + (1 - d) * -k
    assert ema.module.weight.item() == pytest.approx(expected, rel=1e-6)
    assert build_ema(model, None, warmup) is None


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("train.best_of=ema", "train.best_of=ema needs train.ema_decay (e.g. train.ema_decay=0.9998)"),
        ("train.ema_warmup=true", "train.ema_warmup=true needs train.ema_decay (e.g. train.ema_decay=0.9998)"),
    ],
)
def test_ema_settings_without_ema_decay_are_refused(setting: str, message: str):
    cfg = TASKS["classification"].load_config(None, [setting])
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_run(TASKS["classification"], cfg)
