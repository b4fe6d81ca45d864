"""scripts/train_detection.py under torchrun with 2 CPU processes (DDP over gloo), with the demo's FPN levels."""

import subprocess
import sys
from pathlib import Path

import pytest
from detkit import REPO, tiny_overrides
from scriptkit import script_env

from swinlite.engine.checkpoint import load_resume


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_torchrun_two_processes_with_an_unused_swin_level(coco: Path, tmp_path: Path):
    """One epoch of 2 steps: DDP failed at the second step on the output norm of a level the FPN does not take."""
    out = tmp_path / "out"
    overrides = tiny_overrides(coco, out, **{"model.min_level": 1, "model.kwargs.out_norm": True})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(REPO / "scripts" / "train_detection.py"), *overrides]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, env=script_env(), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("epoch 1/1: train loss") == 1  # only rank 0 logs
    resume = load_resume(out / "resume.pt")
    assert len(resume["rng"]) == 2 and resume["step"] == 2  # 5 images (1 file missing): 3 a process, 2 batches
