"""A RetinaNet's (or FCOS's, or any ``model.min_level: 1`` run's) weights gave every Swin level through the run's
per-level norms, level 0 through a norm its FPN never reads (frozen at weight 1, bias 0, never trained), while
``export_onnx.py --features``, ``extract_features.py`` and ``visualize.py`` said they give the levels "as its FPN
reads them". The detection task now records its ``min_level`` resolved, and a run's file gives the levels its FPN
reads, through its norms; a level it does not read is refused there, and any is given raw (``--no-out-norm``)."""

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from pico import PICO
from PIL import Image
from scriptkit import load_script

from swinlite import __version__, features_of_runs
from swinlite.detection.categories import Categories
from swinlite.detection.config import DetConfig, DetDataConfig, DetModelConfig
from swinlite.detection.predictor import load_detector
from swinlite.detection.task import DetectionTask
from swinlite.export import run_features
from swinlite.features import load_features
from swinlite.features_of_runs import hashed_run_levels, run_levels
from swinlite.io import read_metadata, save_safetensors

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _run_file(
    folder: Path, detector: str, min_level: int | None, out_norm: bool = True
) -> tuple[Path, torch.nn.Module]:
    """A detector's weights file as a run writes it (the task's metadata and the engine's keys), random weights;
    ``out_norm=False``: a run that trained no per-level norms."""
    kwargs = {} if out_norm else {"out_norm": False}
    model_cfg = DetModelConfig(name=PICO, detector=detector, fpn_channels=32, min_level=min_level, kwargs=kwargs)
    cfg = DetConfig(
        model=model_cfg, data=DetDataConfig(test_size=40, max_size=64, mean=[0.4, 0.45, 0.5], std=[0.2, 0.25, 0.3])
    )
    classes = ["square", "bar"]
    torch.manual_seed(0)
    model = DetectionTask.model_for(cfg, classes).eval()
    task = SimpleNamespace(cfg=cfg, categories=Categories([3, 7], classes))
    common = {"format": 1, "task": "detection", "weights": "raw", "swinlite": __version__, "epoch": 1, "val_map": 0.0}
    path = folder / f"{detector}.safetensors"
    save_safetensors(path, model.state_dict(), DetectionTask.weights_metadata(task) | common)
    return path, model


@pytest.mark.parametrize(
    ("detector", "min_level", "read"),
    [("retinanet", None, [1, 2, 3]), ("fasterrcnn", None, [0, 1, 2, 3]), ("fasterrcnn", 2, [2, 3])],
)
def test_a_run_file_gives_the_levels_its_fpn_reads(tmp_path, detector, min_level, read):
    path, model = _run_file(tmp_path, detector, min_level)
    assert read_metadata(path)["detector"]["min_level"] == read[0]  # resolved: the same detector rebuilt
    rebuilt = load_detector(path)[0]
    assert list(rebuilt.backbone.body.out_indices) == list(model.backbone.body.out_indices) == read
    extractor = run_features(path)
    assert extractor.out_indices == read
    images = torch.randn(2, 3, 40, 56)
    with torch.no_grad():
        ours, body = extractor(images), model.backbone.body(images)
    assert len(ours) == len(body) == len(read)
    for level, theirs in zip(ours, body, strict=True):
        np.testing.assert_allclose(level.numpy(), theirs.numpy(), atol=1e-5)
    assert run_features(path, False).out_indices == [0, 1, 2, 3]  # raw: every level, as timm's features_only
    levels = run_levels(path)
    assert levels.levels == read and ("stage1..stage3" in levels.name) == (read == [1, 2, 3])
    cfg = levels.model.pretrained_cfg  # extract_features.py and visualize.py normalise with it: the run's statistics
    assert (tuple(cfg["mean"]), tuple(cfg["std"])) == ((0.4, 0.45, 0.5), (0.2, 0.25, 0.3))


