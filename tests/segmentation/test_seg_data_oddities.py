"""Oddities of hand-made label-map folders that the scan once took without a word."""

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from swinlite.segmentation.config import SegDataConfig
from swinlite.segmentation.data import Labels, Split, find_pairs, labels_of, scan_split, warn_unlearned, warn_unmeasured


def test_two_images_of_one_name_are_an_error_naming_both(seg_folder: Path):
    """00.jpg beside 00.png were both paired with the one mask 00.png: 7 train pairs for 6 pictures, and val scored
    that mask twice."""
    images, masks = seg_folder / "images" / "validation", seg_folder / "annotations" / "validation"
    Image.open(images / "00.png").convert("RGB").save(images / "00.jpg")
    both = r"00\.(png|jpg) and .*00\.(jpg|png)"
    with pytest.raises(ValueError, match=rf"two images for one name in .*validation: .*{both}"):
        find_pairs(images, masks)


def test_one_image_per_name_is_paired_once(seg_folder: Path):
    images, masks = seg_folder / "images" / "training", seg_folder / "annotations" / "training"
    pairs, missing = find_pairs(images, masks)
    assert sorted(p.image.name for p in pairs) == [f"{n:02d}.png" for n in range(6)] and not missing


LABELS = labels_of(SegDataConfig(dataset="folder", classes=["background", "road", "car"]))


def _split_of_labels(root: Path, values: list[int], labels: Labels = LABELS) -> Split:
    """A scanned split of 4x4 pairs, one per value of ``values``, each mask that value (and a row of 255, ignored)."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for n, value in enumerate(values):
        Image.new("RGB", (4, 4)).save(root / "images" / f"{n}.png")
        mask = np.full((4, 4), value, np.uint8)
        mask[0] = 255
        Image.fromarray(mask).save(root / "masks" / f"{n}.png")
    return scan_split(root / "images", root / "masks", labels)


REDUCED = labels_of(SegDataConfig(dataset="folder", classes=["road", "car", "bus"], reduce_zero_label=True))


@pytest.mark.parametrize(
    ("labels", "values", "absent", "warn"),
    [
        (LABELS, [0, 1], "2: car; the model never learns them", warn_unlearned),
        (REDUCED, [0, 1, 2], "2: bus; the model never learns them", warn_unlearned),  # 0 ignored
        (
            LABELS,
            [0, 2],
            "1: road; no IoU is measured for them: a pixel predicted as one gives it IoU 0 in the mIoU",
            lambda split, *args: warn_unmeasured(split, "val", *args),
        ),
    ],
    ids=["train", "train-reduce_zero_label", "val"],
)
def test_a_class_without_a_pixel_is_named(
    tmp_path: Path, labels: Labels, values: list[int], absent: str, warn: Callable
):
    """A class in no train mask was never learnt, one in no val mask never scored (its IoU 0 in the mIoU when
    predicted), without a word."""
    split = _split_of_labels(tmp_path, values, labels)
    with pytest.warns(
        UserWarning, match=rf"no \w+ mask \(.*masks\) holds a pixel of 1 of the 3 classes \(id: name\): {absent}"
    ):
        warn(split, tmp_path / "masks", labels)


def test_no_class_warning_when_every_class_has_a_pixel(tmp_path: Path):
    split = _split_of_labels(tmp_path, [0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_unlearned(split, tmp_path / "masks", LABELS)
        warn_unmeasured(split, "val", tmp_path / "masks", LABELS)


def test_absent_classes_past_ten_are_counted(tmp_path: Path):
    many = labels_of(SegDataConfig(dataset="folder", classes=[f"c{i}" for i in range(14)]))
    split = _split_of_labels(tmp_path, [0, 1], many)
    with pytest.warns(
        UserWarning, match=r"12 of the 14 classes \(id: name\): 2: c2; 3: c3; .* 11: c11; and 2 more; the"
    ):
        warn_unlearned(split, tmp_path / "masks", many)
