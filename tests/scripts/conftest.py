"""Load the scripts under scripts/ as modules, so tests call their ``main(argv)`` in-process."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))  # the scripts import their shared _cli.py as `python scripts/x.py` would
sys.path.insert(0, str(SCRIPTS.parent / "tests" / "train"))  # trainkit: tiny folders and runs


@pytest.fixture
def load_script():
    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"script_{name}", SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
