"""The scan cache (scan.json.gz) kept each image's path as scanned, relative to the working directory of the run that
wrote it: ``--resume`` from another directory (the data folder named absolute) took the cache as valid and skipped
every image, not found. It keeps them relative to the data folder now."""

import os
from pathlib import Path

import pytest
from trainkit import make_folder

from swinlite.classification.config import DataConfig
from swinlite.classification.scan_cache import cached_scan


def test_the_cached_scan_finds_its_images_from_another_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """So does an image it skipped: its reason quoted its path as first scanned (PIL's "cannot identify image file
    'data/...'"), so the recheck read otherwise, and the scan was done again, "bad.png, which the scan skipped, reads
    otherwise"."""
    data = make_folder(tmp_path / "data")
    (data / "val" / "c1" / "bad.png").write_bytes(b"nope")
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match="skipping data/val/c1/bad.png: unreadable"):
        scanned, cached, _ = cached_scan(DataConfig(data_dir="data"), Path("out"))
    assert not cached
    monkeypatch.chdir(tmp_path / "elsewhere")
    bad = data / "val" / "c1" / "bad.png"
    reason = f"unreadable (UnidentifiedImageError: cannot identify image file {str(bad)!r})"  # as a scan now names it
    with pytest.warns(UserWarning) as record:
        (train, val), cached, note = cached_scan(DataConfig(data_dir=str(data)), tmp_path / "out")
    assert cached, note
    assert [str(w.message) for w in record] == [f"skipping {bad}: {reason}"] and val.skipped == [(str(bad), reason)]
    assert len(train.samples) == len(scanned[0].samples) and val.samples
    assert all(os.path.isfile(path) for path, _ in train.samples + val.samples)
