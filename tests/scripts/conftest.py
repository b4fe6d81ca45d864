"""The scripts under scripts/ as modules, so tests call their ``main(argv)`` in-process."""

import sys
from pathlib import Path

import pytest
from scriptkit import load_script as _load_script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "classification"))  # trainkit: tiny folders, runs


@pytest.fixture
def load_script():
    return _load_script
