"""Tiny runs of every task for the engine tests: one settings builder per task, the same engine under all."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import detkit
import segkit
import trainkit
from scriptkit import run_script
from single_thread import one_thread_only

from swinlite.classification import ClassificationTask
from swinlite.detection.task import DetectionTask
from swinlite.engine import Task, run, trainer
from swinlite.segmentation.task import SegmentationTask

TASKS: dict[str, type[Task]] = {
    "classification": ClassificationTask,
    "detection": DetectionTask,
    "segmentation": SegmentationTask,
}
DATA_FIXTURE = {"classification": "folder", "detection": "coco", "segmentation": "seg_folder"}  # conftest fixtures
SCRIPT = {"classification": "train", "detection": "train_detection", "segmentation": "train_segmentation"}
KITS = {"classification": trainkit, "detection": detkit, "segmentation": segkit}


def overrides(task: str, data: Path, out: Path, **extra: object) -> list[str]:
    """``key=value`` settings of a run of a few seconds (see trainkit / detkit / segkit)."""
    return KITS[task].tiny_overrides(data, out, **extra)


def tiny_config(task: str, data: Path, out: Path, **extra: object) -> Any:
    """The config the task's script builds from ``overrides`` (classification: on top of configs/demo.yaml)."""
    path = trainkit.REPO / "configs" / "demo.yaml" if task == "classification" else None
    return TASKS[task].load_config(path, overrides(task, data, out, **extra))


def finished_run(root: Path, **settings: object) -> tuple[Path, Path]:
    """(data folder, run folder) under ``root``: a tiny classification run of ``settings`` trained to its end, in one
    intra-op thread (module fixtures run before the autouse ``one_thread`` fixture)."""
    with one_thread_only():
        data = trainkit.make_folder(root / "data")
        out = run(TASKS["classification"], tiny_config("classification", data, root / "run", **settings))
    return data, out


def copied_run(finished: tuple[Path, Path], folder: Path) -> tuple[Path, Path]:
    """(data folder, a copy of the run folder at ``folder``): a module fixture's run for a test that changes it."""
    return finished[0], Path(shutil.copytree(finished[1], folder))


def script_config(task: str, folder: Path) -> Path:
    """The ``--config`` that gives the task's script ``tiny_config``'s settings with ``overrides``: the demo recipe for
    classification, the built-in defaults for the other tasks (an empty file written into ``folder``)."""
    if task == "classification":
        return trainkit.REPO / "configs" / "demo.yaml"
    (folder / "defaults.yaml").write_text("{}\n")
    return folder / "defaults.yaml"


def script_main(task: str, argv: list[object]) -> int:
    """The task's training script run in this process as from the command line; returns its exit code."""
    return run_script(SCRIPT[task], argv)


def keep_step_checkpoints(monkeypatch: Any, folder: Path) -> list[Path]:
    """A list that fills, as runs save, with a copy in ``folder`` of each mid-epoch step checkpoint (``stepN.pt``):
    the files a kill could have left behind."""
    saves: list[Path] = []
    save_resume = trainer.save_resume

    def keep_copy(path: Path, state: dict[str, Any]) -> None:
        save_resume(path, state)
        if state["batch"]:
            saves.append(Path(shutil.copy(path, folder / f"step{state['step']}.pt")))

    monkeypatch.setattr(trainer, "save_resume", keep_copy)
    return saves
