"""Tiny runs of every task for the engine tests: one settings builder per task, the same engine under all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import detkit
import segkit
import trainkit

from swinlite.classification import ClassificationTask
from swinlite.detection.task import DetectionTask
from swinlite.engine import Task
from swinlite.segmentation.task import SegmentationTask

TASKS: dict[str, type[Task]] = {
    "classification": ClassificationTask,
    "detection": DetectionTask,
    "segmentation": SegmentationTask,
}
DATA_FIXTURE = {"classification": "folder", "detection": "coco", "segmentation": "seg_folder"}  # conftest fixtures
SCRIPT = {"classification": "train.py", "detection": "train_detection.py", "segmentation": "train_segmentation.py"}
KITS = {"classification": trainkit, "detection": detkit, "segmentation": segkit}


def overrides(task: str, data: Path, out: Path, **extra: object) -> list[str]:
    """``key=value`` settings of a run of a few seconds (see trainkit / detkit / segkit)."""
    return KITS[task].tiny_overrides(data, out, **extra)


def config_file(task: str) -> Path | None:
    """The config file the tiny runs start from: classification's demo recipe, the others' built-in defaults."""
    return trainkit.REPO / "configs" / "demo.yaml" if task == "classification" else None


def tiny_config(task: str, data: Path, out: Path, **extra: object) -> Any:
    """The config the task's script builds from ``overrides`` (classification: on top of configs/demo.yaml)."""
    return TASKS[task].load_config(config_file(task), overrides(task, data, out, **extra))
