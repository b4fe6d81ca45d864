"""Tiny runs of every task for the engine tests: one settings builder per task, the same engine under both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import detkit
import trainkit
from scriptkit import run_script

from swinlite.classification import ClassificationTask
from swinlite.detection.task import DetectionTask
from swinlite.engine import Task

TASKS: dict[str, type[Task]] = {"classification": ClassificationTask, "detection": DetectionTask}
DATA_FIXTURE = {"classification": "folder", "detection": "coco"}  # conftest fixtures of each task's tiny data
SCRIPT = {"classification": "train", "detection": "train_detection"}  # scripts/<name>.py


def overrides(task: str, data: Path, out: Path, **extra: object) -> list[str]:
    """``key=value`` settings of a run of a few seconds (see trainkit / detkit)."""
    kit = trainkit if task == "classification" else detkit
    return kit.tiny_overrides(data, out, **extra)


def tiny_config(task: str, data: Path, out: Path, **extra: object) -> Any:
    """The config the task's script builds from ``overrides`` (classification: on top of configs/demo.yaml)."""
    path = trainkit.REPO / "configs" / "demo.yaml" if task == "classification" else None
    return TASKS[task].load_config(path, overrides(task, data, out, **extra))


def script_config(task: str, folder: Path) -> Path:
    """The ``--config`` that gives the task's script ``tiny_config``'s settings with ``overrides``: the demo recipe for
    classification, the built-in defaults for detection (an empty file written into ``folder``)."""
    if task == "classification":
        return trainkit.REPO / "configs" / "demo.yaml"
    (folder / "defaults.yaml").write_text("{}\n")
    return folder / "defaults.yaml"


def script_main(task: str, argv: list[object]) -> int:
    """The task's training script run in this process as from the command line; returns its exit code."""
    return run_script(SCRIPT[task], argv)
