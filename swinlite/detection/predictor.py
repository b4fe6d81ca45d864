"""Detection checkpoints written by ``scripts/train_detection.py``: rebuild the detector, run it, draw its output."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torchvision.utils import draw_bounding_boxes, draw_segmentation_masks

from ..io import read_metadata, read_state_dict
from .config import DetModelConfig
from .data import Categories
from .models import build_detector


def load_detector(path: str | Path, device: torch.device | str = "cpu") -> tuple[nn.Module, Categories, dict[str, Any]]:
    """The detector a ``best``/``last.safetensors`` describes, with its weights, in eval mode.

    Returns:
        (detector, its categories, the file's metadata)

    Raises:
        ValueError: a missing file, or one without the detection metadata ``train_detection.py`` writes.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint {path} does not exist")
    meta = read_metadata(path) if path.suffix == ".safetensors" else {}
    if meta.get("task") != "detection":
        raise ValueError(f"{path} is not a detection checkpoint of scripts/train_detection.py (no detector metadata)")
    known = {f.name for f in dataclasses.fields(DetModelConfig)}
    cfg = DetModelConfig(**{k: v for k, v in meta["detector"].items() if k in known})
    categories = Categories(meta["category_ids"], meta["classes"])
    data = meta["data"]
    model = build_detector(cfg, len(categories.ids), data["test_size"], data["max_size"], data["mean"], data["std"])
    model.load_state_dict(read_state_dict(path))
    return model.to(device).eval(), categories, meta


def draw_detections(
    image: torch.Tensor, prediction: dict[str, torch.Tensor], categories: Categories, score_thresh: float
) -> torch.Tensor:
    """``image`` [3, H, W] uint8 with the boxes (and masks) scoring at least ``score_thresh`` drawn on it."""
    keep = prediction["scores"] >= score_thresh
    if not keep.any():
        return image
    if "masks" in prediction:
        masks = prediction["masks"][keep][:, 0] > 0.5  # [N, H, W]
        image = draw_segmentation_masks(image, masks, alpha=0.4)
    labels = [
        f"{categories.names[label - 1]} {score:.2f}"
        for label, score in zip(prediction["labels"][keep].tolist(), prediction["scores"][keep].tolist(), strict=True)
    ]
    return draw_bounding_boxes(image, prediction["boxes"][keep], labels, colors="red", width=2)
