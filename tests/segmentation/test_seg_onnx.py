"""A trained UperNet as one ONNX file for every image size (swinlite.segmentation.export through
scripts/export_onnx.py) and scripts/segment.py --onnx: PyTorch's scores and label maps, without torch."""

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnxkit import assert_checked_before_output, run_without_torch
from PIL import Image
from scriptkit import load_script
from segkit import make_seg_folder, tiny_overrides
from torchvision.transforms.v2.functional import pil_to_tensor

from swinlite import onnx_predict
from swinlite.files import list_images, load_rgb
from swinlite.segmentation.inference import predict_scores
from swinlite.segmentation.predictor import load_segmenter
from swinlite.segmentation.transforms import build_eval_transform

pytestmark = pytest.mark.slow

VIEWS = {  # scripts/segment.py's --mode, --ratios, --flip
    "whole": {},
    "slide": {"mode": "slide"},
    "scales_and_flips": {"ratios": (0.75, 1.5), "flip": True},
}

TWO_STAGES = {"model.kwargs": "{depths: [2, 1], num_heads: [1, 2]}", "model.aux_weight": 0}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(data root, checkpoint, ONNX file): one epoch with pyramid pooling to 1 bin (a mean over the map, kept as
    nn.AdaptiveAvgPool2d) and 6 bins (BinAverage2d, as 2 and 3 bins are traced: the export's check at 5x5 pools a
    map of 2x2 cells into more bins than cells, at 32x32 an 8x8 map into bins it does not divide; each pooling
    traced and converted costs over a second), exported by scripts/export_onnx.py. Two stages of the pico Swin
    (depths 2 and 1: a shifted block on several windows, a patch merging) and no auxiliary head (it needs a third
    level and is for training only): three blocks instead of five, traced and converted in about half the time."""
    root = tmp_path_factory.mktemp("seg_onnx")
    data = make_seg_folder(root / "data")
    (root / "defaults.yaml").write_text("{}\n")
    argv = [
        "--config",
        str(root / "defaults.yaml"),
        *tiny_overrides(data, root / "run", **{"model.pool_scales": "[1,6]", **TWO_STAGES}),
    ]
    assert load_script("train_segmentation").main(argv) == 0
    checkpoint, path = root / "run" / "best.safetensors", root / "seg.onnx"
    assert load_script("export_onnx").main(["--checkpoint", str(checkpoint), "--output", str(path)]) <= 1e-4
    return data, checkpoint, path


def test_the_file_records_what_segment_needs(exported):
    _, checkpoint, path = exported
    meta = {p.key: json.loads(p.value) for p in onnx.load(path, load_external_data=False).metadata_props}
    _, info = load_segmenter(checkpoint)
    assert meta["task"] == "segmentation" and meta["classes"] == list(info.labels.classes)
    assert meta["palette"] == [list(c) for c in info.labels.palette]
    assert meta["preprocessing"] == info.metadata["preprocessing"]
    assert meta["input_sizes"] == {"height": [5, 2048], "width": [5, 2048]}  # two stages: coarsest stride 4
    assert meta["smallest_size"] == 5  # what a --min-size goes down to: no segmenter export serves less


@pytest.mark.parametrize("views", VIEWS.values(), ids=VIEWS.keys())
def test_onnx_scores_equal_pytorch(exported, views):
    """ONNX Runtime with NumPy's rescaling, windows, flips and softmax against predict_scores, image by image."""
    data, checkpoint, path = exported
    model, info = load_segmenter(checkpoint)
    test = dataclasses.replace(info.test, **views)
    session = onnx_predict.open_model(path)
    settings = onnx_predict.segmenter_settings(
        session, views.get("mode"), views.get("ratios"), views.get("flip", False)
    )
    normalize = build_eval_transform(info.mean, info.std)
    for image_path in list_images([data / "images" / "validation"])[:3]:
        image = load_rgb(image_path)
        pixels = normalize(pil_to_tensor(image))[None]
        want = predict_scores(model, pixels, test)[0].numpy()
        got = onnx_predict.segment_scores(session, settings, image)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


