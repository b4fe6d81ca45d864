"""export_onnx.py --features on a segmentation run's weights recorded (and checked at) the pico classifier's size
(preprocessing.input_size [3, 32, 32]), not the run's crop; without --out-norm it exported the levels without the
run's trained per-level norms, silently: features its UperNet head never sees. It now records and checks at the
crop, and by default exports what the segmenter's backbone gives, saying so on stderr (it was refused outright before
5b831ed, while --help sent it there)."""

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from scriptkit import load_script
from segkit import make_seg_folder, tiny_overrides

from swinlite import onnx_predict
from swinlite.io import read_metadata
from swinlite.segmentation.predictor import load_segmenter

CROP = [48, 40]  # (height, width): neither the run's 32 x 32 nor the pico classifier's size
# Two stages of the pico Swin, one block each (two levels, each through its trained norm; no auxiliary head, which
# needs a third level): the export traces and converts two blocks instead of the full pico's five.
TWO_STAGES = {"model.kwargs": "{depths: [1, 1], num_heads: [1, 2]}", "model.aux_weight": 0}


def _run_with_crop(tmp_path: Path) -> Path:
    """The weights file of a one-epoch run of four images whose recorded crop is :data:`CROP`."""
    data = make_seg_folder(tmp_path / "data", count=4)
    (tmp_path / "defaults.yaml").write_text("{}\n")
    argv = ["--config", str(tmp_path / "defaults.yaml"), *tiny_overrides(data, tmp_path / "run", **TWO_STAGES)]
    assert load_script("train_segmentation").main(argv) == 0
    with safe_open(str(tmp_path / "run" / "best.safetensors"), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    meta["preprocessing"] = json.dumps(json.loads(meta["preprocessing"]) | {"crop_size": CROP})
    save_file(tensors, str(tmp_path / "cropped.safetensors"), metadata=meta)
    return tmp_path / "cropped.safetensors"


def test_features_of_a_segmentation_checkpoint_are_at_its_crop_through_its_norms(tmp_path, capsys):
    checkpoint, path = _run_with_crop(tmp_path), tmp_path / "levels.onnx"
    capsys.readouterr()  # the run's output
    crop = read_metadata(checkpoint)["preprocessing"]["crop_size"]
    assert crop == CROP
    argv = ["--checkpoint", str(checkpoint), "--features", "--fixed-size", "--output", str(path)]  # at the crop
    assert load_script("export_onnx").main(argv) < 1e-4
    out, err = capsys.readouterr()
    assert "note: --features of a segmentation checkpoint: its backbone's levels through the run's trained" in err
    checks = [line for line in out.splitlines() if line.startswith("ONNX Runtime vs PyTorch")]
    assert f"at batch 3, {crop[0]}x{crop[1]}:" in checks[0], checks
    recorded, meta = onnx_predict.open_model(path).metadata, read_metadata(checkpoint)
    assert recorded["preprocessing"]["input_size"] == [3, *crop]
    assert recorded["task"] == "features" and recorded["model"] == meta["segmenter"]["name"]
    assert [recorded["preprocessing"][k] for k in ("mean", "std")] == [
        meta["preprocessing"][k] for k in ("mean", "std")
    ]
    assert set(recorded["preprocessing"]) == {"input_size", "mean", "std"}  # not timm's bicubic crop: the segmenter's
    images = torch.randn(2, 3, *crop)
    with torch.no_grad():
        body = load_segmenter(checkpoint, "cpu")[0].backbone(images)  # the levels the UperNet head reads
    levels = ort.InferenceSession(str(path)).run(None, {"images": images.numpy()})
    for ours, theirs in zip(levels, body, strict=True):
        np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-4)
