"""Resume is bit-equal in every task: a run SIGKILLed mid-epoch, or resumed from a step checkpoint inside an epoch,
ends with the weights (and losses) of the run that was never interrupted."""

import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
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

# Per task: the tiny data (classification: 7 images per class), the settings (drop path, crops or sizes, flips, mixup
# and EMA all draw from the RNGs; a step checkpoint every step or two), the step checkpoints the run saves, the last's
# (epoch, batch, epochs done), the steps of the whole run.
DATA = {
    "classification": lambda root: make_folder(root / "data", per_class=7),  # 21 images: 5 batches of 4, one dropped
    "detection": lambda root: make_quirky_coco(root / "coco"),  # 5 usable images: 3 batches of 2 per epoch
    "segmentation": lambda root: make_seg_folder(root / "seg"),  # 6 training images: 3 batches of 2 per epoch
}
STEPS = {
    "classification": ({"train.epochs": 2, "data.batch_size": 4, "train.save_every_steps": 2, "data.mixup": 0.4,
                        "model.kwargs.drop_path_rate": 0.1, "train.ema_decay": 0.8, "train.log_interval": 1},
                       [2, 4, 6, 8], (1, 3, 1), 10),
    "detection": ({"train.epochs": 2, "train.max_iters": 2, "train.deterministic": True,
                   "model.kwargs.drop_path_rate": 0.1, "data.hflip": 0.5, "train.save_every_steps": 1,
                   "train.ema_decay": 0.8},
                  [1, 3], (1, 1, 1), 4),  # epochs of 2 of the 3 batches: steps 2 and 4 end an epoch
    "segmentation": ({"train.epochs": 2, "train.max_iters": 2, "train.deterministic": True,
                      "model.kwargs.drop_path_rate": 0.1, "data.hflip": 0.5, "train.save_every_steps": 1,
                      "train.ema_decay": 0.8},
                     [1, 3], (1, 1, 1), 4),  # epochs of 2 of the 3 batches: steps 2 and 4 end an epoch
}  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Callable[[str], tuple[Path, Path, list[Path]]]:
    """``reference(task)``: (data, the folder of the run never interrupted, copies of its step checkpoints), trained
    with the task's STEPS settings on first use (inside a test: one thread); both tests only read them."""
    built: dict[str, tuple[Path, Path, list[Path]]] = {}

    def get(task: str) -> tuple[Path, Path, list[Path]]:
        if task not in built:
            root = tmp_path_factory.mktemp(task)
            data = DATA[task](root)
            with pytest.MonkeyPatch.context() as patch:
                saves = keep_step_checkpoints(patch, root)
                built[task] = data, run(TASKS[task], tiny_config(task, data, root / "ref", **STEPS[task][0])), saves
        return built[task]

    return get


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


def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(reference, tmp_path: Path):
    """A script SIGKILLed in epoch 2 (its resume file the one of epoch 1's end), resumed: the weights, steps and
    losses of the run never interrupted. One task: the resume of each task's RNGs, sampler and EMA from inside an
    epoch, harder than from its start, is test_resume_from_step_checkpoint_matches_uninterrupted's, in every task."""
    task = "classification"
    data, expected_run, _ = reference(task)
    settings = STEPS[task][0] | {"train.save_every_steps": 0}  # no step checkpoint: the epoch's end is resumed
    script = [sys.executable, str(SCRIPTS / f"{SCRIPT[task]}.py"), "--config", str(script_config(task, tmp_path))]
    _kill_after("epoch 2/2 step 2/", script + overrides(task, data, tmp_path / "run", **settings))
    assert load_resume(tmp_path / "run" / "resume.pt")["epoch"] == 1  # killed inside epoch 2
    resumed = run(TASKS[task], tiny_config(task, data, tmp_path / "run", **settings), resume=True)
    for name in ("last.safetensors", "ema.safetensors"):
        expected, got = read_state_dict(expected_run / name), read_state_dict(resumed / name)
        assert expected.keys() == got.keys()
        assert max((expected[k].float() - got[k].float()).abs().max().item() for k in expected) <= 1e-6, name
    ref_state, run_state = load_resume(expected_run / "resume.pt"), load_resume(resumed / "resume.pt")
    assert ref_state["step"] == run_state["step"] == STEPS[task][3]
    assert [r["train_loss"] for r in ref_state["history"]] == [r["train_loss"] for r in run_state["history"]]


@pytest.mark.parametrize("task", list(TASKS))
def test_resume_from_step_checkpoint_matches_uninterrupted(task: str, reference, tmp_path: Path, capsys):
    settings, saved, position, steps = STEPS[task]
    data, expected_run, saves = reference(task)
    assert [load_resume(p)["step"] for p in saves] == saved
    mid_epoch_2 = load_resume(saves[-1])
    assert (mid_epoch_2["epoch"], mid_epoch_2["batch"], len(mid_epoch_2["history"])) == position
    out = tmp_path / "run"  # the folder as a run killed after that step leaves it
    out.mkdir()
    shutil.copy(expected_run / "config.yaml", out / "config.yaml")
    shutil.copy(saves[-1], out / "resume.pt")
    workers = {"data.num_workers": 2}  # resumed with loader workers: each sample's augmentation is seeded by itself
    capsys.readouterr()
    resumed = run(TASKS[task], tiny_config(task, data, out, **settings, **workers), resume=True)
    epoch, batch, _ = position  # numbered as the log numbers them ("epoch 1" and the global step 8 before)
    assert f"resumed from {out / 'resume.pt'} in epoch {epoch + 1}/2, after step {batch}/{steps // 2}\n" in (
        capsys.readouterr().out
    )
    for name in ("last.safetensors", "ema.safetensors"):
        expected, got = read_state_dict(expected_run / name), read_state_dict(resumed / name)
        assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected), name
    ref_state, run_state = load_resume(expected_run / "resume.pt"), load_resume(resumed / "resume.pt")
    assert ref_state["step"] == run_state["step"] == steps
    assert ref_state["history"][1]["train_loss"] == run_state["history"][1]["train_loss"]  # the epoch's loss, whole
    at_first_save, last = load_resume(saves[0])["model"], read_state_dict(expected_run / "last.safetensors")
    assert not all(torch.equal(at_first_save[k], last[k]) for k in last)  # sanity: training moved the weights
