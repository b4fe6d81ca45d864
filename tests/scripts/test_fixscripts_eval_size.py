"""evaluate.py --img-size on a raw checkpoint had no size guard: --img-size 5000 built batches of 64 images of
5000x5000 and swapped for minutes. A batch whose first stage would take more than 4 GiB is refused before any batch
runs, naming the size, the batch and the limit."""

from pathlib import Path

import pytest
import timm
import torch
from pico import PICO
from scriptkit import run_script
from trainkit import make_folder

from swinlite.classification import evaluation
from swinlite.inference import batch_too_large


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    torch.save(timm.create_model(PICO, num_classes=3).state_dict(), tmp_path / "raw.pth")
    return tmp_path / "raw.pth"


def _never(*args, **kwargs):
    raise AssertionError("the evaluation ran")


def test_a_huge_img_size_is_refused_before_any_batch(raw, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(evaluation, "run_evaluation", _never)
    data = make_folder(tmp_path / "data", per_class=1)
    argv = ["--checkpoint", raw, "--model", PICO, "--data-dir", data, "--img-size", "5000", "--num-workers", "0"]
    assert run_script("evaluate", [*argv, "--output-dir", tmp_path / "out"]) == 2
    error = capsys.readouterr().err
    assert "--img-size 5000: a batch of 64 images of 5000x5000 would hold" in error
    assert "more than the 4 GiB a batch may take: lower --img-size or --batch-size" in error
    assert not (tmp_path / "out").exists()


def test_a_small_batch_of_a_large_size_is_fine():
    model = timm.create_model(PICO, num_classes=3)
    assert batch_too_large(model, 64, 5000) is not None
    assert batch_too_large(model, 1, 512) is None and batch_too_large(model, 64, 224) is None
