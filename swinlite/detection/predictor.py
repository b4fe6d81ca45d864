"""Detection checkpoints written by ``scripts/train_detection.py``: rebuild the detector, run it, draw its output.

Also the check ``detect.py`` and ``evaluate_detection.py`` make before any work: images the detector cannot
resize.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torchvision.utils import draw_bounding_boxes, draw_segmentation_masks

from ..colours import label_colour
from ..engine.config import check_values
from ..files import check_model_path
from ..io import read_metadata, read_state_dict
from ..metadata import finite_numbers, scripts_of
from ..predictions import kept_scores
from ..weights import check_not_run_resume, load_strict
from .categories import Categories
from .config import DetConfig, DetModelConfig
from .models import build_detector
from .transforms import resize_problem


def _metadata_problems(meta: dict[str, Any]) -> list[str]:
    """What is wrong with the metadata ``train_detection.py`` writes (see ``runner.weights_metadata``)."""
    problems = []
    names, ids, data = meta.get("classes"), meta.get("category_ids"), meta.get("data")
    if not isinstance(meta.get("detector"), dict):
        problems.append(f"'detector' is {str(meta.get('detector'))[:40]}, not the model settings")
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        problems.append(f"'classes' is {str(names)[:60]}, not a list of names")
    if not (isinstance(ids, list) and all(type(i) is int for i in ids) and len(set(ids)) == len(ids)):
        problems.append(f"'category_ids' is {str(ids)[:60]}, not a list of distinct integers")
    elif isinstance(names, list) and len(ids) != len(names):
        problems.append(f"{len(ids)} category_ids for {len(names)} classes")
    sizes = isinstance(data, dict) and all(type(data.get(k)) is int and data[k] >= 1 for k in ("test_size", "max_size"))
    if not (sizes and finite_numbers(data.get("mean"), 3) and finite_numbers(data.get("std"), 3)):
        problems.append(f"'data' is {str(data)[:80]}, not test_size, max_size, mean and std")
    return problems


def _read_metadata(path: Path) -> dict[str, Any]:
    try:
        meta = read_metadata(path)
    except Exception as e:  # safetensors raises its own error types for files that are not, or no longer, its own
        raise ValueError(
            f"{path} is not a detection checkpoint of scripts/train_detection.py (a safetensors file with its "
            f"metadata): {type(e).__name__}: {e}"
        ) from None
    if meta.get("task") != "detection":
        check_not_run_resume(path)  # a run's resume.pt: name the run's weights files to give
        task = f"its metadata says task {meta['task']!r}" if "task" in meta else "no detector metadata"
        raise ValueError(
            f"{path} is not a detection checkpoint of scripts/train_detection.py ({task}){scripts_of(meta.get('task'))}"
        )
    problems = _metadata_problems(meta)
    if problems:
        raise ValueError(f"{path}: its detection metadata is wrong: {'; '.join(problems)}")
    return meta


def load_detector(path: str | Path, device: torch.device | str = "cpu") -> tuple[nn.Module, Categories, dict[str, Any]]:
    """The detector a ``best``/``last.safetensors`` describes, with its weights, in eval mode.

    Returns:
        (detector, its categories, the file's metadata)

    Raises:
        ValueError: a missing, truncated or foreign file, metadata that is wrong or does not describe a detector
            (unknown detector, classes and category ids of other lengths, ...), or weights that are not finite
            floats or do not fit the detector the metadata describes; each naming the file.
    """
    path = Path(path)
    check_model_path(path, "checkpoint")
    meta = _read_metadata(path)
    categories = Categories(meta["category_ids"], meta["classes"], f"checkpoint {path}")
    known = {f.name for f in dataclasses.fields(DetModelConfig)}
    data = meta["data"]
    try:
        cfg = DetModelConfig(**{k: v for k, v in meta["detector"].items() if k in known})
        check_values(DetConfig(model=cfg))
        model = build_detector(cfg, len(categories.ids), data["test_size"], data["max_size"], data["mean"], data["std"])
    except Exception as e:  # metadata values of any type reach timm and torchvision
        raise ValueError(f"{path}: its metadata does not describe a detector: {type(e).__name__}: {e}") from None
    load_strict(model, read_state_dict(path), path)
    return model.to(device).eval(), categories, meta


def unprocessable(model: nn.Module, height: int, width: int) -> str | None:
    """Why the detector cannot run on a ``height`` x ``width`` image, or None: in eval mode it resizes to its test
    size with the long side at most its max size (:func:`.transforms.resize_problem`)."""
    return resize_problem(height, width, model.transform.min_size[-1], model.transform.max_size)


def draw_detections(
    image: torch.Tensor, prediction: dict[str, torch.Tensor], categories: Categories, score_thresh: float
) -> torch.Tensor:
    """``image`` [3, H, W] uint8 with the boxes (red) and masks (each in its class's colour,
    :func:`swinlite.colours.label_colour`: never torchvision's default, whose first is black) scoring at least
    ``score_thresh`` drawn on it."""
    keep = torch.tensor(kept_scores(prediction["scores"].tolist(), score_thresh), dtype=torch.bool)
    if not keep.any():
        return image
    if "masks" in prediction:
        masks = prediction["masks"][keep][:, 0] > 0.5  # [N, H, W]
        colours = [label_colour(label) for label in prediction["labels"][keep].tolist()]
        image = draw_segmentation_masks(image, masks, alpha=0.4, colors=colours)
    labels = [
        f"{categories.names[label - 1]} {score:.2f}"
        for label, score in zip(prediction["labels"][keep].tolist(), prediction["scores"][keep].tolist(), strict=True)
    ]
    return draw_bounding_boxes(image, prediction["boxes"][keep], labels, colors="red", width=2)
