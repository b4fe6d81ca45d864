"""The Swin of a detection or segmentation run's weights file, as ``scripts/extract_features.py`` and
``scripts/visualize.py`` read it: its levels as the run's FPN or UperNet head reads them, fed as the run feeds it.

The backbone and its levels are :func:`swinlite.export.run_features`' (what ``scripts/export_onnx.py --features``
exports, the one place that decides a run's levels): the run's trained per-level norms and the levels its FPN or head
reads by default, every raw level with ``raw_levels``. Its ``pretrained_cfg`` records the run's mean and std, and
as ``input_size`` the detector's test size or the segmenter's crop. Such a backbone has no classifier: its pooled
vector (``pretrained_cfg``'s pooling, average) is the spatial mean of its last level as returned, through the run's
norm or raw as the levels are.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from torch import nn

from .convert import recorded_swin
from .export import RUN_SETTINGS, input_size, run_features, run_norms_note, run_out_norm
from .io import file_sha256, read_metadata
from .metadata import recorded_preprocessing
from .models.swin import SwinTransformer
from .weights import check_not_run_resume


def run_task(checkpoint: str | os.PathLike | None) -> str | None:
    """``"detection"`` or ``"segmentation"`` for a run's weights file, else None (a classifier's, another layout).

    Raises:
        ValueError: the file is a swinlite run's resume state (``resume.pt``), refused as every weights loader
            refuses it (:func:`swinlite.weights.check_not_run_resume`), before the options are checked against the
            file.
    """
    if checkpoint is None:
        return None
    check_not_run_resume(checkpoint)
    task = read_metadata(checkpoint).get("task")
    return task if task in RUN_SETTINGS else None


def check_run_options(task: str | None, checkpoint: str | os.PathLike | None, model: str | None, raw: bool) -> None:
    """ValueError for the options a weights file cannot take (``task``: its :func:`run_task`): --model with a run's
    file, which records its Swin; --no-out-norm (``raw``) with any other, which has no run's per-level norms."""
    if task is not None and model is not None:
        raise ValueError(f"--model: not for a {task} checkpoint, which records its Swin; drop --model")
    if task is None and raw:
        raise ValueError(
            f"--no-out-norm leaves out a detection or segmentation run's per-level norms; {checkpoint or model} is no "
            "such run's weights (its levels are the raw ones already): drop --no-out-norm"
        )


class RunLevels(NamedTuple):
    """A run's Swin for its levels (:func:`run_levels`), the levels to give, the name to record beside them, and the
    note for stderr."""

    model: SwinTransformer
    levels: list[int]
    name: str
    note: str | None


def run_levels(checkpoint: str | os.PathLike, raw_levels: bool = False) -> RunLevels:
    """The run's Swin in eval mode, its levels through the run's per-level norms unless ``raw_levels`` (or the run
    trained none), its ``pretrained_cfg`` giving the run's mean, std and input size; the levels to give, through the
    norms those its FPN or head reads (:func:`swinlite.export.run_features`: a RetinaNet's 1..3), raw every level; what
    the levels are of, to record beside them (``"<swin> (detection run's backbone, per-level norms)"``, with
    ``", stage1..stage3"`` where not every level, or ``raw levels``: features of one file with and without the norms
    differ, and so do their names); and, for the norms, the note for stderr (:func:`swinlite.export.run_norms_note`,
    as ``export_onnx.py --features`` says it).

    Raises:
        ValueError: the file is no detection or segmentation run's, or does not load.
    """
    metadata = read_metadata(checkpoint)
    raw = raw_levels or not run_out_norm(metadata)
    features = run_features(checkpoint, False if raw_levels else None)  # its levels: export_onnx.py --features's
    model, levels = features.model, features.out_indices
    if raw:
        model.norm = nn.Identity()  # the pooled vector is the mean of the last level as returned: raw here
    size = input_size(model, checkpoint)
    run_cfg = recorded_preprocessing(metadata, checkpoint)  # the run's mean and std
    model.pretrained_cfg = {**model.pretrained_cfg, **run_cfg, "input_size": (3, *size)}
    some = "" if len(levels) == len(model.layers) else f", stage{levels[0]}..stage{levels[-1]}"
    task = metadata["task"]
    name = f"{recorded_swin(metadata)} ({task} run's backbone, {'raw levels' if raw else 'per-level norms'}{some})"
    return RunLevels(model, levels, name, None if raw else run_norms_note(metadata, f"a {task} checkpoint"))


def hashed_run_levels(checkpoint: str | os.PathLike, raw_levels: bool = False) -> tuple[RunLevels, str]:
    """:func:`run_levels` and the SHA-256 of the file they were read from, for ``extract_features.py``'s
    settings.json. :func:`swinlite.export.run_backbone` reads the file by its path, not hashed bytes: the file is
    hashed first and refused where it changed before the backbone was read (replaced, as a training run replaces its
    best.safetensors, or written in place), which recorded the hash of weights the features are not of.

    Raises:
        ValueError: as :func:`run_levels`, or the file changed while it was read.
    """
    before = _identity(checkpoint)
    sha256 = file_sha256(checkpoint)
    levels = run_levels(checkpoint, raw_levels)
    if _identity(checkpoint) != before:
        raise ValueError(f"{checkpoint} changed while it was read (a training run saving it?): rerun once it is saved")
    return levels, sha256


def _identity(path: str | os.PathLike) -> tuple[int, int, int, int]:
    """What changes when a file is replaced (its inode) or written (its size, modification time)."""
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns
