"""export_onnx.py on a detection (or segmentation) run's weights, the backbone alone: --features --out-norm was refused
("not for a detection checkpoint, which exports its whole detector") while --help sent it there; it exports the run's
Swin levels through its trained per-level norms, converted on load as convert_checkpoint.py converts the file. --fpn
recorded and checked the pico classifier's size brought into range (input_size [3, 33, 33]), not the detector's:
both record, trace and check at the detector's test size."""

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from pico import PICO
from scriptkit import load_script

from swinlite import onnx_predict
from swinlite.detection.predictor import load_detector
from swinlite.io import read_metadata

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _levels(path: Path, images: torch.Tensor) -> list[np.ndarray]:
    return ort.InferenceSession(str(path)).run(None, {"images": images.numpy()})


def test_fpn_is_recorded_and_checked_at_the_detectors_test_size(trained, tmp_path, capsys):
    """--fpn on a detection checkpoint: the FPN maps, checked against PyTorch (it was refused: the metadata was read
    as a classifier's), at the detector's test size, recorded as task fpn with the detector's backbone and
    normalization. --fixed-size: a third of the time of a range (test_export.py::test_fpn_maps_equal_eager exports
    one)."""
    _, run = trained
    checkpoint, path = run / "best.safetensors", tmp_path / "fpn.onnx"
    meta = read_metadata(checkpoint)
    test_size = meta["data"]["test_size"]
    argv = [
        "--checkpoint",
        str(checkpoint),
        "--fpn",
        "--fixed-size",
        "--output",
        str(path),
    ]  # fixed: quicker, same size
    assert load_script("export_onnx").main(argv) < 1e-4
    checks = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ONNX Runtime vs PyTorch")]
    assert f"at batch 3, {test_size}x{test_size}:" in checks[0], checks
    recorded = onnx_predict.open_model(path).metadata
    assert recorded["preprocessing"]["input_size"] == [3, test_size, test_size]
    assert (recorded["task"], recorded["model"], recorded["weights"]) == ("fpn", PICO, "raw")
    assert [recorded["preprocessing"][k] for k in ("mean", "std")] == [meta["data"]["mean"], meta["data"]["std"]]
    assert set(recorded["preprocessing"]) == {"input_size", "mean", "std"}  # not timm's bicubic crop: the detector's
    strides = load_detector(checkpoint)[0].backbone.strides
    assert [o.name for o in ort.InferenceSession(str(path)).get_outputs()] == [f"fpn{i}" for i in range(len(strides))]


def test_features_refuses_what_a_run_file_records(trained, tmp_path, capsys):
    _, run = trained
    argv = ["--checkpoint", str(run / "best.safetensors"), "--features", "--output", str(tmp_path / "f.onnx")]
    with pytest.raises(ValueError, match="^--model: not for --features of a detection checkpoint, which records its"):
        load_script("export_onnx").main([*argv, "--model", PICO])
    with pytest.raises(SystemExit):  # as it is parsed, as for every export but --features
        load_script("export_onnx").main(["--checkpoint", argv[1], "--out-norm", "--output", argv[-1]])
    assert "--out-norm/--no-out-norm apply to --features exports" in capsys.readouterr().err
    assert not (tmp_path / "f.onnx").exists()
