"""A detection run SIGKILLed mid-epoch and resumed ends with the same weights as one never interrupted."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from detkit import REPO, script_env, tiny_overrides

from swinlite.detection.task import DetectionTask
from swinlite.engine import run
from swinlite.engine.checkpoint import load_resume
from swinlite.io import read_state_dict

# 2 epochs of 3 steps (5 images, batch 2); drop path, multi-scale sizes and flips draw from the RNGs
SETTINGS = {"train.epochs": 2, "train.deterministic": True, "model.kwargs.drop_path_rate": 0.1, "data.hflip": 0.5}


@pytest.mark.filterwarnings("ignore::UserWarning")  # the file's quirks warn; test_data checks those warnings
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(coco: Path, tmp_path: Path):
    reference = run(DetectionTask, DetectionTask.load_config(None, tiny_overrides(coco, tmp_path / "ref", **SETTINGS)))
    (tmp_path / "defaults.yaml").write_text("{}\n")  # the built-in defaults, as the reference, not the demo's
    script = REPO / "scripts" / "train_detection.py"
    args = [sys.executable, str(script), "--config", str(tmp_path / "defaults.yaml")]
    args += tiny_overrides(coco, tmp_path / "run", **SETTINGS)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=script_env())
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
    assert load_resume(tmp_path / "run" / "resume.pt")["epoch"] == 1  # killed inside epoch 2
    resumed = run(
        DetectionTask, DetectionTask.load_config(None, tiny_overrides(coco, tmp_path / "run", **SETTINGS)), resume=True
    )
    expected, got = read_state_dict(reference / "last.safetensors"), read_state_dict(resumed / "last.safetensors")
    assert expected.keys() == got.keys()
    assert max((expected[k].float() - got[k].float()).abs().max().item() for k in expected) <= 1e-6
    ref_state, run_state = load_resume(reference / "resume.pt"), load_resume(resumed / "resume.pt")
    assert ref_state["step"] == run_state["step"] == 6
    assert [r["train_loss"] for r in ref_state["history"]] == [r["train_loss"] for r in run_state["history"]]
