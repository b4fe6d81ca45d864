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


@pytest.fixture(scope="module")
def segmenter_file(tmp_path_factory) -> Path:
    """A segmentation checkpoint as train_segmentation.py writes one (a 3-class pico UperNet, initial weights, the
    metadata its loader reads; the default test settings: whole-image, crop 512), saved once per module: for the
    scripts that read the checkpoint before their output folder (evaluate_segmentation.py)."""
    import dataclasses

    from pico import PICO

    from swinlite.engine.checkpoint import save_weights
    from swinlite.segmentation.config import SegModelConfig
    from swinlite.segmentation.inference import InferenceSettings
    from swinlite.segmentation.models import build_upernet

    cfg = SegModelConfig(name=PICO, head_channels=8, aux_channels=8, pool_scales=(1, 2), pretrained=False)
    path = tmp_path_factory.mktemp("segmenter") / "best.safetensors"
    preprocessing = {"mean": [0.5] * 3, "std": [0.25] * 3, **InferenceSettings().to_dict()}
    meta = {"segmenter": dataclasses.asdict(cfg), "classes": ["x", "y", "z"], "palette": [[0, 0, 0]] * 3,
            "ignore_index": 255, "reduce_zero_label": False, "preprocessing": preprocessing}  # fmt: skip
    save_weights(path, build_upernet(cfg, 3).state_dict(), {"task": "segmentation", **meta})
    return path
