"""train.compile said nothing of the compile, which takes its first step seconds to minutes: that step's time is
logged once, above the progress bar."""

import re
from pathlib import Path

import torch
from enginekit import tiny_config
from torch._dynamo.eval_frame import DisableContext, OptimizedModule
from trainkit import train


def test_the_first_compiled_steps_time_is_logged_once(folder: Path, tmp_path: Path, monkeypatch, capsys):
    # torch's own wrapper, dynamo disabled (as tests/detection/test_train_options.py): the engine's side is checked
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: OptimizedModule(model, DisableContext()))
    train(tiny_config("classification", folder, tmp_path / "out", **{"train.compile": True}))  # 2 epochs of 3 steps
    said = re.findall(r"train\.compile: the first step took \d+\.\d s \(torch\.compile compiled the model\)",
                      capsys.readouterr().out)  # fmt: skip
    assert len(said) == 1


def test_nothing_is_said_without_compile(folder: Path, tmp_path: Path, capsys):
    train(tiny_config("classification", folder, tmp_path / "out", **{"train.epochs": 1}))
    assert "train.compile" not in capsys.readouterr().out
