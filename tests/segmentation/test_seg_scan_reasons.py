"""The reasons the segmentation scan gives for the pairs it skips: in the loader's words for an unreadable file."""

from pathlib import Path

from segkit import make_seg_folder, tiny_overrides

from swinlite.segmentation.data import Split, labels_of, scan_split, split_folders
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
