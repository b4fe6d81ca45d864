"""evaluate.py had no size guard: --img-size 5000 built batches of 64 images of 5000x5000 and swapped for minutes.
A batch whose first stage alone would need more than the device's memory is refused before any batch runs, naming
the size, the batch and the memory; the guard follows the device (a Swin-B batch of 256 at 384 px, timm's
validate.py default, runs on a GPU of 80 GiB) and holds for the file's own size as for --img-size."""

from pathlib import Path

import pytest
import timm
import torch
from pico import PICO
from scriptkit import run_script
from trainkit import make_folder

from swinlite.classification import evaluation
from swinlite.inference import batch_too_large

GiB = 2**30


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
    argv = ["--checkpoint", raw, "--model", PICO, "--data-dir", data, "--img-size", "9000", "--num-workers", "0"]
    assert run_script("evaluate", [*argv, "--output-dir", tmp_path / "out"]) == 2
    error = capsys.readouterr().err
    assert "--img-size 9000: a batch of 64 images of 9000x9000 needs at least" in error
    assert "more than the device's" in error and "lower the size or --batch-size" in error
    assert not (tmp_path / "out").exists()


def test_the_file_own_size_is_checked_too(raw, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(evaluation, "run_evaluation", _never)
    monkeypatch.setattr("swinlite.device.device_memory", lambda device: GiB // 1024)
    data = make_folder(tmp_path / "data", per_class=1)
    argv = ["--checkpoint", raw, "--model", PICO, "--data-dir", data, "--num-workers", "0"]
    assert run_script("evaluate", [*argv, "--output-dir", tmp_path / "out"]) == 2
    assert "the evaluated size 32: a batch of 64 images of 32x32 needs at least" in capsys.readouterr().err


def test_the_limit_is_the_device_memory():
    pico = timm.create_model(PICO, num_classes=3)
    assert batch_too_large(pico, 64, 9000, 24 * GiB) is not None
    assert batch_too_large(pico, 1, 512, 24 * GiB) is None and batch_too_large(pico, 64, 224, 24 * GiB) is None
    with torch.device("meta"):
        base = timm.create_model("swinlite_base_patch4_window12_384", num_classes=10)
    assert batch_too_large(base, 256, 384, 80 * GiB) is None  # timm validate.py's default batch, on an H100
    assert batch_too_large(base, 256, 384, 8 * GiB) is not None
    assert batch_too_large(base, 256, 384, 8 * GiB, element_size=2) is None  # --amp halves the activations
