"""data.verify_images means what it means in every task: true decodes every image once before training, false reads
each image's header only (detection's load_split and segmentation's scan_split do the same)."""

from pathlib import Path

import pytest
from trainkit import make_folder

from swinlite.classification.config import DataConfig
from swinlite.classification.data import build_datasets
from swinlite.detection.config import DetDataConfig
from swinlite.segmentation.config import SegDataConfig


def _damage(root: Path) -> tuple[Path, Path]:
    """(a file cut off behind its header, a file PIL cannot identify) in the training split."""
    cut, garbage = root / "train" / "c0" / "0.png", root / "train" / "c1" / "0.png"
    cut.write_bytes(cut.read_bytes()[:100])  # the header reads, the pixels do not
    garbage.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    return cut, garbage


def test_false_reads_every_header_and_true_decodes_every_image(tmp_path: Path):
    """Classification's true read headers only and its false read nothing (a file PIL cannot identify was trained
    on, to fail in a loader worker), where detection's and segmentation's true decoded every image and false read
    headers."""
    cut, garbage = _damage(make_folder(tmp_path / "data", per_class=4))
    with pytest.warns(UserWarning, match=f"skipping {garbage}: "):
        train, _, _, skipped = build_datasets(DataConfig(data_dir=str(tmp_path / "data"), verify_images=False))
    assert skipped == 1 and str(cut) in [path for path, _ in train.samples]  # the header reads: kept, found later
    with pytest.warns(UserWarning) as shown:
        train, _, _, skipped = build_datasets(DataConfig(data_dir=str(tmp_path / "data"), verify_images=True))
    messages = " ".join(str(w.message) for w in shown)
    assert skipped == 2 and f"skipping {cut}: " in messages and f"skipping {garbage}: " in messages
    assert str(cut) not in [path for path, _ in train.samples]


def test_every_task_reads_headers_by_default():
    """Classification's default reads headers, as before (its true, then), as the other tasks' default does."""
    assert DataConfig().verify_images is False
    assert DetDataConfig().verify_images is False and SegDataConfig().verify_images is False
