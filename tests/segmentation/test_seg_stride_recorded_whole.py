"""--stride without --mode, for a checkpoint or ONNX file that records test mode whole: refused as with --mode whole
(it was ignored without a word: each image predicted whole), by InferenceSettings.overridden and
onnx_predict.segmenter_settings, the places every script's test options pass through."""

from dataclasses import replace
from pathlib import Path

import pytest
from scriptkit import run_script

from swinlite import onnx_predict
from swinlite.segmentation.inference import InferenceSettings

WHOLE = InferenceSettings(img_scale=(48, 40), mode="whole", crop_size=(32, 32), stride=(21, 21))
REFUSED = r"^--stride is the windows' step of slide mode, and {} \(each image predicted whole\): drop --stride, or "


def test_overridden_refuses_a_stride_for_the_recorded_whole_mode():
    with pytest.raises(ValueError, match=REFUSED.format("the checkpoint records test mode whole")):
        WHOLE.overridden(None, None, None, (16, 16))
    with pytest.raises(ValueError, match=REFUSED.format("the test mode is whole")):
        WHOLE.overridden("whole", None, None, (16, 16))
    assert WHOLE.overridden("slide", None, None, (16, 16)).stride == (16, 16)
    slide = WHOLE.overridden("slide", None, None, None)
    assert slide.overridden(None, None, None, (8, 8)) == slide.overridden("slide", None, None, (8, 8))
    assert WHOLE.overridden(None, [0.5], True, None) == replace(WHOLE, ratios=(0.5,), flip=True)


def _onnx_model(mode: str) -> onnx_predict.OnnxModel:
    """A segmenter file's metadata, as segmenter_settings reads it before the session."""
    pre = {"mean": [0.5] * 3, "std": [0.2] * 3, "img_scale": [48, 40], "mode": mode, "crop_size": [32, 32],
           "stride": [21, 21], "ratios": [1.0], "flip": False}  # fmt: skip
    meta = {"task": "segmentation", "classes": ["a", "b"], "palette": [[0, 0, 0], [1, 1, 1]], "preprocessing": pre}
    return onnx_predict.OnnxModel(Path("seg.onnx"), None, meta, "images", 3, None)


def test_segmenter_settings_refuse_a_stride_for_the_files_whole_mode():
    with pytest.raises(ValueError, match=REFUSED.format("seg.onnx records test mode whole")):
        onnx_predict.segmenter_settings(_onnx_model("whole"), stride=[16, 16])
    with pytest.raises(ValueError, match=REFUSED.format("the test mode is whole")):
        onnx_predict.segmenter_settings(_onnx_model("slide"), "whole", stride=[16, 16])


@pytest.mark.parametrize("script", ["segment", "evaluate_segmentation"])
def test_the_scripts_refuse_stride_for_a_checkpoint_of_whole_mode(script: str, trained, tmp_path: Path, capsys):
    """The trained run's checkpoint records data.test_mode=whole (the default): one error line, nothing written."""
    data, run = trained
    out = tmp_path / "out"
    where = ["--input", data / "images" / "validation"] if script == "segment" else ["--data-dir", data]
    argv = ["--checkpoint", run / "best.safetensors", *where, "--output-dir", out, "--stride", "16", "16"]
    assert run_script(script, argv) == 2
    err = capsys.readouterr().err
    refused = "error: --stride is the windows' step of slide mode, and the checkpoint records test mode whole"
    assert err.startswith(refused)
    assert err.count("\n") == 1 and not out.exists()


def test_the_trained_checkpoint_records_whole_mode(trained):
    """What the test above stands on."""
    from swinlite.segmentation.predictor import load_segmenter

    assert load_segmenter(trained[1] / "best.safetensors", "cpu")[1].test.mode == "whole"