def test_segment_onnx_writes_what_the_checkpoint_writes(exported, tmp_path):
    """scripts/segment.py --onnx in a process where torch cannot be imported: the same label maps, overlays and
    classes.csv as --checkpoint, byte for byte in pixels; an image too thin for any export is skipped and named (it
    stopped the run, with advice to export again with --min-size, which no segmenter export takes)."""
    data, checkpoint, path = exported
    folder = shutil.copytree(data / "images" / "validation", tmp_path / "in")
    Image.new("RGB", (600, 1)).save(folder / "thin.png")  # rescaled to 64x1: thinner than the patch and the file
    common = ["--input", str(folder), "--flip"]
    assert (
        load_script("segment").main(["--checkpoint", str(checkpoint), *common, "--output-dir", str(tmp_path / "pt")])
        == 0
    )
    result = run_without_torch("segment.py", "--onnx", str(path), *common, "--output-dir", str(tmp_path / "onnx"))
    assert result.returncode == 0, result.stderr
    thin = "a 1x600 (HxW) image would be rescaled to 1x64, thinner than seg.onnx takes (height from 5, width from 5; no"
    assert f"warning: skipped {folder / 'thin.png'}: {thin} segmenter export takes less): too thin" in result.stderr
    written = sorted(p.relative_to(tmp_path / "pt") for p in (tmp_path / "pt").rglob("*.png"))
    assert len(written) == 12 and written == sorted(
        p.relative_to(tmp_path / "onnx") for p in (tmp_path / "onnx").rglob("*.png")
    )
    for name in written:
        with Image.open(tmp_path / "pt" / name) as want, Image.open(tmp_path / "onnx" / name) as got:
            assert got.mode == want.mode and got.getpalette() == want.getpalette()
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for name in ("classes.csv", "sources.json"):
        assert (tmp_path / "onnx" / name).read_bytes() == (tmp_path / "pt" / name).read_bytes()


def test_segment_onnx_refuses_what_the_file_cannot_serve(exported, tmp_path):
    data, checkpoint, path = exported
    argv = ["--checkpoint", str(checkpoint), "--output", str(tmp_path / "x.onnx"), "--fixed-size", "--size", "32", "32"]
    with pytest.raises(ValueError, match="--size, --fixed-size: not for a segmentation checkpoint, which exports its"):
        load_script("export_onnx").main(argv)
    folder = tmp_path / "in"
    shutil.copytree(data / "images" / "validation", folder)
    result = run_without_torch("segment.py", "--onnx", str(path), "--input", str(folder), "--ratios", "64",
                               "--output-dir", str(tmp_path / "out"))  # fmt: skip
    assert result.returncode == 2
    assert "rescaled by the test settings, 2048x2458 (HxW) is outside the sizes seg.onnx was exported" in result.stderr
    assert not (tmp_path / "out").exists()  # refused before any work
    model = onnx.load(path)
    next(p for p in model.metadata_props if p.key == "task").value = json.dumps("classification")
    onnx.save(model, tmp_path / "classifier.onnx")
    result = run_without_torch("segment.py", "--onnx", str(tmp_path / "classifier.onnx"), "--input", str(folder),
                               "--output-dir", str(tmp_path / "out"))  # fmt: skip
    assert result.returncode == 2 and "is a classification model; export a segmentation checkpoint" in result.stderr
    pre = json.loads(next(p for p in model.metadata_props if p.key == "preprocessing").value)
    next(p for p in model.metadata_props if p.key == "preprocessing").value = json.dumps(pre | {"mode": "sliding"})
    next(p for p in model.metadata_props if p.key == "task").value = json.dumps("segmentation")
    onnx.save(model, tmp_path / "mangled.onnx")
    with pytest.raises(ValueError, match="test mode must be one of whole, slide, got 'sliding'"):
        onnx_predict.segmenter_settings(onnx_predict.open_model(tmp_path / "mangled.onnx"))
    gaps = pre | {"crop_size": [32, 32], "stride": [341, 341], "flip": True}  # a run's before the stride check
    next(p for p in model.metadata_props if p.key == "preprocessing").value = json.dumps(gaps)
    onnx.save(model, tmp_path / "gaps.onnx")
    onnx_predict.segmenter_settings(onnx_predict.open_model(tmp_path / "gaps.onnx"), mode="whole")  # whole: usable
    with pytest.raises(ValueError, match=r"slide mode: stride \[341, 341\] is longer than crop_size \[32, 32\]"):
        onnx_predict.segmenter_settings(onnx_predict.open_model(tmp_path / "gaps.onnx"), mode="slide")
    gaps = onnx_predict.open_model(tmp_path / "gaps.onnx")
    repaired = onnx_predict.segmenter_settings(gaps, "slide", stride=[16, 20])
    assert (repaired.mode, repaired.crop_size, repaired.stride) == ("slide", (32, 32), (16, 20))  # segment.py --stride
    assert repaired.flip and not onnx_predict.segmenter_settings(gaps, flip=False).flip  # --no-flip turns it off


