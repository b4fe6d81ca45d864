"""Fixtures for the classification tests."""

from pathlib import Path

import pytest
from single_thread import one_thread  # noqa: F401 (an autouse fixture)
from trainkit import make_folder


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return make_folder(tmp_path / "data")
