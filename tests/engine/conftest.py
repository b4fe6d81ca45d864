"""Fixtures for the engine tests, which run every task: a tiny ImageFolder, a tiny COCO folder, tiny label maps."""

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS / "classification"), str(TESTS / "detection"), str(TESTS / "segmentation")]  # the kits

from detkit import make_quirky_coco  # noqa: E402
from segkit import make_seg_folder  # noqa: E402
from single_thread import one_thread  # noqa: E402, F401 (an autouse fixture)
from trainkit import make_folder  # noqa: E402


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return make_folder(tmp_path / "data")


@pytest.fixture
def coco(tmp_path: Path) -> Path:
    return make_quirky_coco(tmp_path / "coco")


@pytest.fixture
def seg_folder(tmp_path: Path) -> Path:
    return make_seg_folder(tmp_path / "seg")
