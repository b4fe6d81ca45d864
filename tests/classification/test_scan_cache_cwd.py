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
    data = make_folder(tmp_path / "data")
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    scanned, cached, _ = cached_scan(DataConfig(data_dir="data"), Path("out"))
    assert not cached
    monkeypatch.chdir(tmp_path / "elsewhere")
    (train, val), cached, _ = cached_scan(DataConfig(data_dir=str(data)), tmp_path / "out")
    assert cached and len(train.samples) == len(scanned[0].samples) and val.samples
    assert all(os.path.isfile(path) for path, _ in train.samples + val.samples)
