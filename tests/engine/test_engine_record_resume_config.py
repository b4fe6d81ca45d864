"""The ``config.yaml`` a resumed run writes: the settings a resume ignores keep the values the run recorded, those it
changes are recorded as resumed."""

from pathlib import Path

import timm
import torch
from enginekit import tiny_config

import swinlite.io
from swinlite.classification import ClassificationTask
from swinlite.engine import run
from swinlite.engine.config import read_yaml

PICO = "swinlite_pico_patch2_window4_32"


def test_a_resume_without_model_pretrained_keeps_the_recorded_weights(folder, tmp_path, monkeypatch):
    """A run started from pretrained weights, resumed without repeating model.pretrained (its weights come from
    resume.pt): config.yaml recorded model.pretrained=false, losing which weights the run started from."""
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    swinlite.io.save_safetensors(tmp_path / "start.safetensors", timm.create_model(PICO).state_dict())
    out = tmp_path / "out"
    started = {"model.pretrained": "start.safetensors", "train.epochs": 1}  # relative: to the folder it was given in
    run(ClassificationTask, tiny_config("classification", folder, out, **started))
    monkeypatch.chdir(out)  # resumed from elsewhere: the recorded path still names the file
    run(ClassificationTask, tiny_config("classification", folder, out, **{"train.epochs": 2}), resume=True)
    recorded = read_yaml(out / "config.yaml")
    assert Path(recorded["model"]["pretrained"]).resolve() == (tmp_path / "start.safetensors").resolve()
    assert recorded["train"]["epochs"] == 2  # what the resume legitimately changed
