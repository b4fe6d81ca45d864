"""scripts/train.py under torchrun with 2 CPU processes (DDP over gloo)."""

import csv
import subprocess
import sys
from pathlib import Path

from scriptkit import script_env
from trainkit import REPO, tiny_overrides

from swinlite.engine.checkpoint import load_resume


def test_torchrun_two_processes(tmp_path: Path, folder: Path):
    """Two processes train and log as one run. With a BatchNorm model and EMA decay 0 the EMA is the trained model,
    so its scores must be the raw ones: each process averages its own BatchNorm statistics into its EMA copy, and
    before the fix each val shard was scored by a different EMA model."""
    out = tmp_path / "out"
    settings = {
        "model.name": "resnet10t",
        "train.ema_decay": 0.0,
        "data.batch_size": 4,
        "train.epochs": 1,
        "schedule.warmup_epochs": 3,  # longer than the run: a warning on every rank
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(REPO / "scripts" / "train.py"), *tiny_overrides(folder, out, **settings)]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, env=script_env(), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("epoch 1/1: train loss") == 1  # only rank 0 logs
    assert result.stderr.count("warning: schedule.warmup_epochs 3.0 is not shorter than the run") == 1  # was twice
    assert "Cosine annealing scheduler will have no effect" not in result.stderr  # timm's note: the warning says it
    resume = load_resume(out / "resume.pt")
    assert len(resume["rng"]) == 2  # one RNG state per process
    assert not torch_equal(resume["rng"][0]["torch"], resume["rng"][1]["torch"])  # ranks draw different augmentations
    assert resume["step"] == 3  # 24 images over 2 processes x batch 4: 3 steps per epoch
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [r["epoch"] for r in rows] == ["1"]
    for row in rows:
        assert (row["val_loss_ema"], row["val_top1_ema"]) == (row["val_loss"], row["val_top1"]), row


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)
