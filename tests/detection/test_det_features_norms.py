"""export_onnx.py --features without --out-norm on a detection run's weights exported the Swin's levels without the
run's trained per-level norms, silently: features the detector never sees (max difference 1.7-2.9 against its own
backbone.body). By default it now exports what the detector's backbone gives, the norms applied, and says so on
stderr; --no-out-norm asks for the raw levels. (Before 5b831ed, --features on these weights was refused outright,
while --help sent it there.)"""

import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch
from pico import PICO
from scriptkit import load_script

from swinlite import export, onnx_predict
from swinlite.detection.predictor import load_detector
from swinlite.io import read_metadata

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

NOTE = "note: --features of a detection checkpoint: its backbone's levels through the run's trained per-level norms"


def _export(checkpoint, path, *flags: str) -> None:
    argv = ["--checkpoint", checkpoint, "--features", *flags, "--output", path, "--fixed-size", "--size", 40, 56]
    error = load_script("export_onnx").main([str(a) for a in argv])
    assert error is None if "--no-check" in flags else error < 1e-4


def test_features_of_a_detection_checkpoint_default_to_what_its_fpn_reads(trained, tmp_path, capsys, monkeypatch):
    _, run = trained
    checkpoint, path = run / "best.safetensors", tmp_path / "levels.onnx"
    _export(checkpoint, path)
    assert NOTE in capsys.readouterr().err
    images = torch.randn(2, 3, 40, 56)
    with torch.no_grad():
        body = load_detector(checkpoint)[0].backbone.body(images)
    levels = ort.InferenceSession(str(path)).run(None, {"images": images.numpy()})
    for ours, theirs in zip(levels, body, strict=True):
        np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-4)
    recorded, meta = onnx_predict.open_model(path).metadata, read_metadata(checkpoint)
    assert (recorded["task"], recorded["model"], recorded["out_indices"]) == ("features", PICO, [0, 1, 2, 3])
    assert [recorded["preprocessing"][k] for k in ("mean", "std")] == [meta["data"]["mean"], meta["data"]["std"]]
    given = []  # --no-out-norm: the module the export is given (its export itself as the default's, above)
    monkeypatch.setattr(export, "export_program", lambda model, *args: given.append(model))
    monkeypatch.setattr(export, "export_onnx", lambda program, path, *args: path.write_bytes(b"onnx"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _export(checkpoint, tmp_path / "raw.onnx", "--no-out-norm", "--no-check")
    assert not [w for w in caught if "output norms" in str(w.message)]  # "dropping ...", as if they were lost
    assert NOTE not in capsys.readouterr().err
    with torch.no_grad():
        raw = given[0](images)
    assert max((r - t).abs().max() for r, t in zip(raw, body, strict=True)) > 1e-2


def test_no_out_norm_is_refused_for_the_whole_detector(trained, tmp_path, capsys):
    _, run = trained
    argv = ["--checkpoint", str(run / "best.safetensors"), "--no-out-norm", "--output", str(tmp_path / "d.onnx")]
    with pytest.raises(SystemExit):  # as it is parsed, as for every export but --features
        load_script("export_onnx").main(argv)
    assert "--out-norm/--no-out-norm apply to --features exports" in capsys.readouterr().err
