"""Helpers for the classification tests: tiny generated ImageFolders, run settings, script runner."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image
from scriptkit import script_env

from swinlite.classification import ClassificationTask, Config
from swinlite.engine import run

REPO = Path(__file__).resolve().parents[2]
COLORS = [(220, 40, 40), (40, 200, 60), (50, 60, 230)]


def make_folder(root: Path, classes: int = 3, per_class: int = 8, size: int = 16, splits=("train", "val")) -> Path:
    """``root/<split>/c<i>/<n>.png``: noisy images whose mean colour gives the class away."""
    rng = np.random.default_rng(0)
    for split in splits:
        for c in range(classes):
            folder = root / split / f"c{c}"
            folder.mkdir(parents=True, exist_ok=True)
            for n in range(per_class):
                noise = rng.integers(-40, 40, (size, size, 3))
                pixels = np.clip(np.array(COLORS[c % len(COLORS)]) + noise, 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{n}.png")
    return root


def tiny_overrides(data_dir: Path, out: Path, **extra: object) -> list[str]:
    """Settings for a run of a few seconds: pico model, 16 px, no workers, deterministic."""
    values = {
        "model.name": "swinlite_pico_patch2_window4_32",
        "data.data_dir": data_dir,
        "data.dataset": "folder",
        "data.img_size": 16,
        "data.batch_size": 8,
        "data.num_workers": 0,
        "data.hflip": 0.5,
        "data.scale": "[0.5,1.0]",
        "train.output_dir": out,
        "train.epochs": 2,
        "train.deterministic": True,
        "schedule.warmup_epochs": 0.5,
    }
    values.update(extra)
    return [f"{k}={v}" for k, v in values.items()]


def tiny_config(data_dir: Path, out: Path, **extra: object) -> Config:
    """The config ``scripts/train.py`` builds from the same overrides (on top of configs/demo.yaml)."""
    return ClassificationTask.load_config(REPO / "configs" / "demo.yaml", tiny_overrides(data_dir, out, **extra))


def train(cfg: Config, resume: bool = False, overwrite: bool = False) -> Path:
    """A classification run through the engine (what scripts/train.py runs); returns the output folder."""
    return run(ClassificationTask, cfg, resume=resume, overwrite=overwrite)


def script(name: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """Run ``scripts/<name>`` in a fresh interpreter; returns the completed process (text output)."""
    cmd = [sys.executable, str(REPO / "scripts" / name), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=script_env(), **kwargs)
