"""Helpers for the detection tests: a 6-image COCO file with the quirks real files have, tiny run settings,
checkpoints with edited metadata, a detector trained through scripts/train_detection.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_utils
from safetensors import safe_open
from safetensors.torch import save_file
from scriptkit import run_script
from single_thread import one_thread_only

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
SIZE = 48  # image side
CATEGORIES = [{"id": 3, "name": "square"}, {"id": 7, "name": "bar"}]  # non-contiguous ids


def _image(rng: np.random.Generator, boxes: list[list[float]]) -> Image.Image:
    pixels = rng.integers(0, 60, (SIZE, SIZE, 3)).astype(np.uint8)
    for x, y, w, h in boxes:
        x0, y0 = max(int(x), 0), max(int(y), 0)
        pixels[y0 : int(y + h), x0 : int(x + w)] = (230, 200, 40)
    return Image.fromarray(pixels)


def _rle(x: int, y: int, w: int, h: int) -> dict:
    """A compressed RLE of a rectangle, as COCO stores crowd masks."""
    mask = np.zeros((SIZE, SIZE), dtype=np.uint8)
    mask[y : y + h, x : x + w] = 1
    rle = mask_utils.encode(np.asfortranarray(mask))
    return {"size": rle["size"], "counts": rle["counts"].decode("ascii")}


def _ann(ann_id: int, image_id: int, category: int, bbox: list[float], **extra) -> dict:
    x, y, w, h = bbox
    polygon = [[x, y, x + w, y, x + w, y + h, x, y + h]]
    return {"id": ann_id, "image_id": image_id, "category_id": category, "bbox": bbox, "area": w * h,
            "segmentation": polygon, "iscrowd": 0} | extra  # fmt: skip


def make_quirky_coco(root: Path) -> Path:
    """``root/annotations/instances_{train,val}2017.json`` (the same 6 images) and ``root/{train,val}2017/``.

    Image 1: two objects (polygon masks). 2: one object and an ``iscrowd`` one (RLE mask). 3: no object
    (a negative). 4: a box reaching outside the image (clipped, annotation 6) and a zero-area box (dropped,
    annotation 7). 5: its file is missing. 6: its file is cut off (a broken download: the header reads, the pixels
    do not).
    """
    rng = np.random.default_rng(0)
    annotations = [
        _ann(1, 1, 3, [4.0, 4.0, 16.0, 16.0]),
        _ann(2, 1, 7, [26.0, 8.0, 8.0, 30.0]),
        _ann(3, 2, 3, [20.0, 20.0, 18.0, 18.0]),
        _ann(4, 2, 7, [2.0, 30.0, 10.0, 10.0], iscrowd=1, segmentation=_rle(2, 30, 10, 10)),
        _ann(5, 6, 3, [10.0, 10.0, 12.0, 12.0]),
        _ann(6, 4, 7, [36.0, 6.0, 20.0, 24.0]),  # x + w = 56 > 48: clipped
        _ann(7, 4, 3, [10.0, 10.0, 0.0, 5.0]),  # zero width: dropped
    ]
    images = [{"id": i, "file_name": f"{i:02d}.png", "width": SIZE, "height": SIZE} for i in range(1, 7)]
    for split in ("train", "val"):
        folder = root / f"{split}2017"
        folder.mkdir(parents=True)
        for info in images:
            path = folder / info["file_name"]
            if info["id"] == 5:
                continue  # missing
            _image(rng, [a["bbox"] for a in annotations if a["image_id"] == info["id"]]).save(path)
            if info["id"] == 6:
                path.write_bytes(path.read_bytes()[:100])
        (root / "annotations").mkdir(exist_ok=True)
        coco = {"images": images, "annotations": annotations, "categories": CATEGORIES}
        (root / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(coco))
    return root


def tiny_overrides(data_dir: Path, out: Path, **extra: object) -> list[str]:
    """A run of a few seconds: pico backbone, 48 px images, narrow heads, no workers."""
    values = {
        "model.name": "swinlite_pico_patch2_window4_32",
        "model.fpn_channels": 16,
        "model.box_head_dim": 32,
        "model.rpn_batch_size_per_image": 32,
        "model.box_batch_size_per_image": 16,
        "data.dataset": "coco",
        "data.data_dir": data_dir,
        "data.batch_size": 2,
        "data.num_workers": 0,
        "data.train_sizes": "[40,56]",
        "data.size_step": 8,
        "data.test_size": 48,
        "data.max_size": 96,
        "schedule.warmup_epochs": 0.6,
        "train.output_dir": out,
        "train.epochs": 1,
        "train.device": "cpu",
        "train.log_interval": 1,
    }
    values.update(extra)
    return [f"{k}={v}" for k, v in values.items()]


def edit_coco(root: Path, split: str, edit: Callable[[dict], object]) -> Path:
    """Apply ``edit`` to the parsed ``instances_<split>2017.json`` of ``root`` in place; returns the file."""
    path = root / "annotations" / f"instances_{split}2017.json"
    coco = json.loads(path.read_text())
    edit(coco)
    path.write_text(json.dumps(coco))
    return path


def rewrite_checkpoint(source: Path, target: Path, edit: Callable[[dict], object] = dict, **metadata: Any) -> Path:
    """A copy of the safetensors file ``source`` with metadata keys replaced (each value stored as JSON) and its
    tensors (a dict) changed in place by ``edit``."""
    with safe_open(str(source), framework="pt") as f:
        meta = f.metadata() | {k: json.dumps(v) for k, v in metadata.items()}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    edit(tensors)
    save_file(tensors, str(target), metadata=meta)
    return target


def read_metadata(path: Path) -> dict[str, Any]:
    """The JSON-decoded metadata of a safetensors file."""
    with safe_open(str(path), framework="pt") as f:
        return {k: json.loads(v) for k, v in f.metadata().items()}


def train(root: Path, **overrides: object) -> tuple[Path, Path]:
    """(data root, run folder) of a tiny detector trained under ``root`` through scripts/train_detection.py."""
    coco = make_quirky_coco(root / "coco")
    (root / "defaults.yaml").write_text("{}\n")
    argv = ["--config", str(root / "defaults.yaml"), "--data-dir", str(coco), "--output-dir", str(root / "run")]
    argv += tiny_overrides(coco, root / "run", **overrides)
    with one_thread_only(), pytest.warns(UserWarning):  # the file's quirks; test_data checks those
        assert run_script("train_detection", argv) == 0
    return coco, root / "run"
