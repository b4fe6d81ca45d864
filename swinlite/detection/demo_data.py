"""The embedded detection demo: scikit-learn's handwritten digits pasted on larger canvases, in COCO format.

Built deterministically (same files on every machine) with no download: the 8x8 digits ship inside
scikit-learn. Each 64x64 canvas holds 0 to 3 non-overlapping digits of 14-30 px, in colour on a noisy
background; each digit has a tight box and an instance mask (RLE). Digits of the val canvases are
never seen in training. Layout: COCO 2017's, ``root/annotations/instances_{train,val}2017.json`` and
``root/{train,val}2017/*.png``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

from ..io import build_folder_once

_MARKER = ".swinlite_digit_scenes"
CANVAS = 64
SIZES = (14, 30)  # digit side range in pixels
CATEGORY_IDS = [2 * d + 1 for d in range(10)]  # non-contiguous on purpose, as COCO's are


def _digit_patch(pixels: np.ndarray, side: int) -> np.ndarray:
    """``pixels`` [8, 8] with values 0..16 -> intensity [side, side] in 0..1."""
    gray = Image.fromarray((pixels * (255.0 / 16.0)).round().astype(np.uint8), mode="L")
    return np.asarray(gray.resize((side, side), Image.Resampling.BICUBIC), dtype=np.float32) / 255.0


def _place(rng: np.random.Generator, sides: list[int]) -> list[tuple[int, int]] | None:
    """Top-left corners for squares of ``sides`` that do not overlap, or None if a few tries fail."""
    corners: list[tuple[int, int]] = []
    for side in sides:
        for _ in range(20):
            x, y = rng.integers(0, CANVAS - side + 1, size=2)
            if all(x + side <= cx or cx + cs <= x or y + side <= cy or cy + cs <= y
                   for (cx, cy), cs in zip(corners, sides, strict=False)):  # fmt: skip
                corners.append((int(x), int(y)))
                break
        else:
            return None
    return corners


def _scene(rng: np.random.Generator, digits, pool: np.ndarray) -> tuple[np.ndarray, list[dict]]:
    """One canvas [64, 64, 3] uint8 and its objects (digit, tight box xywh, RLE mask)."""
    count = rng.choice(4, p=[0.05, 0.35, 0.35, 0.25])
    sides = [int(s) for s in rng.integers(SIZES[0], SIZES[1] + 1, size=count)]
    corners = _place(rng, sides) or []
    background = rng.uniform(0, 0.35, size=3)
    canvas = np.clip(background + rng.normal(0, 0.06, size=(CANVAS, CANVAS, 3)), 0, 1)  # [H, W, 3]
    objects = []
    for side, (x, y) in zip(sides, corners, strict=False):
        index = int(rng.choice(pool))
        patch = _digit_patch(digits.images[index], side)  # [side, side]
        color = rng.uniform(0.6, 1.0, size=3)
        region = canvas[y : y + side, x : x + side]
        canvas[y : y + side, x : x + side] = region * (1 - patch[..., None]) + color * patch[..., None]
        mask = np.zeros((CANVAS, CANVAS), dtype=np.uint8)
        mask[y : y + side, x : x + side] = patch > 0.3
        rle = mask_utils.encode(np.asfortranarray(mask))
        objects.append(dict(
            category_id=CATEGORY_IDS[int(digits.target[index])],
            bbox=[float(v) for v in mask_utils.toBbox(rle)],
            area=float(mask_utils.area(rle)),
            segmentation={"size": rle["size"], "counts": rle["counts"].decode("ascii")},
            iscrowd=0,
        ))  # fmt: skip
    return (canvas * 255).round().astype(np.uint8), objects


def _write_split(root: Path, split: str, scenes: int, seed: int, digits, pool: np.ndarray) -> None:
    rng = np.random.default_rng(seed)
    folder = root / f"{split}2017"
    folder.mkdir(parents=True)
    images, annotations = [], []
    for image_id in range(1, scenes + 1):
        pixels, objects = _scene(rng, digits, pool)
        name = f"{image_id:06d}.png"
        Image.fromarray(pixels).save(folder / name)
        images.append({"id": image_id, "file_name": name, "width": CANVAS, "height": CANVAS})
        for obj in objects:
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, **obj})
    categories = [{"id": cid, "name": str(d), "supercategory": "digit"} for d, cid in enumerate(CATEGORY_IDS)]
    (root / "annotations").mkdir(exist_ok=True)
    coco = {"images": images, "annotations": annotations, "categories": categories}
    (root / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(coco))


def build_digit_scenes(root: str | Path, train_scenes: int = 1200, val_scenes: int = 200) -> Path:
    """Write the demo dataset under ``root`` unless a finished copy is already there.

    Built under a temporary name and renamed into place, so an interrupted build never leaves a partial
    dataset behind.

    Returns:
        ``root``.
    """

    def build(tmp: Path) -> str:
        from sklearn.datasets import load_digits  # scikit-learn: needed by the demos only, and only to build them
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        index = np.arange(len(digits.target))
        train_pool, val_pool = train_test_split(index, test_size=0.2, random_state=0, stratify=digits.target)
        _write_split(tmp, "train", train_scenes, 0, digits, train_pool)
        _write_split(tmp, "val", val_scenes, 1, digits, val_pool)
        return f"scikit-learn digits on {CANVAS}x{CANVAS} canvases, {train_scenes}/{val_scenes}\n"

    return build_folder_once(root, _MARKER, build, "detection demo")
