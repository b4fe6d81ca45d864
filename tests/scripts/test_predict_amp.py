"""predict.py --amp, as evaluate.py's: bf16 autocast runs on the CPU and labels as fp32 does (probabilities within
bf16's rounding), the summary line names it, and it is refused where it cannot apply (--onnx, --compile, fp16 off
CUDA) before any work."""

import csv
from pathlib import Path

import pytest
import timm
import torch
from pico import PICO
from scriptkit import run_script
from trainkit import make_folder


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    torch.save(timm.create_model(PICO, num_classes=3).state_dict(), tmp_path / "raw.pth")
    return tmp_path / "raw.pth"


def _probs(path: Path) -> dict[str, dict[str, float]]:
    """Each image's probability of each class, from a CSV of --topk 3 (every class)."""
    rows = list(csv.reader(path.open(encoding="utf-8")))[1:]
    return {row[0]: {row[i]: float(row[i + 1]) for i in range(1, len(row), 2)} for row in rows}


def test_bf16_labels_as_fp32_and_is_named(raw, tmp_path, capsys):
    images = make_folder(tmp_path / "data", per_class=2, size=32, splits=("val",)) / "val"
    argv = ["--checkpoint", raw, "--model", PICO, "--topk", "3", "--device", "cpu", "--no-progress", images]
    assert run_script("predict", [*argv, "--output", tmp_path / "fp32.csv"]) == 0
    assert "--amp" not in capsys.readouterr().out
    assert run_script("predict", [*argv, "--output", tmp_path / "bf16.csv", "--amp", "bf16"]) == 0
    assert "images labelled (top-3, --amp bf16)" in capsys.readouterr().out
    full, half = _probs(tmp_path / "fp32.csv"), _probs(tmp_path / "bf16.csv")
    assert full.keys() == half.keys() and len(full) == 6
    for path, probs in full.items():
        assert half[path] == pytest.approx(probs, abs=0.02), path


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--compile"], "--compile runs the model in fp32; drop --amp"),
     (["--onnx", "x.onnx"], "--amp does not apply")],
)  # fmt: skip
def test_amp_is_refused_where_it_cannot_apply(tmp_path, capsys, extra, message):
    model = [] if "--onnx" in extra else ["--model", PICO]
    argv = [*model, *extra, "--amp", "bf16", "--output", tmp_path / "p.csv", tmp_path]
    assert run_script("predict", argv) == 2
    assert message in capsys.readouterr().err


def test_fp16_off_cuda_is_refused(raw, tmp_path, capsys):
    argv = ["--checkpoint", raw, "--model", PICO, "--device", "cpu", "--amp", "fp16", "--output", tmp_path / "p.csv"]
    assert run_script("predict", [*argv, tmp_path]) == 2
    assert "--amp fp16 needs CUDA; use --amp bf16 on cpu" in capsys.readouterr().err
    assert not (tmp_path / "p.csv").exists()
