"""A lookahead_ optimizer's slow weights are what an epoch ends with: evaluated, saved and resumed."""

import shutil
from pathlib import Path

import pytest
import torch
from enginekit import keep_step_checkpoints, tiny_config
from timm.optim import Lookahead
from timm.scheduler import StepLRScheduler
from torch import nn
from trainkit import make_folder

from swinlite.classification import ClassificationTask
from swinlite.engine import run
from swinlite.engine.checkpoint import load_resume
from swinlite.engine.loop import EpochPosition, StepSettings, train_one_epoch
from swinlite.engine.task import StepOutput
from swinlite.io import read_state_dict


@pytest.mark.parametrize("accum_steps", [1, 2])
def test_the_epoch_ends_with_the_lookahead_slow_weights(accum_steps: int):
    """timm's train.py syncs Lookahead at the end of each epoch; swinlite never did: after 14 steps with k=6 the model
    held the fast weights, 2 steps past the last sync. Now the model holds the slow weights (equal to the buffers)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = Lookahead(torch.optim.AdamW(model.parameters(), lr=0.1), k=6)
    batches = [torch.randn(3, 4) for _ in range(14 * accum_steps)]
    train_one_epoch(
        model, batches, lambda m, x: StepOutput(m(x).square().mean(), len(x)), optimizer,
        StepLRScheduler(optimizer, decay_t=1000, t_in_epochs=False), EpochPosition(),
        StepSettings(torch.device("cpu"), accum_steps=accum_steps), total=len(batches),
        scaler=torch.amp.GradScaler("cpu", enabled=False),
    )  # fmt: skip
    slow = [state["lookahead_slow_buff"] for state in optimizer.state_dict()["state"].values()]
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), slow, strict=True))


def _slow_weights_saved(run_dir: Path) -> bool:
    """Whether every Lookahead slow buffer of ``run_dir/resume.pt`` is a tensor of ``run_dir/last.safetensors``."""
    weights = list(read_state_dict(run_dir / "last.safetensors").values())
    slow = [s["lookahead_slow_buff"] for s in load_resume(run_dir / "resume.pt")["optimizer"]["state"].values()]
    return bool(slow) and all(any(w.shape == b.shape and torch.equal(w, b) for w in weights) for b in slow)


def test_a_lookahead_run_saves_the_slow_weights_and_resumes_bit_equal(tmp_path: Path, monkeypatch):
    """optim.opt=lookahead_adamw (k=6): 2 epochs of 5 steps saved the fast weights of step 10, 4 steps past the last
    sync, in last.safetensors. Now they are the slow weights, and a run resumed from its step checkpoint in epoch 2
    (step 8, past the sync of step 6) ends with the same weights as the uninterrupted run."""
    data = make_folder(tmp_path / "data", per_class=7, splits=("train",))  # 21 images: 5 batches of 4, one dropped
    make_folder(data, per_class=1, splits=("val",))  # evaluated as before, of fewer images
    settings = {"train.epochs": 2, "data.batch_size": 4, "optim.opt": "lookahead_adamw", "train.save_every_steps": 2}
    saves = keep_step_checkpoints(monkeypatch, tmp_path)
    reference = run(ClassificationTask, tiny_config("classification", data, tmp_path / "ref", **settings))
    assert _slow_weights_saved(reference)
    assert [load_resume(p)["step"] for p in saves] == [2, 4, 6, 8]
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(reference / "config.yaml", out / "config.yaml")
    shutil.copy(saves[3], out / "resume.pt")
    resumed = run(ClassificationTask, tiny_config("classification", data, out, **settings), resume=True)
    expected, got = read_state_dict(reference / "last.safetensors"), read_state_dict(resumed / "last.safetensors")
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
