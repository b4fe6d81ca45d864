"""The training loop's arithmetic: each optimizer step averages the gradients of the micro-batches it takes."""

from types import SimpleNamespace

import pytest
import torch
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler, StepLRScheduler
from torch import nn

from swinlite.engine import loop, progress
from swinlite.engine.distributed import DistInfo
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


@pytest.mark.parametrize("accum_steps", [1, 2])
def test_optimizer_step_n_runs_at_the_lr_the_schedule_gives_step_n(accum_steps: int):
    """A warm-up from lr 0 over 4 steps: the n-th optimizer step (from 0) runs at the lr of timm's scheduler after
    ``step_update(n)``, 0, 0.25, 0.5, 0.75 (one step ahead, 0.25 ... 1.0, the warm-up skipped its lr 0). A loss of w
    has gradient 1: SGD's step moves w by -lr."""
    model = nn.Linear(1, 1, bias=False)
    nn.init.zeros_(model.weight)
    optimizers = [torch.optim.SGD(model.parameters(), lr=1.0), torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)]
    scheduler, by_hand = (
        CosineLRScheduler(o, t_initial=8, warmup_t=4, warmup_lr_init=0.0, t_in_epochs=False) for o in optimizers
    )
    weights = [0.0]
    train_one_epoch(
        model, [torch.ones(1, 1)] * (4 * accum_steps), lambda m, x: StepOutput(m(x).sum(), 1), optimizers[0],
        scheduler, EpochPosition(), StepSettings(torch.device("cpu"), accum_steps=accum_steps), total=4 * accum_steps,
        scaler=torch.amp.GradScaler("cpu", enabled=False), on_step=lambda p: weights.append(model.weight.item()),
    )  # fmt: skip
    ran_at = [weights[n] - weights[n + 1] for n in range(4)]
    expected = []
    for n in range(4):  # the scheduler stepped by hand
        by_hand.step_update(n)
        expected.append(optimizers[1].param_groups[0]["lr"])
    assert expected == [0.0, 0.25, 0.5, 0.75]
    assert ran_at == pytest.approx(expected)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")  # the grads are reset to None
@pytest.mark.parametrize("accum_steps", [1, 2])
def test_a_second_order_optimizer_takes_its_step(accum_steps: int):
    """optim.opt=adahessian passed the config check, then failed its first step ("element 0 of tensors does not
    require grad"): its Hessian differentiates the gradients, which need their graph (``backward(create_graph=True)``,
    as timm's train.py gives it). The step matches adahessian's on the averaged loss (w's one Hessian entry takes
    no random sign)."""
    models = [nn.Linear(1, 1, bias=False) for _ in range(2)]
    for model in models:
        nn.init.ones_(model.weight)
    model, reference = models
    optimizer, expected = (create_optimizer_v2(m, opt="adahessian", lr=0.1) for m in models)
    batches = [torch.full((1, 1), 1.0), torch.full((1, 1), 2.0)][:accum_steps]
    train_one_epoch(
        model, batches, lambda m, x: StepOutput(m(x).square().sum(), 1), optimizer,
        StepLRScheduler(optimizer, decay_t=1000, t_in_epochs=False), EpochPosition(),
        StepSettings(torch.device("cpu"), accum_steps=accum_steps), total=accum_steps,
        scaler=torch.amp.GradScaler("cpu", enabled=False),
    )  # fmt: skip
    (sum(reference(x).square().sum() for x in batches) / accum_steps).backward(create_graph=True)
    expected.step()
    assert model.weight.item() == pytest.approx(reference.weight.item()) and model.weight.item() != 1.0


def test_the_progress_line_shows_the_run_s_images_per_second(capsys, monkeypatch):
    """Under torchrun the plain progress line showed rank 0's images/s, the epoch line the run's (rank 0's rate times
    the processes): 2 processes taking a step of 4 images each a second now show 8 img/s on both."""
    monkeypatch.setattr(progress, "_tty", lambda: False)
    clock = iter(range(10))
    monkeypatch.setattr(progress, "time", SimpleNamespace(perf_counter=lambda: float(next(clock))))  # a step a second
    monkeypatch.setattr(loop, "all_reduce_sum", lambda values, dist, device: values)  # no process group
    monkeypatch.setattr(loop, "all_gather_object", lambda obj, dist: [obj] * dist.world_size)
    model = nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_one_epoch(
        model, [torch.ones(4, 1)] * 2, lambda m, x: StepOutput(m(x).mean(), len(x)), optimizer,
        StepLRScheduler(optimizer, decay_t=1000, t_in_epochs=False), EpochPosition(),
        StepSettings(torch.device("cpu"), log_interval=1), total=2, scaler=torch.amp.GradScaler("cpu", enabled=False),
        dist=DistInfo(0, 2),
    )  # fmt: skip
    assert [line.split()[-2:] for line in capsys.readouterr().out.splitlines()] == [["8", "img/s"]] * 2
