"""What a validation set holds, as ``--resume`` compares it with the set the best scores are of.

The settings that name the set (:func:`~swinlite.engine.trainer.val_set`) stay the same when its files change: an
image removed from ``DIR/val/``, added, or moved to another class folder. The run records a fingerprint of the set
as the task built it (:meth:`~swinlite.engine.task.Task.val_samples`): each file by its path and size (one stat, no
image read: a copy or ``touch`` keeps it), each label as it is (a NumPy or 0-d tensor number as the Python one).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..wording import counted

Sample = tuple[Path | str | int, ...]  # a sample's files (Path) and labels, e.g. (image, class name)


def fingerprint(samples: list[Sample]) -> dict[str, Any] | None:
    """``{"samples": count, "digest": sha256 hex}`` of ``samples``, in any order; None for none (a task that gives
    none: only the settings are compared).

    Raises:
        ValueError: a label JSON cannot hold (:func:`_number`).
    """
    if not samples:
        return None
    folders: dict[str, str] = {}  # folder as given -> resolved: one realpath per folder, not per file
    rows = sorted(json.dumps([_identity(part, folders) for part in sample], default=_number) for sample in samples)
    return {"samples": len(rows), "digest": hashlib.sha256("\n".join(rows).encode()).hexdigest()}


def _identity(part: Path | str | int, folders: dict[str, str]) -> Any:
    """A file as [resolved path, size] (size None: gone since the task read it), a label as it is. Its folder is
    resolved, as :func:`~swinlite.engine.trainer.val_set` resolves the settings' paths: ``data/``, ``./data`` and its
    absolute path hold the same files."""
    if not isinstance(part, Path):
        return part
    folder, name = os.path.split(part)
    if folder not in folders:
        folders[folder] = os.path.realpath(folder or ".")
    path = os.path.join(folders[folder], name)
    try:
        size = os.stat(path).st_size
    except OSError:
        size = None
    return [path, size]


def as_python(value: Any) -> Any:
    """``value`` as Python holds it: a NumPy number or a 0-d array or tensor as its Python number (``.item()``); any
    other value as it is. A task's labels (here) and evaluation scores (the trainer's) come in any of these."""
    if isinstance(value, np.generic | np.ndarray | torch.Tensor) and value.ndim == 0:
        return value.item()
    return value


def _number(label: Any) -> Any:
    """A label JSON does not hold as it is: a NumPy number or a 0-d array or tensor as its Python number (a label
    kept as ``np.int64`` failed the run's start with a TypeError, :func:`as_python`); ValueError for anything else."""
    if (number := as_python(label)) is not label:
        return number
    raise ValueError(
        f"Task.val_samples() returned a sample holding {label!r} ({type(label).__name__}): expected its files as "
        "pathlib.Path and its labels as text or numbers (or lists of them)"
    )


def content_change(saved: dict[str, Any] | None, now: dict[str, Any] | None) -> str | None:
    """How the set of fingerprint ``now`` differs from that of ``saved`` (a resume file's), in words; None where they
    agree, or either is None (a file from before fingerprints were saved, or a task that gives no samples)."""
    if saved is None or now is None or saved == now:
        return None
    was, count = saved["samples"], now["samples"]
    counts = "then and now, not all the same" if was == count else f"then, {count} now"
    return f"the validation files changed: {counted(was, 'sample')} {counts}"
