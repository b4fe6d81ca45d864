"""Fixtures for the detection tests."""

from pathlib import Path

import pytest
from detkit import make_quirky_coco
from single_thread import one_thread  # noqa: F401 (an autouse fixture)


@pytest.fixture
def coco(tmp_path: Path) -> Path:
    return make_quirky_coco(tmp_path / "coco")
