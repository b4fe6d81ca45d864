"""The scripts under scripts/ as modules, so tests call their ``main(argv)`` in-process; a model's initial weights as
a file."""

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from scriptkit import load_script as _load_script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "classification"))  # trainkit: tiny folders, runs


@pytest.fixture
def load_script():
    return _load_script


@pytest.fixture(scope="module")
def initial_weights(tmp_path_factory) -> Callable[[str], Path]:
    """``initial_weights(name)``: a file of timm model ``name``'s initial weights (seed 0), saved once per module, for
    ``--model NAME --checkpoint FILE``: ``--model NAME`` alone loads published pretrained weights only."""
    import timm
    import torch

    folder = tmp_path_factory.mktemp("initial_weights")

    def path(name: str) -> Path:
        file = folder / f"{name}.pth"
        if not file.exists():
            torch.manual_seed(0)
            torch.save(timm.create_model(name).state_dict(), file)
        return file

    return path
