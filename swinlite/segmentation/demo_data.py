"""The embedded segmentation demo: scikit-learn's handwritten digits drawn on larger canvases, with a label per pixel.

Built deterministically (same files on every machine) with no download: the 8x8 digits ship inside scikit-learn.
Each 64x64 canvas holds 1 to 3 non-overlapping digits of 14-30 px in colour on a noisy background; a pixel where a
digit's stroke covers at least 30 % is labelled with that digit (label ``d + 1``), every other pixel ``background``
(label 0): 11 classes, no ignored pixel. Digits of the val canvases are never seen in training. Layout: ADE20K's,
``root/images/{training,validation}/*.png`` and ``root/annotations/{training,validation}/*.png`` (palette PNGs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from ..io import build_folder_once
from .classes import color_map
from .data import DIGITS_CLASSES

_MARKER = ".swinlite_seg_digits"
CANVAS = 64
SIZES = (14, 30)  # digit side range in pixels
STROKE = 0.3  # a pixel belongs to a digit where its stroke covers this much


def _digit_patch(pixels: np.ndarray, side: int) -> np.ndarray:
    """``pixels`` [8, 8] with values 0..16 -> intensity [side, side] in 0..1."""
    gray = Image.fromarray((pixels * (255.0 / 16.0)).round().astype(np.uint8), mode="L")
    return np.asarray(gray.resize((side, side), Image.Resampling.BICUBIC), dtype=np.float32) / 255.0


def _place(rng: np.random.Generator, sides: list[int]) -> list[tuple[int, int, int]]:
    """(side, x, y) of squares of ``sides`` that do not overlap (a square that finds no place in 20 tries is left
    out)."""
    placed: list[tuple[int, int, int]] = []
    for side in sides:
        for _ in range(20):
            x, y = (int(v) for v in rng.integers(0, CANVAS - side + 1, size=2))
            if all(x + side <= px or px + ps <= x or y + side <= py or py + ps <= y for ps, px, py in placed):
                placed.append((side, x, y))
                break
    return placed


def _scene(rng: np.random.Generator, digits, pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One canvas [64, 64, 3] uint8 and its labels [64, 64] uint8."""
    sides = [int(s) for s in rng.integers(SIZES[0], SIZES[1] + 1, size=rng.integers(1, 4))]
    background = rng.uniform(0, 0.35, size=3)
    canvas = np.clip(background + rng.normal(0, 0.06, size=(CANVAS, CANVAS, 3)), 0, 1)  # [H, W, 3]
    labels = np.zeros((CANVAS, CANVAS), dtype=np.uint8)
    for side, x, y in _place(rng, sides):
        index = int(rng.choice(pool))
        patch = _digit_patch(digits.images[index], side)  # [side, side]
        color = rng.uniform(0.6, 1.0, size=3)
        region = canvas[y : y + side, x : x + side]
        canvas[y : y + side, x : x + side] = region * (1 - patch[..., None]) + color * patch[..., None]
        labels[y : y + side, x : x + side][patch >= STROKE] = int(digits.target[index]) + 1
    return (canvas * 255).round().astype(np.uint8), labels


def _write_split(root: Path, split: str, scenes: int, seed: int, digits, pool: np.ndarray) -> None:
    rng = np.random.default_rng(seed)
    images, masks = root / "images" / split, root / "annotations" / split
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    palette = [v for colour in color_map(len(DIGITS_CLASSES)) for v in colour]
    for n in range(scenes):
        pixels, labels = _scene(rng, digits, pool)
        Image.fromarray(pixels).save(images / f"{n:05d}.png")
        mask = Image.fromarray(labels, mode="P")
        mask.putpalette(palette)
        mask.save(masks / f"{n:05d}.png")


def build_digit_scenes(root: str | Path, train_scenes: int = 1000, val_scenes: int = 200) -> Path:
    """Write the demo dataset under ``root`` unless a finished copy is already there (built under a temporary
    name and renamed into place: an interrupted build leaves nothing behind).

    Returns:
        ``root``.
    """

    def build(tmp: Path) -> str:
        digits = load_digits()
        index = np.arange(len(digits.target))
        train_pool, val_pool = train_test_split(index, test_size=0.2, random_state=0, stratify=digits.target)
        _write_split(tmp, "training", train_scenes, 0, digits, train_pool)
        _write_split(tmp, "validation", val_scenes, 1, digits, val_pool)
        return f"scikit-learn digits on {CANVAS}x{CANVAS} canvases with label maps, {train_scenes}/{val_scenes}\n"

    return build_folder_once(root, _MARKER, build, "segmentation demo")
