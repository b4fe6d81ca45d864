"""``model.pretrained=RUN/resume.pt`` of a run trained with EMA: its raw weights load, in every task, with one
warning (as every script warns), and none on ``--resume``, which builds without ``model.pretrained``."""

import warnings
from pathlib import Path

import pytest
import timm
import torch
from enginekit import DATA_FIXTURE, TASKS, tiny_config

from swinlite.engine import run, trainer

PICO = "swinlite_pico_patch2_window4_32"
SAID = "is a run's resume state: its weights are the raw ones"


@pytest.fixture(autouse=True)
def no_curves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs draw no curves.png (a Matplotlib figure, ~0.3 s a run): what is checked are the warnings at load."""
    monkeypatch.setattr(trainer, "plot_curves", lambda *args: None)


def resume_file(path: Path, ema: bool) -> Path:
    """A run's resume.pt as far as its weights go: the model's, beside their EMA (trained with EMA) or None."""
    weights = timm.create_model(PICO).state_dict()
    torch.save({"model": weights, "ema": dict(weights) if ema else None, "epoch": 1}, path)
    return path


def warned(task: str, data: Path, out: Path, resume: bool = False, **settings: object) -> list[str]:
    """The resume-state warnings of a run of ``task`` (one epoch of one step: the warning comes before training), each
    time it was given."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # counts each time, not once per line
        cfg = tiny_config(task, data, out, **{"train.epochs": 1, "train.max_iters": 1, **settings})
        run(TASKS[task], cfg, resume=resume)
    return [str(w.message) for w in caught if SAID in str(w.message)]


@pytest.mark.parametrize("task", list(TASKS))
def test_a_resume_file_trained_with_ema_is_warned_of_once_in_every_task(task, tmp_path, request):
    data = request.getfixturevalue(DATA_FIXTURE[task])
    pretrained = resume_file(tmp_path / "resume.pt", ema=True)
    assert warned(task, data, tmp_path / "run", **{"model.pretrained": pretrained}) == [
        f"{pretrained} {SAID} (its 'model'), though it also holds their EMA (its 'ema'); for the EMA weights load the "
        "run's ema.safetensors (a script's --ema with the run's last.safetensors)"
    ]
    assert warned(task, data, tmp_path / "run", resume=True, **{"model.pretrained": pretrained}) == []


def test_a_resume_file_without_ema_loads_without_a_word(folder, tmp_path):
    pretrained = resume_file(tmp_path / "resume.pt", ema=False)
    assert warned("classification", folder, tmp_path / "run", **{"model.pretrained": pretrained}) == []
