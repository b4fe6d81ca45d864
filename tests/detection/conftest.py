"""Fixtures for the detection tests."""

from pathlib import Path

import pytest
from detkit import make_quirky_coco, train
from single_thread import one_thread  # noqa: F401 (an autouse fixture)


@pytest.fixture
def coco(tmp_path: Path) -> Path:
    return make_quirky_coco(tmp_path / "coco")


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """(data root, run folder) of one Mask R-CNN epoch trained through scripts/train_detection.py (once per session;
    tests copy what they change)."""
    return train(tmp_path_factory.mktemp("det"), **{"model.detector": "maskrcnn"})
