"""Oddities of hand-made label-map folders that the scan once took without a word."""

from pathlib import Path

import pytest
from PIL import Image

from swinlite.segmentation.data import find_pairs


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