@pytest.mark.parametrize(
    ("out_norm", "raw_levels", "raw"), [(True, False, False), (True, True, True), (False, False, True)]
)
def test_the_pooled_vector_is_the_mean_of_the_last_level_as_given(tmp_path, out_norm, raw_levels, raw):
    """Through the run's norms or raw as the levels are (raw: the final norm left out), and named so: a run that
    trained no per-level norms (``kwargs: {out_norm: false}``) gives raw levels, with no note about norms."""
    path, _ = _run_file(tmp_path, "fasterrcnn", None, out_norm)
    levels = run_levels(path, raw_levels)
    assert levels.name.endswith("raw levels)" if raw else "per-level norms)") and (levels.note is None) == raw
    with torch.no_grad():  # as extract_features.py computes them
        final, maps = levels.model.forward_intermediates(torch.randn(2, 3, 40, 56), levels.levels)
        pooled = levels.model.forward_head(final, pre_logits=True)
    torch.testing.assert_close(pooled, maps[-1].mean(dim=(2, 3)))


def test_a_file_replaced_while_it_was_read_is_refused(tmp_path, monkeypatch):
    """The SHA-256 recorded beside the features would be of other weights than theirs."""
    path, _ = _run_file(tmp_path, "retinanet", None)
    read = features_of_runs.run_levels

    def read_then_saved_again(checkpoint, raw_levels=False):
        levels = read(checkpoint, raw_levels)
        shutil.copy(checkpoint, tmp_path / "saving")  # a training run replacing its best.safetensors
        os.replace(tmp_path / "saving", checkpoint)
        return levels

    monkeypatch.setattr(features_of_runs, "run_levels", read_then_saved_again)
    with pytest.raises(ValueError, match=r"retinanet.safetensors changed while it was read \(a training run"):
        hashed_run_levels(path)


def test_an_unread_level_is_refused_through_the_norms_and_given_raw(tmp_path):
    path, _ = _run_file(tmp_path, "retinanet", None)
    with pytest.raises(ValueError, match=r"^level 0 of a detection run's backbone through its per-level norms: its FPN "
                       r"reads levels 1, 2, 3, and level 0's norm was never trained; .* --no-out-norm"):  # fmt: skip
        run_features(path, None, [0, 2])
    assert run_features(path, None, [-1]).out_indices == [3]
    assert run_features(path, False, [0, 2]).out_indices == [0, 2]
    error = "^level 0 of a detection run's backbone"
    with pytest.raises(ValueError, match=error):  # as export_onnx.py --features --out-indices refuses it
        load_script("export_onnx").main(["--checkpoint", str(path), "--features", "--out-indices", "0", "1",
                                         "--output", str(tmp_path / "f.onnx")])  # fmt: skip
    assert not (tmp_path / "f.onnx").exists()


def test_a_file_that_does_not_record_its_levels_gives_every_level(tmp_path):
    """A file of an earlier version records ``min_level`` only where the run set it: every level, as before."""
    path, _ = _run_file(tmp_path, "retinanet", None)
    state, meta = load_detector(path)[0].state_dict(), read_metadata(path)
    meta["detector"]["min_level"] = None
    save_safetensors(path, state, meta)
    assert run_features(path).out_indices == [0, 1, 2, 3]
    assert run_levels(path).levels == [0, 1, 2, 3]


def test_extract_features_and_visualize_store_the_levels_its_fpn_reads(tmp_path, capsys):
    path, model = _run_file(tmp_path, "retinanet", None)
    image = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 44, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "feats"
    argv = ["--checkpoint", str(path), "--input", str(image), "--output", str(out), "--no-progress"]
    assert load_script("extract_features").main(argv) == 0
    saved = load_features(out / "features" / "photo.png.safetensors")
    assert list(saved.maps) == ["stage1", "stage2", "stage3"]
    swin = model.backbone.body.model
    assert saved.strides == tuple(swin.feature_info[i]["reduction"] for i in (1, 2, 3))
    assert saved.model == f"{PICO} (detection run's backbone, per-level norms, stage1..stage3)"
    assert load_script("extract_features").main(argv) == 0  # the file is whole: skipped
    assert "skipped (already whole) 1" in capsys.readouterr().out
    plots = load_script("visualize").main(["--checkpoint", str(path), "--image", str(image), "--output",
                                           str(tmp_path / "plots")])  # fmt: skip
    assert tmp_path / "plots" / "features.png" in plots
    with Image.open(tmp_path / "plots" / "features.png") as drawn:  # the input and three levels, 3 inches each
        assert drawn.width == pytest.approx(3 * 4 * 100, rel=0.05)
