"""export_onnx.py --features without --out-norm on a detection run's weights exported the Swin's levels without the
run's trained per-level norms, silently: features the detector never sees (max difference 1.7-2.9 against its own
backbone.body). By default it now exports what the detector's backbone gives, the norms applied, and says so on
stderr; --no-out-norm asks for the raw levels. (Before 5b831ed, --features on these weights was refused outright,
while --help sent it there.)"""

import json
import warnings

import numpy as np
import pytest
import torch
from pico import PICO
from scriptkit import load_script

from swinlite import __version__, export
from swinlite.detection.predictor import load_detector
from swinlite.io import read_metadata

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

NOTE = "note: --features of a detection checkpoint: its backbone's levels through the run's trained per-level norms"


def _export(checkpoint, path, *flags: str) -> None:
    argv = ["--checkpoint", checkpoint, "--features", *flags, "--output", path, "--fixed-size", "--size", 40, 56]
    error = load_script("export_onnx").main([str(a) for a in argv])
    assert error is None if "--no-check" in flags else error < 1e-4


def test_features_of_a_detection_checkpoint_default_to_what_its_fpn_reads(trained, tmp_path, capsys, monkeypatch):
    """The exported program (what the ONNX conversion is given) and the metadata the file records, captured at the
    conversion (8 of 10 s here): the levels are the detector's backbone.body to 1e-4, its norms applied. The
    conversion of these ops is checked in ONNX Runtime elsewhere: a run's --features file (its norms) in
    segmentation/test_seg_features_crop.py, the levels' program against eager in test_export.py."""
    _, run = trained
    checkpoint = run / "best.safetensors"
    converted = []  # (program, metadata) of each export, the conversion replaced

    def convert(program, path, names, metadata, *args):
        converted.append((program, {k: json.loads(v) for k, v in metadata.items()}))
        path.write_bytes(b"onnx")

    monkeypatch.setattr(export, "export_onnx", convert)
    _export(checkpoint, tmp_path / "levels.onnx", "--no-check")
    assert NOTE in capsys.readouterr().err
    images = torch.randn(2, 3, 40, 56)
    with torch.no_grad():
        body = load_detector(checkpoint)[0].backbone.body(images)
        levels = converted[0][0].module()(images)
    assert len(levels) == len(body) == 4
    for ours, theirs in zip(levels, body, strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-4)
    recorded, meta = converted[0][1], read_metadata(checkpoint)
    assert (recorded["task"], recorded["model"], recorded["out_indices"]) == ("features", PICO, [0, 1, 2, 3])
    assert [recorded["preprocessing"][k] for k in ("mean", "std")] == [meta["data"]["mean"], meta["data"]["std"]]
    given = []  # --no-out-norm: the module the export is given (its export itself as the default's, above)
    monkeypatch.setattr(export, "export_program", lambda model, *args: given.append(model))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _export(checkpoint, tmp_path / "raw.onnx", "--no-out-norm", "--no-check")
    assert not [w for w in caught if "output norms" in str(w.message)]  # "dropping ...", as if they were lost
    assert NOTE not in capsys.readouterr().err
    with torch.no_grad():
        raw = given[0](images)
    assert max((r - t).abs().max() for r, t in zip(raw, body, strict=True)) > 1e-2
    # --features and --features --no-out-norm recorded the same metadata: whether the norms apply is recorded now
    assert (recorded["out_norm"], converted[1][1]["out_norm"]) == (True, False)
    assert (recorded["swinlite"], recorded["checkpoint_swinlite"]) == (__version__, meta["swinlite"])


def test_no_out_norm_is_refused_for_the_whole_detector(trained, tmp_path, capsys):
    _, run = trained
    argv = ["--checkpoint", str(run / "best.safetensors"), "--no-out-norm", "--output", str(tmp_path / "d.onnx")]
    with pytest.raises(SystemExit):  # as it is parsed, as for every export but --features
        load_script("export_onnx").main(argv)
    assert "--out-norm/--no-out-norm apply to --features exports" in capsys.readouterr().err