def _stub_segmenter(monkeypatch, metadata: dict) -> None:
    """A segmenter whose checkpoint records ``metadata``, exported without a trace or a conversion: its file is
    b"new"."""
    from swinlite import export
    from swinlite.segmentation import export as seg_export

    model = torch.nn.Module()
    model.backbone = type("B", (), {"feature_info": type("F", (), {"reduction": lambda: [4, 8, 16, 32]})})
    labels = type("L", (), {"classes": ["a"], "palette": [(0, 0, 0)]})
    test = type("T", (), {"crop_size": (32, 32), "img_scale": (32, 32), "ratios": (1.0,)})
    info = type("I", (), {"test": test, "labels": labels,
                          "metadata": {"segmenter": {}, "preprocessing": {}, **metadata}})  # fmt: skip
    monkeypatch.setattr(seg_export, "load_segmenter", lambda checkpoint: (model, info))
    monkeypatch.setattr(export, "export_program", lambda *args: None)
    monkeypatch.setattr(export, "write_onnx", lambda program, path, *args: path.write_bytes(b"new"))


def test_a_segmenter_file_records_the_version_that_exported_it(tmp_path, monkeypatch):
    """It recorded as "swinlite" the version that trained its checkpoint (null where the checkpoint has none), a
    backbone's file the version that exported it: each records the exporting one, the checkpoint's as
    "checkpoint_swinlite"."""
    from swinlite import __version__, export
    from swinlite.segmentation import export as seg_export

    _stub_segmenter(monkeypatch, {"swinlite": "0.0.1"})
    written = []  # the metadata of the file written

    def write(program, path, names, metadata, *args):
        written.append(metadata)
        path.write_bytes(b"new")

    monkeypatch.setattr(export, "write_onnx", write)
    seg_export.export_segmenter(Path("seg.safetensors"), tmp_path / "s.onnx", (None, 64), check=False)
    meta = {k: json.loads(v) for k, v in written[0].items()}
    assert (meta["swinlite"], meta["checkpoint_swinlite"]) == (__version__, "0.0.1")


def test_a_segmenter_file_is_checked_before_it_becomes_the_output(tmp_path, monkeypatch):
    """export_segmenter wrote its file at the output and checked it there: a refused file took the place of a good
    earlier one (then was removed, the earlier one lost), and a kill during the check left it there unchecked. Now
    the check reads a hidden file beside the output while the output keeps its earlier file, and a refusal leaves it
    so. (The export and the check themselves: the exported fixture.)"""
    from swinlite import export
    from swinlite.segmentation import export as seg_export

    _stub_segmenter(monkeypatch, {})
    output = tmp_path / "s.onnx"
    assert_checked_before_output(
        output,
        lambda: seg_export.export_segmenter(Path("seg.safetensors"), output, (None, 64)),
        lambda check: monkeypatch.setattr(export, "check_onnx", check),
        "max abs error 0.1 is above --tolerance 0.0001",
    )
