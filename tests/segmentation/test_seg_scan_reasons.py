"""The reasons the segmentation scan gives for the pairs it skips: in the loader's words for an unreadable file, and
the image's upright size for a mask that does not fit it."""

import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from segkit import make_seg_folder, tiny_overrides

from swinlite.segmentation.config import SegDataConfig
from swinlite.segmentation.data import Split, labels_of, scan_split, split_folders, warn_mostly_ignored
from swinlite.segmentation.task import SegmentationTask


def _scan(data: Path, tmp_path: Path) -> Split:
    cfg = SegmentationTask.load_config(None, tiny_overrides(data, tmp_path / "run"))
    return scan_split(*split_folders(cfg.data, "train"), labels_of(cfg.data))


def test_an_unreadable_image_or_mask_is_named_in_the_loaders_words(tmp_path: Path):
    """The scan said "unreadable image (UnidentifiedImageError: ...)", the loader "unreadable (OSError: ...)"."""
    data = make_seg_folder(tmp_path / "data")
    images, masks = data / "images" / "training", data / "annotations" / "training"
    (images / "01.png").write_bytes(b"not a png")
    (masks / "02.png").write_bytes(b"not a png either")
    reasons = dict(_scan(data, tmp_path).skipped)
    assert reasons[str(images / "01.png")].startswith("unreadable (UnidentifiedImageError: cannot identify image")
    assert reasons[str(images / "02.png")].startswith(f"mask {masks / '02.png'}: unreadable (UnidentifiedImageError")


@pytest.mark.parametrize("suffix", [".jpg", ".tif"])
def test_a_mask_drawn_on_the_stored_orientation_names_the_upright_size(tmp_path: Path, suffix: str):
    """A photo stored 64x48 with EXIF orientation 6 (upright 48x64) and its mask drawn 64x48: "the image 48x64" read
    as a mistake, as anyone's Image.open(...).size gives 64x48 for both (a TIFF's, 48x64: it was paired with the mask,
    read on the turned image)."""
    data = make_seg_folder(tmp_path / "data")
    images, masks = data / "images" / "training", data / "annotations" / "training"
    exif = Image.Exif()
    exif[0x0112] = 6  # turned 90 degrees
    (images / "00.png").unlink()
    Image.new("RGB", (64, 48)).save(images / f"00{suffix}", exif=exif)
    Image.fromarray(np.zeros((48, 64), np.uint8), mode="L").save(masks / "00.png")
    Image.fromarray(np.zeros((20, 20), np.uint8), mode="L").save(masks / "01.png")  # an image stored upright
    reasons = dict(_scan(data, tmp_path).skipped)
    assert reasons[str(images / f"00{suffix}")] == (
        f"mask {masks / '00.png'} is 64x48, the image 48x64 after its EXIF orientation (masks are read against the "
        "upright image, as load_rgb gives it)"
    )
    assert reasons[str(images / "01.png")] == f"mask {masks / '01.png'} is 20x20, the image 48x40"


def test_masks_whose_pixels_are_mostly_ignored_are_warned(tmp_path: Path):
    """The user's own masks (0 their background, most of the pixels) trained as ADE20K's, which ignores 0: a run of
    150 classes that learnt no background, without a word. Read as their own classes, nothing to say."""
    data = make_seg_folder(tmp_path / "data")
    images, masks = split_folders(SegDataConfig(data_dir=str(data)), "train")
    own = labels_of(SegmentationTask.load_config(None, tiny_overrides(data, tmp_path / "run")).data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_mostly_ignored(scan_split(images, masks, own), "train", masks, own)
    ade20k = labels_of(SegDataConfig(dataset="ade20k", data_dir=str(data)))
    split = scan_split(images, masks, ade20k)
    pattern = (
        r"only \d+% of the train masks' pixels .* hold one of the 150 classes; the rest are ignore_index 255 and 0"
    )
    with pytest.warns(UserWarning, match=pattern):
        warn_mostly_ignored(split, "train", masks, ade20k)
