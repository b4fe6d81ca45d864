"""Resume is bit-equal in every task: a run SIGKILLed mid-epoch, or resumed from a step checkpoint inside an epoch,
ends with the weights (and losses) of the run that was never interrupted."""

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from detkit import make_quirky_coco
from enginekit import SCRIPT, TASKS, keep_step_checkpoints, overrides, script_config, tiny_config
from scriptkit import SCRIPTS, script_env
from segkit import make_seg_folder
from trainkit import make_folder

from swinlite.engine import run
from swinlite.engine.checkpoint import load_resume
from swinlite.io import read_state_dict

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the COCO file's quirks warn; tests/detection checks

# Per task: the tiny data (classification: images per class), the settings (drop path, crops or sizes, flips and,
# for step checkpoints, mixup and EMA all draw from the RNGs), and what the run looks like.
DATA = {
    "classification": lambda root, per_class: make_folder(root / "data", per_class=per_class),
    "detection": lambda root, per_class: make_quirky_coco(root / "coco"),  # 5 usable images
    "segmentation": lambda root, per_class: make_seg_folder(root / "seg"),  # 6 training images
}
SIGKILL = {  # settings, images per class, the log line after which the run is killed, the steps of the whole run
    "classification": ({"train.epochs": 2, "data.batch_size": 4, "model.kwargs.drop_path_rate": 0.1,
                        "train.log_interval": 1}, 11, "epoch 2/2 step 2/", 16),  # 33 images: 8 batches, one dropped
    "detection": ({"train.epochs": 2, "train.deterministic": True, "model.kwargs.drop_path_rate": 0.1,
                   "data.hflip": 0.5}, 0, "epoch 2/2 step 1/", 6),  # 3 batches of 2 per epoch
    "segmentation": ({"train.epochs": 2, "train.deterministic": True, "model.kwargs.drop_path_rate": 0.1,
                      "data.hflip": 0.5}, 0, "epoch 2/2 step 1/", 6),  # 3 batches of 2 per epoch
}  # fmt: skip
STEPS = {  # settings, images per class, the step checkpoints saved, the 4th's (epoch, batch, epochs done), steps
    "classification": ({"train.epochs": 2, "data.batch_size": 4, "train.save_every_steps": 2, "data.mixup": 0.4,
                        "model.kwargs.drop_path_rate": 0.1, "train.ema_decay": 0.8},
                       7, [2, 4, 6, 8], (1, 3, 1), 10),  # 21 images: 5 batches of 4, one dropped
    "detection": ({"train.epochs": 2, "train.deterministic": True, "model.kwargs.drop_path_rate": 0.1,
                   "data.hflip": 0.5, "train.save_every_steps": 1, "train.ema_decay": 0.8},
                  0, [1, 2, 4, 5], (1, 2, 1), 6),  # steps 3 and 6 end an epoch
    "segmentation": ({"train.epochs": 2, "train.deterministic": True, "model.kwargs.drop_path_rate": 0.1,
                      "data.hflip": 0.5, "train.save_every_steps": 1, "train.ema_decay": 0.8},
                     0, [1, 2, 4, 5], (1, 2, 1), 6),  # steps 3 and 6 end an epoch
}  # fmt: skip


def _kill_after(line_start: str, argv: list[str]) -> None:
    """Run the script ``argv`` and SIGKILL it once it prints a line starting with ``line_start``."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=script_env())
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(line_start):
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, "".join(lines)


@pytest.mark.parametrize("task", list(TASKS))
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(task: str, tmp_path: Path):
    settings, per_class, kill_after, steps = SIGKILL[task]
    data = DATA[task](tmp_path, per_class)
    reference = run(TASKS[task], tiny_config(task, data, tmp_path / "ref", **settings))  # one thread, as the script
    script = [sys.executable, str(SCRIPTS / f"{SCRIPT[task]}.py"), "--config", str(script_config(task, tmp_path))]
    _kill_after(kill_after, script + overrides(task, data, tmp_path / "run", **settings))
    assert load_resume(tmp_path / "run" / "resume.pt")["epoch"] == 1  # killed inside epoch 2
    resumed = run(TASKS[task], tiny_config(task, data, tmp_path / "run", **settings), resume=True)
    expected, got = read_state_dict(reference / "last.safetensors"), read_state_dict(resumed / "last.safetensors")
    assert expected.keys() == got.keys()
    assert max((expected[k].float() - got[k].float()).abs().max().item() for k in expected) <= 1e-6
    ref_state, run_state = load_resume(reference / "resume.pt"), load_resume(resumed / "resume.pt")
    assert ref_state["step"] == run_state["step"] == steps
    assert [r["train_loss"] for r in ref_state["history"]] == [r["train_loss"] for r in run_state["history"]]


@pytest.mark.parametrize("task", list(TASKS))
def test_resume_from_step_checkpoint_matches_uninterrupted(task: str, tmp_path: Path, monkeypatch, capsys):
    settings, per_class, saved, position, steps = STEPS[task]
    data = DATA[task](tmp_path, per_class)
    saves = keep_step_checkpoints(monkeypatch, tmp_path)
    reference = run(TASKS[task], tiny_config(task, data, tmp_path / "ref", **settings))
    assert [load_resume(p)["step"] for p in saves] == saved
    mid_epoch_2 = load_resume(saves[3])
    assert (mid_epoch_2["epoch"], mid_epoch_2["batch"], len(mid_epoch_2["history"])) == position
    out = tmp_path / "run"  # the folder as a run killed after that step leaves it
    out.mkdir()
    shutil.copy(reference / "config.yaml", out / "config.yaml")
    shutil.copy(saves[3], out / "resume.pt")
    workers = {"data.num_workers": 2}  # resumed with loader workers: each sample's augmentation is seeded by itself
    resumed = run(TASKS[task], tiny_config(task, data, out, **settings, **workers), resume=True)
    epoch, batch, _ = position  # numbered as the log numbers them ("epoch 1" and the global step 8 before)
    assert f"resumed from {out / 'resume.pt'} in epoch {epoch + 1}/2, after step {batch}/{steps // 2}\n" in (
        capsys.readouterr().out
    )
    for name in ("last.safetensors", "ema.safetensors"):
        expected, got = read_state_dict(reference / name), read_state_dict(resumed / name)
        assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected), name
    ref_state, run_state = load_resume(reference / "resume.pt"), load_resume(resumed / "resume.pt")
    assert ref_state["step"] == run_state["step"] == steps
    assert ref_state["history"][1]["train_loss"] == run_state["history"][1]["train_loss"]  # the epoch's loss, whole
    at_first_save, last = load_resume(saves[0])["model"], read_state_dict(reference / "last.safetensors")
    assert not all(torch.equal(at_first_save[k], last[k]) for k in last)  # sanity: training moved the weights
