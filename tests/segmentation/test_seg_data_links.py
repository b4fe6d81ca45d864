"""Segmentation's pairing and linked files: images and masks are paired by name, links included."""

import os
from pathlib import Path

from swinlite.segmentation.data import find_pairs


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
