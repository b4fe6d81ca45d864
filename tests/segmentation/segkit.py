"""Helpers for the segmentation tests: a tiny label-map folder whose masks are drawn from the images themselves,
tiny run settings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
CLASSES = ("background", "red", "green")
COLORS = ((30, 30, 30), (220, 40, 40), (40, 200, 60))  # the colour of each class in the images
SIZE = (40, 48)  # image (height, width): neither square nor a window multiple


def scene(rng: np.random.Generator, size: tuple[int, int] = SIZE) -> tuple[np.ndarray, np.ndarray]:
    """An image [H, W, 3] uint8 of coloured rectangles on a background, and its labels [H, W] uint8: each pixel's
    class is the colour it was drawn in (a few background pixels are 255, ignored)."""
    height, width = size
    labels = np.zeros(size, dtype=np.uint8)
    for label in (1, 2, 1):
        h, w = rng.integers(6, height // 2), rng.integers(6, width // 2)
        y, x = rng.integers(0, height - h), rng.integers(0, width - w)
        labels[y : y + h, x : x + w] = label
    image = np.array(COLORS, dtype=np.uint8)[labels]
    labels[:2, :2] = 255
    return image, labels


def make_seg_folder(root: Path, count: int = 6, seed: int = 0) -> Path:
    """``root/images/{training,validation}/*.png`` and ``root/annotations/...``: palette masks for training,
    grayscale masks for validation (both formats a dataset may use)."""
    rng = np.random.default_rng(seed)
    for split, mode in (("training", "P"), ("validation", "L")):
        (root / "images" / split).mkdir(parents=True)
        (root / "annotations" / split).mkdir(parents=True)
        for n in range(count):
            image, labels = scene(rng)
            Image.fromarray(image).save(root / "images" / split / f"{n:02d}.png")
            mask = Image.fromarray(labels, mode=mode)
            if mode == "P":  # all 256 entries: with fewer, PIL renumbers the values past them (255) when saving
                mask.putpalette([v for colour in COLORS for v in colour] + [255] * (3 * (256 - len(COLORS))))
            mask.save(root / "annotations" / split / f"{n:02d}.png")
    return root


def tiny_overrides(data_dir: Path, out: Path, **extra: object) -> list[str]:
    """A run of a few seconds: pico backbone, narrow heads, 32 px crops, no workers."""
    values = {
        "model.name": "swinlite_pico_patch2_window4_32",
        "model.head_channels": 8,
        "model.aux_channels": 8,
        "model.pool_scales": "[1,2]",
        "data.dataset": "folder",
        "data.classes": f"[{','.join(CLASSES)}]",
        "data.data_dir": data_dir,
        "data.batch_size": 2,
        "data.num_workers": 0,
        "data.img_scale": "[64,32]",
        "data.crop_size": "[32,32]",
        "optim.lr": 1e-3,
        "schedule.warmup_epochs": 0.5,
        "train.output_dir": out,
        "train.epochs": 1,
        "train.device": "cpu",
        "train.log_interval": 1,
    }
    values.update(extra)
    return [f"{k}={v}" for k, v in values.items()]
