"""The embedded segmentation demo: filled shapes drawn on small canvases, with a label per pixel.

Built deterministically (same files on every machine) with no download. Each 64x64 canvas holds 1 to 3 shapes
(circle, square, triangle, cross; 14-30 px across, upright but tilted by up to 15 degrees, later ones in front) in
random bright colours on a dark noisy background; each pixel is labelled with the shape drawn on it, or
``background``: 5 classes, no ignored pixel. The colour says nothing about the class: the model has to see the
outline. Layout: ADE20K's, ``root/images/{training,validation}/*.png`` and ``root/annotations/{training,
validation}/*.png`` (palette PNGs).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from ..colours import color_map
from ..io import build_folder_once
from .data import SHAPES_CLASSES

_MARKER = ".swinlite_shapes"
CANVAS = 64
RADII = (7, 15)  # circumradius range in pixels
TILT = math.pi / 12  # largest turn of a shape (either way) from upright


def _outline(kind: str, x: float, y: float, radius: float, angle: float) -> list[tuple[float, float]]:
    """Polygon vertices of a square, triangle or cross of ``radius`` around (x, y), turned by ``angle``."""
    if kind == "cross":  # a plus sign: arms a third of the span wide
        a, b = radius / 3, radius
        local = [(a, b), (a, a), (b, a), (b, -a), (a, -a), (a, -b), (-a, -b), (-a, -a), (-b, -a), (-b, a), (-a, a),
                 (-a, b)]  # fmt: skip
    else:  # a regular polygon: a triangle with a corner up, a square with level sides
        corners, phase = (4, math.pi / 4) if kind == "square" else (3, 0.0)
        turns = [phase + 2 * math.pi * k / corners for k in range(corners)]
        local = [(radius * math.sin(t), -radius * math.cos(t)) for t in turns]
    cos, sin = math.cos(angle), math.sin(angle)
    return [(x + u * cos - v * sin, y + u * sin + v * cos) for u, v in local]


def _scene(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One canvas [64, 64, 3] uint8 and its labels [64, 64] uint8."""
    background = rng.uniform(0, 0.35, size=3)
    base = np.clip(background + rng.normal(0, 0.05, size=(CANVAS, CANVAS, 3)), 0, 1)  # [H, W, 3]
    canvas = Image.fromarray((base * 255).round().astype(np.uint8))
    labels = Image.new("L", (CANVAS, CANVAS), 0)
    draw_canvas, draw_labels = ImageDraw.Draw(canvas), ImageDraw.Draw(labels)
    for _ in range(rng.integers(1, 4)):
        label = int(rng.integers(1, len(SHAPES_CLASSES)))
        radius = float(rng.uniform(*RADII))
        x, y = (float(v) for v in rng.uniform(radius / 2, CANVAS - radius / 2, size=2))
        color = tuple(int(c) for c in rng.integers(110, 256, size=3))
        if SHAPES_CLASSES[label] == "circle":
            box = (x - radius, y - radius, x + radius, y + radius)
            draw_canvas.ellipse(box, fill=color)
            draw_labels.ellipse(box, fill=label)
        else:
            outline = _outline(SHAPES_CLASSES[label], x, y, radius, float(rng.uniform(-TILT, TILT)))
            draw_canvas.polygon(outline, fill=color)
            draw_labels.polygon(outline, fill=label)
    pixels = np.asarray(canvas, dtype=np.float64) + rng.normal(0, 8, size=(CANVAS, CANVAS, 3))
    return np.clip(pixels, 0, 255).round().astype(np.uint8), np.asarray(labels)


def _write_split(root: Path, split: str, scenes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    images, masks = root / "images" / split, root / "annotations" / split
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    palette = [v for colour in color_map(len(SHAPES_CLASSES)) for v in colour]
    for n in range(scenes):
        pixels, labels = _scene(rng)
        Image.fromarray(pixels).save(images / f"{n:05d}.png")
        mask = Image.fromarray(labels, mode="P")
        mask.putpalette(palette)
        mask.save(masks / f"{n:05d}.png")


def build_shape_scenes(root: str | Path, train_scenes: int = 1000, val_scenes: int = 200) -> Path:
    """Write the demo dataset under ``root`` unless a finished copy is already there (built under a temporary
    name and renamed into place: an interrupted build leaves nothing behind).

    Returns:
        ``root``.
    """

    def build(tmp: Path) -> str:
        _write_split(tmp, "training", train_scenes, 0)
        _write_split(tmp, "validation", val_scenes, 1)
        return f"shapes on {CANVAS}x{CANVAS} canvases with label maps, {train_scenes}/{val_scenes}\n"

    return build_folder_once(root, _MARKER, build, "segmentation demo")
