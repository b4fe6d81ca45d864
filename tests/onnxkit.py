"""Helpers for the ONNX tests: a self-describing tiny classifier, image folders, and running a script in a fresh
interpreter where importing torch (or torchvision, timm) fails."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from pico import PICO
from PIL import Image
from scriptkit import REPO, script_env

from swinlite.io import save_safetensors
from swinlite.metadata import weights_metadata

CLASSES = ["cat", "dog", "éclair"]
PREPROCESSING = {"input_size": [3, 32, 32], "interpolation": "bicubic", "mean": [0.5, 0.4, 0.3],
                 "std": [0.2, 0.25, 0.3], "crop_pct": 0.875, "crop_mode": "center"}  # fmt: skip

# A meta-path finder that refuses torch, for the code of a torch-free interpreter (here and in onnxmany.py).
REFUSE_TORCH = """
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchvision", "timm"):
            raise ImportError(f"{name} imported on a torch-free path")
sys.meta_path.insert(0, NoTorch())
"""
# The script under test runs as `python scripts/x.py ...` would, torch refused.
NO_TORCH = (
    REFUSE_TORCH
    + """
import runpy
script, sys.argv = sys.argv[1], sys.argv[1:]
sys.path.insert(0, str(__import__("pathlib").Path(script).parent))
runpy.run_path(script, run_name="__main__")
"""
)


def write_classifier(path: Path, seed: int = 0) -> Path:
    """A pico classifier of :data:`CLASSES` with random weights, saved with the metadata scripts/train.py writes."""
    torch.manual_seed(seed)
    model = timm.create_model(PICO, num_classes=len(CLASSES))
    meta = weights_metadata(PICO, {"num_classes": len(CLASSES)}, CLASSES, PREPROCESSING)
    save_safetensors(path, model.state_dict(), meta)
    return path


def write_images(folder: Path, sizes: list[tuple[int, int]], seed: int = 0) -> Path:
    """Noisy RGB PNGs of the given (H, W) in ``folder``, one per size."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i, (h, w) in enumerate(sizes):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / f"{i:02d}.png")
    return folder


def run_without_torch(script: str, *args: str) -> subprocess.CompletedProcess:
    """``scripts/<script> args`` in a fresh interpreter in which importing torch, torchvision or timm fails."""
    cmd = [sys.executable, "-c", NO_TORCH, str(REPO / "scripts" / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=script_env())


def assert_checked_before_output(
    output: Path, export: Callable[[], float], set_check: Callable[[Callable[..., float]], None], refusal: str
) -> None:
    """Run ``export`` (writing ``b"new"`` to ``output``, an earlier file there) with its check, which ``set_check``
    patches, first refusing with ``refusal``, then passing: the refused file was checked in a hidden folder beside
    ``output`` while ``output`` kept the earlier bytes, and stays so; the passing one becomes ``output``, nothing
    left beside it."""
    seen = []
    output.write_bytes(b"an earlier export")

    def refusing(path: Path, *args: object) -> float:
        seen.append((path, path.read_bytes(), output.read_bytes()))
        raise ValueError(refusal)

    set_check(refusing)
    with pytest.raises(ValueError, match=re.escape(refusal) + r"; the export failed its check: .* keeps"):
        export()
    ((checked, content, at_output),) = seen
    assert checked.parent.parent == output.parent and checked.parent.name.startswith(f".{output.name}.export-")
    assert (content, at_output) == (b"new", b"an earlier export")
    assert output.read_bytes() == b"an earlier export" and list(output.parent.iterdir()) == [output]
    set_check(lambda path, *args: 0.5)
    assert export() == 0.5
    assert output.read_bytes() == b"new" and list(output.parent.iterdir()) == [output]
