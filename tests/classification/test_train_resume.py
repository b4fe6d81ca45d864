"""A run SIGKILLed mid-epoch and resumed ends with the same weights as one that was never interrupted."""

import signal
import subprocess
import sys
from pathlib import Path

from trainkit import REPO, make_folder, script_env, tiny_config, tiny_overrides, train

from swinlite.engine.checkpoint import load_resume
from swinlite.io import read_state_dict

# 3 epochs of 8 steps; dropout-free pico, but drop path, random crops and flips draw from the RNGs.
SETTINGS = {"train.epochs": 3, "data.batch_size": 4, "train.log_interval": 1, "model.kwargs.drop_path_rate": 0.1}


def _kill_mid_epoch_2(data: Path, out: Path) -> None:
    """Start train.py, SIGKILL it once it has taken 2 steps of epoch 2 (epoch 1's resume file is saved)."""
    args = [sys.executable, str(REPO / "scripts" / "train.py"), *tiny_overrides(data, out, **SETTINGS)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=script_env())
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("epoch 2/3 step 2/"):
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(lines)


def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(tmp_path: Path):
    data = make_folder(tmp_path / "data", per_class=11)  # 33 images: 8 batches of 4, one image dropped
    reference = train(tiny_config(data, tmp_path / "ref", **SETTINGS))  # one thread, as the subprocess (conftest)
    _kill_mid_epoch_2(data, tmp_path / "run")
    assert load_resume(tmp_path / "run" / "resume.pt")["epoch"] == 1  # killed inside epoch 2
    resumed = train(tiny_config(data, tmp_path / "run", **SETTINGS), resume=True)
    expected, got = read_state_dict(reference / "last.safetensors"), read_state_dict(resumed / "last.safetensors")
    assert expected.keys() == got.keys()
    worst = max((expected[k].float() - got[k].float()).abs().max().item() for k in expected)
    assert worst <= 1e-6
    first_epoch = read_state_dict(tmp_path / "run" / "last.safetensors")  # sanity: training changed the weights
    ref_resume, run_resume = load_resume(reference / "resume.pt"), load_resume(resumed / "resume.pt")
    assert ref_resume["step"] == run_resume["step"] == 24
    assert [r["train_loss"] for r in ref_resume["history"]] == [r["train_loss"] for r in run_resume["history"]]
    assert first_epoch.keys() == expected.keys()
