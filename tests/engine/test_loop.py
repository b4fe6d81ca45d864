"""The training loop's arithmetic: each optimizer step averages the gradients of the micro-batches it takes."""

import pytest
import torch
from timm.scheduler import StepLRScheduler
from torch import nn

from swinlite.engine import progress
from swinlite.engine.loop import EpochPosition, StepSettings, train_one_epoch
from swinlite.engine.task import StepOutput


@pytest.mark.parametrize(("micro_batches", "accum_steps"), [(3, 2), (5, 3), (4, 2), (2, 1)])
def test_every_optimizer_step_averages_its_micro_batches(micro_batches: int, accum_steps: int, capsys, monkeypatch):
    """A loss of w has gradient 1 per micro-batch: every step of SGD at lr 1 moves w by -1, the epoch's last one too
    when accum_steps does not divide the micro-batches (it averaged them over accum_steps, a smaller step, before).
    The progress lines number those optimizer steps (they numbered micro-batches before)."""
    monkeypatch.setattr(progress, "_tty", lambda: False)  # plain progress lines
    model = nn.Linear(1, 1, bias=False)
    nn.init.zeros_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = StepLRScheduler(optimizer, decay_t=1000, t_in_epochs=False)
    weights = []
    settings = StepSettings(torch.device("cpu"), accum_steps=accum_steps, log_interval=1)
    train_one_epoch(
        model, [torch.ones(1, 1)] * micro_batches, lambda m, x: StepOutput(m(x).sum(), 1), optimizer, scheduler,
        EpochPosition(), settings, total=micro_batches,
        scaler=torch.amp.GradScaler("cpu", enabled=False), on_step=lambda p: weights.append(model.weight.item()),
    )  # fmt: skip
    steps = -(-micro_batches // accum_steps)
    assert weights == [-float(n) for n in range(1, steps + 1)]
    shown = [line.split(" loss")[0] for line in capsys.readouterr().out.splitlines()]
    assert shown == [f"train step {n}/{steps}" for n in range(1, steps + 1)]  # optimizer steps, not micro-batches
