"""Fixtures for the detection tests."""

import sys
from pathlib import Path

import pytest
from detkit import REPO, make_quirky_coco
from single_thread import one_thread  # noqa: F401 (an autouse fixture)

sys.path.insert(0, str(REPO / "scripts"))  # the scripts import their shared _cli.py as `python scripts/x.py` would


@pytest.fixture
def coco(tmp_path: Path) -> Path:
    return make_quirky_coco(tmp_path / "coco")
