"""Segmentation's pairing and linked files: images and masks are paired by name, links included; a link into the
other split is skipped by training's scan and by evaluate_segmentation.py --data-dir's."""

import dataclasses
import json
import os
import re
import shutil
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from pico import PICO
from PIL import Image
from scriptkit import run_script

from swinlite.engine.checkpoint import save_weights
from swinlite.engine.distributed import DistInfo
from swinlite.segmentation.config import SegModelConfig
from swinlite.segmentation.data import find_pairs, labels_of
from swinlite.segmentation.inference import InferenceSettings
from swinlite.segmentation.models import build_upernet
from swinlite.segmentation.task import SegmentationTask


def test_one_mask_file_linked_under_several_names_serves_each_image(tmp_path: Path):
    """list_files without ``others`` lists every name: a mask shared through links (one empty mask for the images
    without objects) pairs with each image, and an image linked under a second name is a pair of its own."""
    images, masks = tmp_path / "images", tmp_path / "masks"
    for path in (images / "0.jpg", images / "1.jpg", masks / "0.png"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    os.symlink("0.png", masks / "1.png")
    os.symlink("0.png", masks / "2.png")
    os.symlink("0.jpg", images / "2.jpg")
    pairs, missing = find_pairs(images, masks)
    assert [(p.image.name, p.mask.name) for p in pairs] == [("0.jpg", "0.png"), ("1.jpg", "1.png"), ("2.jpg", "2.png")]
    assert missing == []


def _ade_folder(root: Path) -> Path:
    """ADE20K's layout with 8x8 images and masks: training 0 and 1, validation 2; every name used below has a mask,
    so a linked image that is listed pairs (the old scan kept it)."""
    for split, names in (("training", ("0", "1", "v", "w")), ("validation", ("2", "t"))):
        for folder in (root / "images" / split, root / "annotations" / split):
            folder.mkdir(parents=True)
        for name in names:
            if name.isdigit():
                Image.new("RGB", (8, 8)).save(root / "images" / split / f"{name}.png")
            if name != "w":
                Image.new("L", (8, 8)).save(root / "annotations" / split / f"{name}.png")
    (root / "annotations" / "training" / "more").mkdir()
    Image.new("L", (8, 8)).save(root / "annotations" / "training" / "more" / "2.png")
    return root


def test_a_link_into_the_other_split_is_skipped_naming_it(tmp_path: Path):
    """``images/training/`` holding a linked folder and a linked file into ``images/validation/`` trained on val
    images (and a val link into training scored training images), silently: each is skipped with a warning naming
    the link and its target. A training mask linked into the val masks is skipped too (the image has no mask)."""
    data = _ade_folder(tmp_path / "data")
    images, masks = data / "images", data / "annotations"
    os.symlink("../validation", images / "training" / "more")  # more/2.png: a val image
    os.symlink("../validation/2.png", images / "training" / "v.png")
    os.symlink("../training/0.png", images / "validation" / "t.png")
    Image.new("RGB", (8, 8)).save(images / "training" / "w.png")
    os.symlink("../validation/2.png", masks / "training" / "w.png")
    overrides = ["data.dataset=folder", "data.classes=[a,b]", f"data.data_dir={data}", f"train.output_dir={tmp_path}"]
    task = object.__new__(SegmentationTask)  # _scan reads the settings, the labels and the context only
    task.cfg = SegmentationTask.load_config(None, overrides)
    task.labels = labels_of(task.cfg.data)
    task.ctx = SimpleNamespace(dist=DistInfo(), log=lambda message: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train, val = task._scan()
    said = "\n".join(str(w.message) for w in caught)
    assert [p.image.name for p in train.pairs] == ["0.png", "1.png"]
    assert train.skipped == [(str(images / "training" / "w.png"), f"no mask w.png in {masks / 'training'}")]
    assert [p.image.name for p in val.pairs] == ["2.png"]
    for link, target in (
        (images / "training" / "more", images / "validation"),
        (images / "training" / "v.png", images / "validation" / "2.png"),
        (images / "validation" / "t.png", images / "training" / "0.png"),
        (masks / "training" / "w.png", masks / "validation" / "2.png"),
    ):
        assert f"{link} -> {target.resolve()}: the folder" in said


def test_evaluate_segmentation_data_dir_skips_a_link_into_the_other_split(tmp_path: Path):
    """evaluate_segmentation.py --data-dir scored training images linked into validation (t.png -> training's 0.png)
    as validation images: the script's own scan keeps the other split apart, the link skipped with a warning, and
    named in eval.json's ``skipped`` (left out of it before), as evaluate.py's."""
    data = _ade_folder(tmp_path / "data")
    os.symlink("../training/0.png", data / "images" / "validation" / "t.png")
    cfg = SegModelConfig(name=PICO, head_channels=8, aux_channels=8, pool_scales=(1, 2), pretrained=False)
    preprocessing = {"mean": [0.5] * 3, "std": [0.25] * 3, **InferenceSettings(img_scale=(32, 32)).to_dict()}
    meta = {"segmenter": dataclasses.asdict(cfg), "classes": ["x", "y"], "palette": [[0, 0, 0]] * 2,
            "ignore_index": 255, "reduce_zero_label": False, "preprocessing": preprocessing}  # fmt: skip
    save_weights(tmp_path / "best.safetensors", build_upernet(cfg, 2).state_dict(), {"task": "segmentation", **meta})
    argv = ["--checkpoint", tmp_path / "best.safetensors", "--data-dir", data, "--num-workers", "0", "--device", "cpu"]
    link, target = data / "images" / "validation" / "t.png", data / "images" / "training" / "0.png"
    with pytest.warns(UserWarning, match=re.escape(f"{link} -> {target.resolve()}: the folder")):
        assert run_script("evaluate_segmentation", argv) == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["images"] == 1  # 2.png alone
    why = f"the folder {(data / 'images' / 'training').resolve()}, listed apart"
    assert report["skipped"] == [{"path": str(link), "reason": f"linked file -> {target.resolve()}: {why}"}]


def test_a_split_folder_linked_to_the_other_is_refused(tmp_path: Path):
    """``images/validation`` and ``annotations/validation`` linked to the training folders paired and scored the
    training images as val's, without a word: image and mask folders that both share their files with the other
    split's are refused, naming them. One image folder with a mask folder per split (VOC) pairs as before."""
    data = _ade_folder(tmp_path / "data")
    for kind in ("images", "annotations"):
        shutil.rmtree(data / kind / "validation")
        (data / kind / "validation").symlink_to("training")
    images, masks = data / "images", data / "annotations"
    real = os.path.realpath(images / "training")
    with pytest.raises(ValueError, match=rf"^{images / 'validation'} and {masks / 'validation'} share their files "
                                         rf"with {images / 'training'} and .*\(real paths {real}, "):  # fmt: skip
        find_pairs(images / "validation", masks / "validation", apart=[images / "training", masks / "training"])
    (masks / "validation").unlink()
    shutil.copytree(masks / "training", masks / "validation")  # the images shared, a mask folder of its own
    pairs, _ = find_pairs(images / "validation", masks / "validation", apart=[images / "training", masks / "training"])
    assert len(pairs) == len(find_pairs(images / "training", masks / "training")[0])
