"""A run SIGKILLed mid-epoch and resumed ends with the same weights as one never interrupted, for every task: the
resume file restores the RNGs, the epoch's order and position, and each sample's augmentation is seeded by itself."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from enginekit import DATA_FIXTURE, KITS, SCRIPT, TASKS, config_file, overrides, tiny_config
from trainkit import REPO

from swinlite.engine import run
from swinlite.engine.checkpoint import load_resume
from swinlite.io import read_state_dict

# 2 epochs of 3 steps; drop path, random crops / scales and flips draw from the RNGs
SETTINGS = {"train.epochs": 2, "train.deterministic": True, "model.kwargs.drop_path_rate": 0.1, "data.hflip": 0.5,
            "train.log_interval": 1}  # fmt: skip


def _kill_in_epoch_2(task: str, data: Path, out: Path, tmp: Path) -> None:
    """Start the task's script, SIGKILL it after the first step of epoch 2 (epoch 1's resume file is saved)."""
    config = config_file(task)
    if config is None:  # the built-in defaults, as the reference run, not the script's demo
        config = tmp / "defaults.yaml"
        config.write_text("{}\n")
    args = [sys.executable, str(REPO / "scripts" / SCRIPT[task]), "--config", str(config)]
    args += overrides(task, data, out, **SETTINGS)
    env = KITS["detection"].script_env()  # this checkout first on the path, one thread
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("epoch 2/2 step 1/"):
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, "".join(lines)


@pytest.mark.filterwarnings("ignore::UserWarning")  # the COCO file's quirks warn; tests/detection checks them
@pytest.mark.parametrize("task", list(TASKS))
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(task: str, tmp_path: Path, request):
    data = request.getfixturevalue(DATA_FIXTURE[task])
    reference = run(TASKS[task], tiny_config(task, data, tmp_path / "ref", **SETTINGS))
    _kill_in_epoch_2(task, data, tmp_path / "run", tmp_path)
    killed = load_resume(tmp_path / "run" / "resume.pt")
    assert killed["epoch"] == 1 and killed["batch"] == 0  # killed inside epoch 2, after epoch 1 was saved
    resumed = run(TASKS[task], tiny_config(task, data, tmp_path / "run", **SETTINGS), resume=True)
    expected, got = read_state_dict(reference / "last.safetensors"), read_state_dict(resumed / "last.safetensors")
    assert expected.keys() == got.keys()
    assert max((expected[k].float() - got[k].float()).abs().max().item() for k in expected) <= 1e-6
    ref_state, run_state = load_resume(reference / "resume.pt"), load_resume(resumed / "resume.pt")
    assert ref_state["step"] == run_state["step"] == 2 * killed["step"] > 0
    assert [r["train_loss"] for r in ref_state["history"]] == [r["train_loss"] for r in run_state["history"]]
    assert ref_state["history"][1][TASKS[task].metric] == run_state["history"][1][TASKS[task].metric]
