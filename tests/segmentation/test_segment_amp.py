"""segment.py --amp, as evaluate_segmentation.py's: bf16 autocast runs on the CPU and labels the pixels as fp32 does
(but for a few on the classes' borders, where bf16's rounding tips a near tie), and the summary line names it."""

from pathlib import Path

import numpy as np
from PIL import Image
from scriptkit import run_script


def test_bf16_segments_as_fp32_and_is_named(trained, tmp_path: Path, capsys):
    data, run = trained
    images = sorted((data / "images" / "validation").iterdir())[:3]
    argv = ["--checkpoint", run / "best.safetensors", "--device", "cpu", "--input", *images]
    assert run_script("segment", [*argv, "--output-dir", tmp_path / "fp32"]) == 0
    assert "--amp" not in capsys.readouterr().out
    assert run_script("segment", [*argv, "--output-dir", tmp_path / "bf16", "--amp", "bf16"]) == 0
    assert "3 images segmented (--amp bf16): " in capsys.readouterr().out
    for full in sorted((tmp_path / "fp32" / "labels").iterdir()):
        a, b = np.asarray(Image.open(full)), np.asarray(Image.open(tmp_path / "bf16" / "labels" / full.name))
        assert a.shape == b.shape and (a == b).mean() >= 0.95, full.name


def test_amp_does_not_apply_to_onnx(tmp_path, capsys):
    argv = ["--onnx", tmp_path / "x.onnx", "--amp", "bf16", "--input", tmp_path, "--output-dir", tmp_path / "out"]
    assert run_script("segment", argv) == 2
    assert "--onnx runs the exported file in ONNX Runtime on the CPU: --amp does not apply" in capsys.readouterr().err
