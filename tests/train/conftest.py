"""Fixtures for the training tests."""

import sys
from pathlib import Path

import pytest
from single_thread import one_thread  # noqa: F401 (an autouse fixture)
from trainkit import REPO, make_folder

sys.path.insert(0, str(REPO / "scripts"))  # the scripts import their shared _cli.py as `python scripts/x.py` would


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return make_folder(tmp_path / "data")
