"""A task whose loss parts differ between processes, in two processes (forked: torch is already imported; they join
the process group and take one step of a one-weight model): the epoch's all-reduce of loss sums of different lengths
waited train.dist_timeout (30 min by default) before, and one of equal lengths summed different losses together; now
every process stops at once, naming each one's parts."""

import os
from pathlib import Path

import pytest
import torch
from rankforks import forked_pair, report_and_exit
from timm.scheduler import StepLRScheduler
from torch import nn

from swinlite.engine import distributed, handshake
from swinlite.engine.loop import EpochPosition, StepSettings, train_one_epoch
from swinlite.engine.task import StepOutput

WAIT = 3.0  # train.dist_timeout: how long the old code's mismatched all-reduce waited


def _rank(rank: int, port: int, parts: list[list[str]], reports: list[Path]) -> None:
    """One process: trains one step whose parts are named ``parts[rank]`` and reports how the epoch ended."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    info = distributed.launched()
    distributed.init_distributed(torch.device("cpu"), WAIT, handshake.launch_store(info, 10.0))
    model = nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(m: nn.Module, x: torch.Tensor) -> StepOutput:
        loss = m(x).sum()
        return StepOutput(loss, 1, dict.fromkeys(parts[rank], loss))

    try:
        losses, _ = train_one_epoch(
            model, [torch.ones(1, 1)], step, optimizer, StepLRScheduler(optimizer, decay_t=1000, t_in_epochs=False),
            EpochPosition(), StepSettings(torch.device("cpu"), log_interval=100), total=1,
            scaler=torch.amp.GradScaler("cpu", enabled=False), dist=info,
        )  # fmt: skip
        said = f"losses {sorted(losses)}"
    except Exception as e:
        said = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    report_and_exit(reports, rank, said)


@pytest.mark.parametrize(
    ("parts", "found"),
    [
        (
            [["loss_box"], ["loss_aux", "loss_box"]],  # rank 1 alone adds a part
            "rank 0: loss_box, train_loss; rank 1: loss_aux, loss_box, train_loss",
        ),
        ([["loss_a"], ["loss_b"]], "rank 0: loss_a, train_loss; rank 1: loss_b, train_loss"),  # equal lengths
    ],
)
def test_loss_parts_that_differ_between_processes_stop_every_one_at_once(
    parts: list[list[str]], found: str, tmp_path: Path
):
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    _, seconds = forked_pair(_rank, (parts, reports), timeout=30)
    said = (
        f"SharedError: the processes' training losses have different parts ({found}): expected the same on every "
        "process; the task's train_step must return StepOutput.parts with the same keys on every process"
    )
    assert [r.read_text() if r.exists() else "" for r in reports] == [said, said]
    assert seconds < WAIT, seconds
