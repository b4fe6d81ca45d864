"""What a self-describing weights file records about its model, checked where it is written and where it is read.

Every classification weights file ``scripts/train.py`` writes is a safetensors file whose metadata (each
value a JSON string) holds:

=================  ==========================================================================================
key                value
=================  ==========================================================================================
``format``         1 (this schema's version)
``task``           ``"classification"``
``model``          timm model name, e.g. ``"swinlite_tiny_patch4_window7_224"``
``model_args``     constructor arguments that differ from the variant's defaults, e.g. ``{"num_classes": 2}``
``classes``        class names (strings) in output order, as many as the classifier has outputs
``preprocessing``  timm data config of the evaluation transform: ``input_size`` [C, H, W] (C: ``model_args``'
                   ``in_chans``, default 3), ``interpolation``, ``mean``, ``std`` (C values each), ``crop_pct``
                   (in (0, 1]), ``crop_mode``;
                   ``timm.data.create_transform(**preprocessing)`` is the run's val transform
``weights``        ``"raw"`` (the trained weights) or ``"ema"`` (their exponential moving average)
``swinlite``       the swinlite version that wrote the file
``epoch``          epochs done when written
``val_top1``       the run's val top-1 (%) of these weights at that epoch
=================  ==========================================================================================

A value of the wrong type or range is a ValueError naming the file and the key, when written
(:func:`weights_metadata`) and when read (:func:`read_info`): a file never loads as a silently different model.

A model record (:func:`is_model_record`: ``scripts/convert_checkpoint.py``'s output fitted to ``--model``, or a
backbone's file, its conversion of a detection or segmentation run's Swin) records no task and no classes: its
``model``, its ``model_args`` (a run's ``model.kwargs`` but for training settings; none for ``--model``, built by
default) with ``num_classes`` its classifier's outputs (0 for a backbone, which has none; unnamed classes otherwise),
``weights``, and, converted from a run, ``preprocessing``: the ``mean`` and ``std`` the run normalized its input with
(the run resizes as its task does: no size, crop or interpolation). :func:`read_info` reads it as plain weights
(None); :func:`swinlite.load_model` builds the model it records, its ``pretrained_cfg`` giving that mean and std
(:func:`recorded_preprocessing`), and the other loaders warn of its settings a model was built without
(:func:`swinlite.load_checkpoint`, ``model.pretrained``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FORMAT = 1
KINDS = ("raw", "ema")
PREPROCESSING_KEYS = ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "box", "hamming", "lanczos")
CROP_MODES = ("center", "squash", "border")
SCRIPTS = {  # what reads each task's checkpoints, named where a script is given another task's
    "classification": "scripts/predict.py or scripts/evaluate.py",
    "detection": "scripts/detect.py or scripts/evaluate_detection.py",
    "segmentation": "scripts/segment.py or scripts/evaluate_segmentation.py",
}


def scripts_of(task: object) -> str:
    """Where a checkpoint of ``task`` (its metadata's) is read: ``"; use scripts/..."``; for a task of none of
    :data:`SCRIPTS` (one trained outside swinlite), that swinlite's scripts read those tasks' alone; ``""`` for a
    file that names no task (None)."""
    if task is None:
        return ""
    if isinstance(task, str) and task in SCRIPTS:
        return f"; use {SCRIPTS[task]}"
    known = ", ".join(SCRIPTS)
    return f"; swinlite's scripts read {known} checkpoints only: read it with the code of the task that wrote it"


@dataclass(frozen=True)
class WeightsInfo:
    """The metadata of a self-describing weights file (see the module docstring)."""

    model: str
    model_args: dict[str, Any]
    classes: list[str]
    preprocessing: dict[str, Any]
    weights: str = "raw"
    task: str = "classification"
    extra: dict[str, Any] = field(default_factory=dict)  # epoch, val_top1, swinlite version, ...


def weights_metadata(
    model: str,
    model_args: Mapping[str, Any],
    classes: list[str],
    preprocessing: Mapping[str, Any],
    weights: str = "raw",
    **extra: Any,
) -> dict[str, Any]:
    """The metadata dict to save beside the tensors (``swinlite.io.save_safetensors`` JSON-encodes each value).

    Raises:
        ValueError: a value :func:`read_info` would refuse.
    """
    from . import __version__

    missing = [k for k in PREPROCESSING_KEYS if k not in preprocessing]
    if missing:
        raise ValueError(f"preprocessing lacks {', '.join(missing)}")
    meta = {
        "format": FORMAT,
        "task": "classification",
        "model": model,
        "model_args": dict(model_args) if isinstance(model_args, Mapping) else model_args,
        "classes": classes if isinstance(classes, str) else list(classes),
        "preprocessing": {k: preprocessing[k] for k in PREPROCESSING_KEYS},
        "weights": weights,
        "swinlite": __version__,
        **extra,
    }
    parse_info(meta, "weights metadata")
    return meta


def read_info(path: str | os.PathLike, data: bytes | None = None) -> WeightsInfo | None:
    """The recorded metadata, or None for a file that does not describe its model (torch files, converted ones).

    ``data``: the file's bytes, read before (:func:`swinlite.io.read_weights_bytes`), read instead of the file.

    A file whose metadata records no task (none, or ``"task": null``) is read as a classifier's or plain weights.

    Raises:
        ValueError: an unreadable file; a file of another task (a detector); metadata of the wrong type or
            range (names the file and the key).
    """
    from .io import read_metadata  # here: the checks below import no torch (the ONNX predictor uses them)

    return info_in(read_metadata(path, data), path)


def info_in(meta: Mapping[str, Any], path: str | os.PathLike) -> WeightsInfo | None:
    """:func:`read_info` of the metadata of ``path`` read before (:func:`swinlite.io.read_weights`)."""
    task = meta.get("task")  # null, as absent: a file that records no task (another tool's) is plain weights
    if task is not None and task != "classification":
        if not isinstance(task, str) or not task:
            raise ValueError(f"{path}: metadata task must be a task's name (e.g. 'classification'), got {task!r}")
        raise ValueError(f"{path} is a {task} checkpoint, not a classifier's{scripts_of(task)}")
    if ("model" not in meta and "classes" not in meta) or is_model_record(meta):
        return None
    return parse_info(meta, str(path))


def is_model_record(meta: Mapping[str, Any]) -> bool:
    """Whether ``meta`` (a file's) records its model alone (see the module docstring): a model, no task and no
    classes, and ``model_args`` that size its classifier (``num_classes``: 0, a backbone's, none; else that many
    unnamed outputs)."""
    model_args = meta.get("model_args")
    bare = "model" in meta and meta.get("task") is None and "classes" not in meta
    outputs = model_args.get("num_classes") if isinstance(model_args, dict) else None
    return bare and _is_int(outputs) and outputs >= 0


# where the weights file of a run of any task but classification records the mean and std it was trained with
# (Task.weights_metadata), in the first of these that holds them: detection's data, segmentation's preprocessing, a
# contributor's task's either, else the run's that the engine adds as preprocessing (with_normalization); a model record
# converted from such a run keeps them as its preprocessing
RUN_RECORDS = ("data", "preprocessing")


def with_normalization(meta: dict[str, Any], normalization: Mapping[str, list[float]]) -> dict[str, Any]:
    """``meta`` (a run's weights metadata, as its task returned it) with those of ``normalization`` (the run's
    resolved ``mean`` and ``std``) that none of its :data:`RUN_RECORDS` holds added under its ``preprocessing`` (made
    where it has none): what :func:`recorded_preprocessing` reads, so a run started from the file (``model.pretrained``)
    takes the normalisation its weights were trained with, as it does from a shipped task's file, which records both
    (returned as it is). A ``preprocessing`` that is no dict is the task's own: ``meta`` is returned as it is."""
    records = [record for record in (meta.get(name) for name in RUN_RECORDS) if isinstance(record, dict)]
    missing = {key: values for key, values in normalization.items() if not any(key in record for record in records)}
    preprocessing = meta.get("preprocessing", {})
    if not missing or not isinstance(preprocessing, dict):
        return meta
    return meta | {"preprocessing": preprocessing | missing}


def recorded_preprocessing(meta: Mapping[str, Any], source: str | os.PathLike) -> dict[str, Any]:
    """The data config a swinlite weights file (``meta``: its metadata) records for its model's input, as JSON decodes
    it (lists): a classifier's preprocessing (:func:`info_in`'s, checked); the ``mean`` and ``std`` a run of another
    task (detection, segmentation, a task of the user's own: :data:`RUN_RECORDS`) normalized its input with, or that a
    model record converted from such a run keeps (its ``preprocessing``); {} for a file that records none (plain
    weights, a model record fitted to ``--model``).

    Raises:
        ValueError: a classifier's metadata that is wrong, a task that is no name (:func:`info_in`); a mean or std that
            is no list of finite numbers (stds positive; a model record's: one per channel of its ``in_chans``).
    """
    task = meta.get("task")
    if isinstance(task, str) and task not in ("", "classification"):  # any other task's run, a contributor's too
        return _normalization([meta.get(name) for name in RUN_RECORDS], None, source)
    info = info_in(meta, source)  # a classifier's or no task's: its checks, and those of a task that is no name
    if info is not None:
        return info.preprocessing
    if not is_model_record(meta):
        return {}
    return _normalization([meta.get("preprocessing")], meta["model_args"].get("in_chans", 3), source)


def _normalization(records: list[Any], channels: int | None, source: str | os.PathLike) -> dict[str, Any]:
    """The ``mean`` and ``std`` of the first of ``records`` (a file's metadata values) that holds each, checked:
    lists of ``channels`` finite numbers (None: any number but none), stds positive."""
    found: dict[str, Any] = {}
    for record in (record for record in records if isinstance(record, dict)):
        found |= {key: record[key] for key in ("mean", "std") if key in record and key not in found}
    for key, values in found.items():
        count = channels or (len(values) if isinstance(values, list) else 0)
        if not (count and finite_numbers(values, count)) or (key == "std" and min(values) <= 0):
            numbers = "positive finite numbers" if key == "std" else "finite numbers"
            expected = f"{channels} {numbers} (its model's in_chans)" if channels else f"a list of {numbers}"
            raise ValueError(f"{source}: its recorded {key} must be {expected}, got {values!r:.80}")
    return found


def parse_info(meta: Mapping[str, Any], source: str) -> WeightsInfo:
    """Decoded metadata -> :class:`WeightsInfo`, every value checked; ValueError naming ``source`` and the key."""
    known = {"format", "task", "model", "model_args", "classes", "preprocessing", "weights"}
    if meta.get("format", FORMAT) != FORMAT:
        raise ValueError(f"{source}: metadata format {meta['format']!r} is not {FORMAT} (a newer swinlite wrote it?)")
    for key in ("model", "classes"):
        if key not in meta:
            raise ValueError(f"{source}: metadata lacks {key!r} (it has {', '.join(sorted(meta))})")
    model = meta["model"]
    if not isinstance(model, str) or not model:
        raise ValueError(f"{source}: metadata model must be a timm model name, got {model!r}")
    classes = _class_names(meta["classes"], source)
    if "preprocessing" in meta:
        preprocessing = meta["preprocessing"]
    else:  # files written before format 1: flat keys
        size = meta.get("img_size", 224)
        flat = ("crop_pct", "interpolation", "mean", "std")
        preprocessing = {"input_size": [3, size, size], "crop_mode": "center"} | {k: meta[k] for k in flat if k in meta}
        known |= {"img_size", *flat}
    model_args = meta.get("model_args", {"num_classes": len(classes)})
    if not isinstance(model_args, dict):
        raise ValueError(f"{source}: metadata model_args must be a JSON object, got {model_args!r}")
    outputs = model_args.get("num_classes", len(classes))
    if outputs != len(classes):
        raise ValueError(f"{source}: metadata names {len(classes)} classes for a classifier of {outputs} outputs")
    preprocessing = check_preprocessing(preprocessing, f"{source}: preprocessing")
    _check_channels(model_args, preprocessing, source)
    weights = meta.get("weights", "raw")
    if weights not in KINDS:
        raise ValueError(f"{source}: metadata weights must be one of {', '.join(KINDS)}, got {weights!r}")
    return WeightsInfo(
        model=model,
        model_args=dict(model_args),
        classes=classes,
        preprocessing=preprocessing,
        weights=weights,
        task="classification",
        extra={k: v for k, v in meta.items() if k not in known},
    )


def _check_channels(model_args: Mapping[str, Any], preprocessing: Mapping[str, Any], source: str) -> None:
    """ValueError unless the preprocessing's channels (``input_size`` [C, H, W], C means and stds: checked before)
    are the model's ``in_chans`` (timm's default 3 where ``model_args`` records none)."""
    in_chans, size = model_args.get("in_chans", 3), list(preprocessing["input_size"])
    if size[0] != in_chans:
        raise ValueError(
            f"{source}: metadata preprocessing input_size {size} has {size[0]} channels but model_args in_chans is "
            f"{in_chans}{'' if 'in_chans' in model_args else ' (the default)'}"
        )


def _class_names(value: Any, source: str) -> list[str]:
    if isinstance(value, str):
        raise ValueError(f"{source}: metadata classes must be a JSON list of names, got the string {value[:60]!r}")
    if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
        raise ValueError(f"{source}: metadata classes must be a non-empty JSON list of strings, got {value!r:.80}")
    duplicates = sorted({c for c in value if value.count(c) > 1})
    if duplicates:
        raise ValueError(f"{source}: metadata classes name {', '.join(duplicates)} more than once")
    return list(value)


def check_preprocessing(preprocessing: Any, name: str) -> dict[str, Any]:
    """A timm data config, checked: ``input_size`` [C, H, W] > 0, C means, C stds > 0, ``crop_pct`` in (0, 1], ...
    (any C: a file's is checked against its model's ``in_chans``, and the predictors refuse all but 3, RGB).

    Args:
        preprocessing: the decoded config.
        name: what the messages call it, naming where it came from (``"best.safetensors: preprocessing"``, or a
            flag: ``"--preprocessing"``), so that a bad value given on the command line does not blame a file.
    """
    if not isinstance(preprocessing, dict):
        raise ValueError(f"{name} must be a JSON object (timm's data config), got {preprocessing!r:.80}")
    pre = dict(preprocessing)

    def bad(key: str, expected: str) -> ValueError:
        return ValueError(f"{name} {key} must be {expected}, got {pre.get(key)!r}")

    size = pre.get("input_size")
    if not (isinstance(size, list | tuple) and len(size) == 3 and all(_is_int(v) and v > 0 for v in size)):
        raise bad("input_size", "[channels, height, width] of positive integers")
    for key in ("mean", "std"):
        values = pre.get(key)
        if key not in pre:
            continue
        if not finite_numbers(values, size[0]):
            raise bad(key, f"{size[0]} finite numbers")
        if key == "std" and min(values) <= 0:
            raise bad(key, "positive")
    crop = pre.get("crop_pct", 1.0)
    if not (_is_finite(crop) and 0 < crop <= 1):
        raise bad("crop_pct", "a number in (0, 1] (the fraction of the resized image the center crop keeps)")
    if pre.get("interpolation", "bicubic") not in INTERPOLATIONS:
        raise bad("interpolation", f"one of {', '.join(INTERPOLATIONS)}")
    if pre.get("crop_mode", "center") not in CROP_MODES:
        raise bad("crop_mode", f"one of {', '.join(CROP_MODES)}")
    return pre


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def finite_numbers(value: Any, count: int) -> bool:
    """Whether a metadata value is a list (or tuple) of ``count`` finite numbers (no bools, NaN or infinities)."""
    return isinstance(value, list | tuple) and len(value) == count and all(map(_is_finite, value))
