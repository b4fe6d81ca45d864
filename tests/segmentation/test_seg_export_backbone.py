"""export_onnx.py --features --out-norm on a segmentation run's weights was refused ("not for a segmentation
checkpoint, which exports its whole segmenter") while --help sent it there: it exports the run's Swin levels through
its trained per-level norms, converted on load as convert_checkpoint.py converts the file."""

import numpy as np
import onnxruntime as ort
import torch
from scriptkit import load_script

from swinlite import onnx_predict
from swinlite.io import read_metadata
from swinlite.segmentation.predictor import load_segmenter


def test_features_of_a_segmentation_checkpoint_are_its_backbones_levels(trained, tmp_path):
    _, run = trained
    checkpoint, path = run / "best.safetensors", tmp_path / "levels.onnx"
    argv = ["--checkpoint", checkpoint, "--features", "--out-norm", "--output", path, "--fixed-size", "--size", 40, 56]
    assert load_script("export_onnx").main([str(a) for a in argv]) < 1e-4
    images = torch.randn(2, 3, 40, 56)
    with torch.no_grad():
        body = load_segmenter(checkpoint, "cpu")[0].backbone(images)  # the levels the UperNet head reads
    levels = ort.InferenceSession(str(path)).run(None, {"images": images.numpy()})
    for ours, theirs in zip(levels, body, strict=True):
        np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-4)
    recorded, meta = onnx_predict.open_model(path).metadata, read_metadata(checkpoint)
    assert recorded["task"] == "features" and recorded["model"] == meta["segmenter"]["name"]
    assert [recorded["preprocessing"][k] for k in ("mean", "std")] == [
        meta["preprocessing"][k] for k in ("mean", "std")
    ]
