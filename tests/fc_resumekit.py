"""A detection or segmentation run's resume state (RUN/resume.pt) given to a classifier's script as its weights file:
refused at once with one line naming the run's weights files (read with --model it went through the classifier path:
an ONNX file, predictions, features or drawings of the raw levels at the classifier's size, with the model's default
mean and std), before --ema looks for EMA weights beside it. Shared by tests/detection/test_fc_det_resume_scripts.py and
tests/segmentation/test_fc_seg_resume_scripts.py, each over its session's trained run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scriptkit import run_script

PICO = "swinlite_pico_patch2_window4_32"

CASES = [
    pytest.param("export_onnx", ["--model", PICO, "--output", "{out}/model.onnx"], id="export_onnx"),
    pytest.param("export_onnx", ["--features", "--model", PICO, "--output", "{out}/f.onnx"], id="export_onnx-features"),
    pytest.param("export_onnx", ["--output", "{out}/model.onnx"], id="export_onnx-no-model"),
    pytest.param("export_onnx", ["--ema", "--model", PICO, "--output", "{out}/model.onnx"], id="export_onnx-ema"),
    pytest.param("predict", ["--model", PICO, "--output", "{out}/p.csv", "{image}"], id="predict"),
    pytest.param("predict", ["--ema", "--model", PICO, "--output", "{out}/p.csv", "{image}"], id="predict-ema"),
    pytest.param("evaluate", ["--model", PICO, "--data-dir", "{data}", "--output-dir", "{out}"], id="evaluate"),
    pytest.param(
        "evaluate", ["--ema", "--model", PICO, "--data-dir", "{data}", "--output-dir", "{out}"], id="evaluate-ema"
    ),  # fmt: skip
    pytest.param("extract_features", ["--input", "{image}", "--no-progress", "--output", "{out}"], id="extract"),
    pytest.param("extract_features", ["--model", PICO, "--input", "{image}", "--output", "{out}"], id="extract-model"),
    pytest.param("visualize", ["--image", "{image}", "--output", "{out}"], id="visualize"),
    pytest.param("visualize", ["--model", PICO, "--image", "{image}", "--output", "{out}"], id="visualize-model"),
]


def check_resume_refused(run: Path, image: Path, task: str, tmp_path: Path, capsys, script: str, options: list[str]):
    """``script --checkpoint RUN/resume.pt OPTIONS`` exits 2 with one error line naming the run's weights files, and
    writes nothing (neither its output nor, for evaluate.py, anything in the run's folder)."""
    data = tmp_path / "data"
    (data / "val" / "a").mkdir(parents=True)  # an ImageFolder split for evaluate.py, whose data is checked first
    shutil.copy(image, data / "val" / "a" / image.name)
    out = tmp_path / "out"
    argv = ["--checkpoint", run / "resume.pt"] + [o.format(out=out, image=image, data=data) for o in options]
    before = sorted(run.iterdir())
    assert run_script(script, argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    expected = (
        f"error: {run / 'resume.pt'} is a {task} run's resume state, not its weights (which record its model and "
        f"preprocessing): give the run's weights, {run / 'best.safetensors'} or {run / 'last.safetensors'}"
    )
    assert errors == [expected], err
    assert "out_norm=True" not in err and "resume_ema.safetensors" not in err
    assert not out.exists() and sorted(run.iterdir()) == before
