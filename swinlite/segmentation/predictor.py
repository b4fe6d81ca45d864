"""Segmentation checkpoints written by ``scripts/train_segmentation.py``: rebuild the model from the file alone, and
draw its label maps.

A checkpoint's metadata (beside the engine's ``format``, ``task``, ``weights``, ``swinlite``, ``epoch``,
``val_miou``) holds ``segmenter`` (the model section: backbone name and keywords, head settings), ``classes``,
``palette`` (one RGB colour per class), ``ignore_index``, ``reduce_zero_label`` (how the masks' values map to
classes) and ``preprocessing``: ``mean``, ``std`` and the test settings (``img_scale``, ``mode``, ``crop_size``,
``stride``, ``ratios``, ``flip``; see :class:`~.inference.InferenceSettings`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torchvision.utils import draw_segmentation_masks

from ..engine.config import check_values
from ..files import check_model_path
from ..io import read_metadata, read_state_dict
from ..metadata import finite_numbers, scripts_of
from ..weights import check_not_run_resume, load_strict
from .config import SegConfig, SegModelConfig
from .data import Labels
from .inference import InferenceSettings
from .models import UperNet, build_upernet

WRITER = "scripts/train_segmentation.py"


@dataclass
class SegInfo:
    """What a checkpoint says about its model's input and output."""

    labels: Labels
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    test: InferenceSettings
    metadata: dict[str, Any]


def _problems(meta: dict[str, Any]) -> list[str]:
    """What is wrong with the metadata of a segmentation checkpoint (see the module docstring)."""
    problems = []
    classes, palette, pre = meta.get("classes"), meta.get("palette"), meta.get("preprocessing")
    if not isinstance(meta.get("segmenter"), dict):
        problems.append(f"'segmenter' is {str(meta.get('segmenter'))[:40]}, not the model settings")
    if not (isinstance(classes, list) and classes and all(isinstance(c, str) for c in classes)):
        problems.append(f"'classes' is {str(classes)[:60]}, not a list of names")
    elif len(set(classes)) != len(classes):
        problems.append("'classes' names a class twice")
    colours = isinstance(palette, list) and all(
        isinstance(c, list) and len(c) == 3 and all(type(v) is int and 0 <= v <= 255 for v in c) for c in palette
    )
    if not colours or not isinstance(classes, list) or len(palette) != len(classes):
        problems.append(f"'palette' is {str(palette)[:60]}, not one [r, g, b] (0..255) per class")
    ignore = meta.get("ignore_index")
    if type(ignore) is not int or (isinstance(classes, list) and not len(classes) <= ignore <= 65535):
        problems.append(f"'ignore_index' is {ignore!r}, not an integer from the class count to 65535")
    if type(meta.get("reduce_zero_label")) is not bool:
        problems.append(f"'reduce_zero_label' is {meta.get('reduce_zero_label')!r}, not true or false")
    if not (isinstance(pre, dict) and finite_numbers(pre.get("mean"), 3) and finite_numbers(pre.get("std"), 3)
            and min(pre["std"]) > 0):  # fmt: skip
        problems.append(f"'preprocessing' is {str(pre)[:80]}, not mean, std (> 0) and the test settings")
    return problems


def _test_settings(pre: dict[str, Any]) -> InferenceSettings:
    fields = {f.name for f in dataclasses.fields(InferenceSettings)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in pre.items() if k in fields}
    test = InferenceSettings(**values)
    test.check()
    return test


def read_info(path: Path) -> SegInfo:
    """The checked metadata of a segmentation checkpoint.

    Raises:
        ValueError: a file that is not a segmentation checkpoint (another task's, or no metadata), or metadata
            of the wrong type or range; naming the file.
    """
    try:
        meta = read_metadata(path)
    except ValueError as e:
        raise ValueError(f"{e} (expected a segmentation checkpoint of {WRITER})") from None
    if meta.get("task") != "segmentation":
        check_not_run_resume(path)  # a run's resume.pt: name the run's weights files to give
        task = f"its metadata says task {meta['task']!r}" if "task" in meta else "no segmentation metadata"
        raise ValueError(f"{path} is not a segmentation checkpoint of {WRITER} ({task}){scripts_of(meta.get('task'))}")
    problems = _problems(meta)
    if problems:
        raise ValueError(f"{path}: its segmentation metadata is wrong: {'; '.join(problems)}")
    pre = meta["preprocessing"]
    try:
        test = _test_settings(pre)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: its test settings are wrong: {e}") from None
    labels = Labels(tuple(meta["classes"]), tuple(tuple(c) for c in meta["palette"]), meta["ignore_index"],
                    meta["reduce_zero_label"])  # fmt: skip
    return SegInfo(labels, tuple(pre["mean"]), tuple(pre["std"]), test, meta)


def load_segmenter(path: str | Path, device: torch.device | str = "cpu") -> tuple[UperNet, SegInfo]:
    """The model a ``best``/``last.safetensors`` of ``train_segmentation.py`` describes, with its weights, in eval
    mode, and what its metadata says (classes, palette, preprocessing).

    Raises:
        ValueError: a missing, truncated or foreign file, wrong metadata, or weights that are not finite floats
            or do not fit the model the metadata describes; each naming the file.
    """
    path = Path(path)
    check_model_path(path, "checkpoint")
    info = read_info(path)
    known = {f.name for f in dataclasses.fields(SegModelConfig)}
    try:
        cfg = SegModelConfig(**{k: v for k, v in info.metadata["segmenter"].items() if k in known})
        cfg = dataclasses.replace(cfg, pretrained=False, pool_scales=tuple(cfg.pool_scales))
        check_values(SegConfig(model=cfg))
        model = build_upernet(cfg, len(info.labels.classes))
    except Exception as e:  # metadata values of any type reach timm
        raise ValueError(f"{path}: its metadata does not describe a segmenter: {type(e).__name__}: {e}") from None
    load_strict(model, read_state_dict(path), path)
    return model.to(device).eval(), info


def overlay(image: torch.Tensor, labels: torch.Tensor, palette: tuple[tuple[int, int, int], ...], alpha: float = 0.5):
    """``image`` [3, H, W] uint8 with each class present in ``labels`` [H, W] painted in its colour at ``alpha``."""
    present = labels.unique()
    masks = labels[None] == present[:, None, None]  # [N, H, W]
    return draw_segmentation_masks(image, masks, alpha=alpha, colors=[palette[int(c)] for c in present])
