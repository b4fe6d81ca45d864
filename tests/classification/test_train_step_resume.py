"""A run resumed from a step checkpoint inside an epoch ends exactly where the uninterrupted run ends."""

import shutil
from pathlib import Path

import pytest
import torch
from trainkit import make_folder, tiny_config, train

from swinlite.engine import trainer
from swinlite.engine.checkpoint import load_resume
from swinlite.io import read_state_dict

# 2 epochs of 5 steps of 4 images; a step checkpoint every 2 steps; drop path, mixup, crops, flips and EMA all draw.
SETTINGS = {"train.epochs": 2, "data.batch_size": 4, "train.save_every_steps": 2, "model.kwargs.drop_path_rate": 0.1,
            "data.mixup": 0.4, "train.ema_decay": 0.8}  # fmt: skip


def test_resume_from_step_checkpoint_matches_uninterrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    data = make_folder(tmp_path / "data", per_class=7)  # 21 images: 5 batches of 4, one image dropped
    saves = []

    def keep_copy(path, state):  # the step checkpoints a kill could have left behind
        save_resume(path, state)
        if state["batch"]:
            saves.append(shutil.copy(path, tmp_path / f"step{state['step']}.pt"))

    save_resume = trainer.save_resume
    monkeypatch.setattr(trainer, "save_resume", keep_copy)
    reference = train(tiny_config(data, tmp_path / "ref", **SETTINGS))
    assert [load_resume(p)["step"] for p in saves] == [2, 4, 6, 8]  # step 10 ends epoch 2: an epoch checkpoint

    mid_epoch_2 = load_resume(saves[3])  # step 8: batch 3 of epoch 2
    assert (mid_epoch_2["epoch"], mid_epoch_2["batch"], len(mid_epoch_2["history"])) == (1, 3, 1)
    run = tmp_path / "run"  # the folder as a run killed after step 8 leaves it
    run.mkdir()
    shutil.copy(reference / "config.yaml", run / "config.yaml")
    shutil.copy(saves[3], run / "resume.pt")
    workers = {"data.num_workers": 2}  # resumed with loader workers: each image's augmentation is seeded by itself
    resumed = train(tiny_config(data, run, **SETTINGS, **workers), resume=True)

    for name in ("last.safetensors", "ema.safetensors"):
        expected, got = read_state_dict(reference / name), read_state_dict(resumed / name)
        assert expected.keys() == got.keys()
        assert all(torch.equal(expected[k], got[k]) for k in expected), name
    ref_state, run_state = load_resume(reference / "resume.pt"), load_resume(resumed / "resume.pt")
    assert ref_state["step"] == run_state["step"] == 10
    assert ref_state["history"][1]["train_loss"] == run_state["history"][1]["train_loss"]  # the epoch's loss, whole
    at_step_2, last = load_resume(saves[0])["model"], read_state_dict(reference / "last.safetensors")
    assert not all(torch.equal(at_step_2[k], last[k]) for k in last)  # sanity: training moved the weights
