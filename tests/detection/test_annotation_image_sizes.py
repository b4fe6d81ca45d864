"""An annotation file given with an image folder it was not made for (another split's or dataset's files of the same
names) is refused before anything is trained or scored: the images' sizes are not those the file records."""

import re
import warnings
from pathlib import Path

import pytest
from detkit import SIZE, edit_coco
from PIL import Image

from swinlite.detection.data import load_split
from swinlite.detection.demo_data import build_digit_scenes


def _resave(
    folder: Path, ids: list[int], size: tuple[int, int], exif: Image.Exif | None = None, suffix: str = ".png"
) -> None:
    for i in ids:
        Image.new("RGB", size).save(folder / f"{i:02d}{suffix}", exif=exif or Image.Exif())


def test_a_folder_of_images_of_other_sizes_is_refused_naming_the_file_folder_and_sizes(coco: Path):
    ann, folder = coco / "annotations" / "instances_val2017.json", coco / "val2017"
    _resave(folder, [1, 2, 3, 4], (40, 32))  # image 6's header still says 48x48, 5 is missing
    with pytest.raises(ValueError) as caught:
        load_split(ann, folder)
    message = str(caught.value)
    assert f"the annotation file {ann} and the image folder {folder} likely do not belong together" in message
    assert "4 of the 5 images found have a size the file does not record" in message
    assert f"1 ({folder / '01.png'}): the file is 32x40 (HxW) but its annotation says {SIZE}x{SIZE}" in message
    assert "1 the size it records" in message


def test_a_few_images_of_other_sizes_are_skipped_with_a_warning_not_refused(coco: Path):
    folder = coco / "val2017"
    _resave(folder, [1, 2], (40, 32))  # as many as the images of the recorded size (3, 4)
    with pytest.warns(UserWarning, match=re.escape(f"1 ({folder / '01.png'}): the file is 32x40 (HxW)")):
        split = load_split(coco / "annotations" / "instances_val2017.json", folder)
    assert split.image_ids == [3, 4, 6]


@pytest.mark.parametrize("suffix", [".png", ".tif"])
def test_images_turned_by_their_exif_orientation_are_not_taken_for_another_folders(coco: Path, suffix: str):
    """Stored at the recorded size, upright another: a file of these images, skipped one by one as before. (A TIFF,
    which Pillow opens at its upright size, was taken at the recorded size, its boxes read on the turned image.)"""
    folder, exif = coco / "val2017", Image.Exif()
    exif[0x0112] = 6  # turned 90 degrees: 48x40 as stored and recorded, 40x48 upright (as load_rgb reads it)
    _resave(folder, [1, 2, 3], (SIZE, SIZE - 8), exif, suffix)

    def record_as_stored(coco_file: dict) -> None:
        for image in coco_file["images"][:3]:
            image.update(height=SIZE - 8, file_name=f"{image['id']:02d}{suffix}")

    edit_coco(coco, "val", record_as_stored)
    _resave(folder, [4], (SIZE, SIZE - 8))  # not turned: 48x40 stored, 48x48 recorded, as many as 6 of 48x48
    with pytest.warns(UserWarning, match="after its EXIF orientation"):
        split = load_split(coco / "annotations" / "instances_val2017.json", folder)
    assert split.image_ids == [6]


def test_the_digit_demo_folders_belong_to_their_annotation_files(tmp_path: Path):
    root = build_digit_scenes(tmp_path / "digits", train_scenes=3, val_scenes=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for split in ("train", "val"):
            loaded = load_split(root / "annotations" / f"instances_{split}2017.json", root / f"{split}2017")
            assert len(loaded.image_ids) == {"train": 3, "val": 2}[split]


def test_another_splits_folder_of_images_alike_is_named_in_a_warning(tmp_path: Path):
    """The digits demo's train and val canvases share names and sizes: val's file with train's folder passes the
    size check, so the COCO split names, which differ, are said in a warning."""
    root = build_digit_scenes(tmp_path / "digits", train_scenes=3, val_scenes=2)
    ann, folder = root / "annotations" / "instances_val2017.json", root / "train2017"
    expected = f"the annotation file {ann} is named for the split val2017, the image folder {folder} for train2017"
    with pytest.warns(UserWarning, match=re.escape(expected)):
        assert load_split(ann, folder).image_ids == [1, 2]
