"""Checks of a run's settings that involve more than one key, made before anything is read or written, and the
settings left to the model, resolved once."""

from __future__ import annotations

import contextlib
import re
import warnings
from pathlib import Path
from typing import Any

import torch
from timm.data import resolve_model_data_config
from timm.optim import get_optimizer_info
from torch import nn

from ..fast import FAST_MODULES
from ..files import task_record_problem, unknown_task_files
from ..io import read_metadata, resume_task
from ..metadata import recorded_preprocessing
from .config import apply_overrides, check_values, copy_config, read_yaml
from .model import check_model, check_pretrained, meta_model, pretrained_file, with_grad_checkpointing
from .optim import check_optimizer
from .sections import optimizer_name
from .task import Task


def check_task(task: type[Task]) -> None:
    """ValueError, before anything is read or written, for a task class that leaves abstract methods of :class:`Task`
    undefined (a missing ``model_for`` was a TypeError traceback once the output folder was locked), gives a
    ``metric_format`` that formats no score (it failed the run's last line, after training), or declares as
    its files names the run's record of them may not hold (a path, a hidden name, a file of swinlite's own: said
    only as the record was written, in the locked output folder)."""
    missing = sorted(getattr(task, "__abstractmethods__", ()))
    if missing:
        raise ValueError(
            f"task {task.__name__} does not define {', '.join(missing)} (abstract methods of swinlite.engine.Task, "
            "each needed by the run): define them in the class"
        )
    try:
        format(0.0, task.metric_format)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"task {task.__name__}'s metric_format {task.metric_format!r} formats no score ({e}): give a format spec "
            "such as '.2f' or '.4g'"
        ) from None
    declared = sorted(set(task_written(task)))
    if declared and (problem := task_record_problem(declared)):
        raise ValueError(
            f"task {task.__name__}'s output_files and evaluation_files: {problem}; name plain files of the output "
            "folder that swinlite does not write itself"
        )


def task_written(task: type[Task]) -> list[str]:
    """The files ``task`` writes in its run folder (its own, its evaluate script's) that swinlite's tables of the
    shipped tasks' files do not name: what its run records (:data:`~swinlite.files.TASK_RECORD`)."""
    return unknown_task_files([*task.output_files, *task.evaluation_files])


def check_run(task: type[Task], cfg) -> None:
    """ValueError for settings that cannot work together, then the model's checks and the task's own (which may build
    the model, on the meta device), ``optim.layer_decay``'s and ``model.grad_checkpointing``'s
    (:func:`check_model_structure`), the data's existence, and last whether the pretrained weights can be had (which
    may ask the hub): a mistyped ``--data-dir`` is named before weights are looked for."""
    if cfg.train.best_of == "ema" and cfg.train.ema_decay is None:
        raise ValueError("train.best_of=ema needs train.ema_decay (e.g. train.ema_decay=0.9998)")
    if cfg.train.ema_warmup and cfg.train.ema_decay is None:
        raise ValueError("train.ema_warmup=true needs train.ema_decay (e.g. train.ema_decay=0.9998)")
    check_decay_schedule(cfg.schedule)
    warn_unused_schedule(cfg.schedule)
    warn_rising_lr(cfg.optim.lr, cfg.schedule)
    check_optimizer(cfg.optim)
    check_model(cfg.model, task.reserved_kwargs, task.model_name(cfg))
    task.check_config(cfg)
    check_model_structure(task, cfg)
    task.check_inputs(cfg)
    check_pretrained(cfg.model)


def check_decay_schedule(schedule: Any) -> None:
    """A step schedule's ``decay_epochs``: given, in order (:func:`check_decay_epochs`)."""
    if schedule.kind == "step":
        if not schedule.decay_epochs:
            raise ValueError("schedule.kind=step needs schedule.decay_epochs, e.g. schedule.decay_epochs=[8,11]")
        check_decay_epochs(schedule.decay_epochs)


# the schedule settings each schedule.kind reads (swinlite.engine.optim.build_scheduler), as timm's schedulers do
SCHEDULE_READS = {
    "cosine": ("warmup_epochs", "warmup_lr", "min_lr"),
    "poly": ("warmup_epochs", "warmup_lr", "min_lr", "power"),
    "step": ("warmup_epochs", "warmup_lr", "decay_epochs", "decay_rate"),
}


def warn_unused_schedule(schedule: Any) -> None:
    """One UserWarning per schedule setting that ``schedule.kind`` does not read (:data:`SCHEDULE_READS`) and that
    differs from the task's default (:func:`warn_unused`): a ``min_lr`` given to a step schedule, or ``decay_epochs``
    to a cosine one, changed nothing without a word. So is a ``warmup_lr`` without a warm-up (``warmup_epochs=0``):
    every kind reads it only during one."""
    unused: dict[str, str] = {}
    if schedule.warmup_epochs == 0:
        unused["warmup_lr"] = "schedule.warmup_epochs=0 (no warm-up); give schedule.warmup_epochs to warm up from it"
    for name in dict.fromkeys(name for names in SCHEDULE_READS.values() for name in names):  # each once, in order
        if name not in SCHEDULE_READS[schedule.kind]:
            readers = " or ".join(kind for kind, names in SCHEDULE_READS.items() if name in names)
            unused[name] = f"schedule.kind={schedule.kind} does not read it, only schedule.kind={readers}"
    warn_unused(schedule, "schedule", unused)


def warn_unused(section: Any, prefix: str, unused: dict[str, str]) -> None:
    """One UserWarning per setting of the config ``section`` (named ``prefix``: ``model``, ``data``) that another
    setting leaves unused (``unused``: its name -> what leaves it unused) and that differs from its default (the
    section's dataclass field's, the task's): warned of, not refused (a recipe may keep the settings of another
    choice), but the run's ``config.yaml`` records it as if it were used. A task's :meth:`Task.check_config` names
    its own (the R-CNN heads' widths under RetinaNet, an auxiliary head's width without one); the run shows each once
    (rank 0)."""
    default = type(section)()
    for name, why in unused.items():
        if getattr(section, name) != getattr(default, name):
            warnings.warn(f"{prefix}.{name} is unused: {why}", stacklevel=2)


def check_decay_epochs(epochs: tuple[float, ...]) -> None:
    """ValueError for ``schedule.decay_epochs`` out of order: timm's MultiStepLRScheduler bisects them as sorted, so
    [2,1] applied both decays after epoch 1. A repeated epoch decays twice there, as torch's MultiStepLR does."""
    if list(epochs) != sorted(epochs):
        listed = ",".join(f"{e:g}" for e in sorted(epochs))
        raise ValueError(f"schedule.decay_epochs must be in increasing order: give schedule.decay_epochs=[{listed}]")


def warn_rising_lr(lr: float, schedule: Any) -> None:
    """UserWarning for a ``schedule.min_lr`` (cosine, poly) or a ``schedule.warmup_lr`` (with a warm-up) above the peak
    ``optim.lr``: the "decay" then raises the lr, the warm-up lowers it. Warned of, not refused: timm accepts it, and a
    timm recipe keeps running. ``optim.lr_base_batch`` scales all three alike, so the settings are compared as given."""
    if schedule.kind != "step" and schedule.min_lr > lr:
        warnings.warn(
            f"schedule.min_lr {schedule.min_lr:g} is above optim.lr {lr:g}: the {schedule.kind} decay raises the lr to "
            "schedule.min_lr",
            stacklevel=2,
        )
    if schedule.warmup_epochs > 0 and schedule.warmup_lr > lr:
        warnings.warn(
            f"schedule.warmup_lr {schedule.warmup_lr:g} is above optim.lr {lr:g}: the warm-up lowers the lr to "
            "optim.lr",
            stacklevel=2,
        )


STAND_IN_CLASSES = ["class 1", "class 2"]  # the data's classes are not known before its scan
# how torch names its meta device in a failure of its own ("Cannot copy out of meta tensor", "... from the 'Meta'
# backend", "... on meta tensors"): the word, not a part of one ("metadata" of a weights file's error)
_META_FAILURE = re.compile(r"\bmeta\b", re.IGNORECASE)


def check_weights_fit(task: type[Task], cfg: Any) -> None:
    """ValueError, before any data is read or written, for ``model.pretrained`` weights that do not load into the
    task's model (a file of a layout swinlite does not read, another task's or model's weights, ``model.kwargs`` that
    change a weight's shape): the task's model (:meth:`~swinlite.engine.task.Task.model_for`) built on the meta device
    with stand-in classes, the weights read and fitted as the run's build fits them, without their memory. They were
    refused only after the data scan, which was wasted and left its cache in the output folder. What the build warns
    of (a classifier of another size starting fresh) is left to the run's, which knows the classes."""
    if cfg.model.pretrained is not False:
        _stand_in_model(task, cfg)


def check_model_structure(task: type[Task], cfg: Any) -> None:
    """ValueError, before any data is read, for a setting the task's model cannot serve, that model built once on the
    meta device without its weights, and only where such a setting is on: ``optim.layer_decay`` where it has no timm
    ``group_matcher`` to order its layers by (detection's, segmentation's, a contributor's model that wraps a timm
    one: timm's optimizer factory said only "Layer-wise lr decay has no effect" in a log line, after the data scan,
    and the run trained without it); ``model.grad_checkpointing=true`` where it can neither be set to checkpoint nor
    holds a module that does (:func:`~swinlite.engine.model.with_grad_checkpointing`, which the run applies to its
    model: it was refused only as the run built its model, after the data scan); a second-order ``optim.opt``
    (``adahessian``) where the model holds swinlite's fast modules, which compute first derivatives only (the first
    step failed, after the data scan)."""
    second_order = get_optimizer_info(optimizer_name(cfg.optim.opt)).second_order  # a known name: check_optimizer's
    if cfg.optim.layer_decay is None and not cfg.model.grad_checkpointing and not second_order:
        return
    model = _unweighted_model(task, cfg)
    if model is None:
        return
    if second_order and any(type(module) in FAST_MODULES.values() for module in model.modules()):
        raise ValueError(
            f"optim.opt={cfg.optim.opt} is second order (its Hessian differentiates the gradients), which swinlite's "
            "fast path does not compute: set model.kwargs.fast=false"
        )
    if cfg.optim.layer_decay is not None and not hasattr(model, "group_matcher"):
        raise ValueError(
            f"optim.layer_decay is not available for {task.name}: its model ({type(model).__name__}) has no timm "
            "group_matcher to order its layers by; leave optim.layer_decay unset (or give the model a group_matcher)"
        )
    if cfg.model.grad_checkpointing:
        with_grad_checkpointing(model)


def _unweighted_model(task: type[Task], cfg: Any) -> nn.Module | None:
    """:func:`_stand_in_model` of the model's structure, not its weights (``model.pretrained``'s are
    :func:`~swinlite.engine.model.check_pretrained`'s, last), the data's mean and std resolved (a detector's build
    takes them)."""
    unweighted = copy_config(cfg)
    unweighted.model.pretrained = False
    return _stand_in_model(task, resolve_normalisation(task, unweighted))


def _stand_in_model(task: type[Task], cfg: Any) -> nn.Module | None:
    """The task's model (:meth:`~swinlite.engine.task.Task.model_for`) built on the meta device with stand-in classes,
    its warnings silenced; None where the meta device itself fails it (left to the run's build)."""
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return task.model_for(cfg, STAND_IN_CLASSES)
        except (RuntimeError, NotImplementedError) as e:
            if not _META_FAILURE.search(str(e)):
                raise
    return None


def check_demo_paths(data: Any, demo: str, keys: tuple[str, ...], instead: str) -> None:
    """ValueError when ``data.dataset`` is the task's built-in ``demo`` while the user's own data paths (``keys`` of
    the data section) are set: the demo would be written into ``data.data_dir`` and trained, those paths ignored or
    read with the demo's classes. ``instead`` says which ``data.dataset`` to set."""
    own = [f"data.{key}" for key in keys if getattr(data, key)]
    if data.dataset == demo and own:
        verb = "points" if len(own) == 1 else "point"
        raise ValueError(
            f"{', '.join(own)} {verb} at your own data, but data.dataset={demo} trains the built-in demo (written into "
            f"data.data_dir {data.data_dir}); set {instead} to train on your files"
        )


MODEL_DATA_KEYS = ("mean", "std", "crop_pct", "interpolation")  # data keys that, unset (None), are the model's


def resolve_normalisation(task: type[Task], cfg: Any, resume: bool = False) -> Any:
    """``cfg``, or a copy whose data keys of :data:`MODEL_DATA_KEYS` (those its data section has: classification's all
    four, detection's and segmentation's mean and std) left unset (None) are the model's pretrained config's
    (``timm.data.resolve_model_data_config`` of the model built on the meta device; where it gives none, timm's
    defaults: ImageNet's statistics, crop 0.875, bicubic), as timm's train.py takes them unless --mean, --std,
    --crop-pct or --interpolation are given: ImageNet's statistics, bicubic and the tag's evaluation crop (0.9; 1.0 at
    384) for swinlite models, statistics of 0.5 for many ViTs. A value given stays. Resolved once, after the model is
    checked and before anything is written: ``config.yaml``, ``--resume``'s comparison with it, every task's transforms
    and the weights files see values. With ``resume``, an unset key that the run's ``config.yaml`` records (a value the
    key takes) is the run's own: a run started before unset meant the model's keeps what its epochs so far were trained
    and evaluated with. A new run whose ``model.pretrained`` is a weights file that records them (a swinlite run's:
    :func:`pretrained_data`) takes its unset keys from the file, before the model's: the weights go on with the
    normalisation they were trained with; a value given that differs from the file's is warned of, once.
    """
    recorded = {} if resume else pretrained_data(cfg)
    _warn_unlike_record(cfg, recorded)
    unset = [key for key in MODEL_DATA_KEYS if hasattr(cfg.data, key) and getattr(cfg.data, key) is None]
    if not unset:
        return cfg
    values = _recorded_data(cfg, unset) if resume else {key: recorded[key] for key in unset if key in recorded}
    values |= _model_data(task, cfg, [key for key in unset if key not in values])
    cfg = copy_config(cfg)
    for key in unset:
        setattr(cfg.data, key, values[key])
    return cfg


def pretrained_data(cfg: Any) -> dict[str, Any]:
    """The data keys of :data:`MODEL_DATA_KEYS` (those ``cfg``'s data section has) that the weights file
    ``model.pretrained`` names records, as the section holds them: a swinlite classification run's preprocessing
    (mean, std, crop_pct, interpolation), another task's run's mean and std, or those a backbone converted from such a
    run keeps (:func:`~swinlite.metadata.recorded_preprocessing`); {} for another file, or ``model.pretrained`` true or
    false. A recorded value the key does not take (a 1-channel model's one mean) is left
    out: such weights do not fit the run's model, which :func:`check_weights_fit` says, naming their shapes.

    Raises:
        ValueError: a classifier's metadata that is wrong, a task that is no name, a recorded mean or std that is no
            list of numbers (naming the file).
    """
    path = pretrained_file(cfg.model)
    if path is None:
        return {}
    record = _record_of(path)
    values = {}
    for key in (key for key in MODEL_DATA_KEYS if hasattr(cfg.data, key) and key in record):
        with contextlib.suppress(ValueError):
            values[key] = _taken(cfg, key, record[key])
    return values


def inherited_setting(cfg: Any, key: str) -> tuple[Any, str] | None:
    """(value, where it comes from) of the data key ``key`` where it is unset and the ``model.pretrained`` weights
    file records it (:func:`pretrained_data`: what :func:`resolve_normalisation` gives a new run), for a task's check
    of the value the run will use, before the model and weights are checked; None otherwise, or where the file does
    not read (:func:`~swinlite.engine.model.check_pretrained` names it next)."""
    if getattr(cfg.data, key) is not None:
        return None
    try:
        value = pretrained_data(cfg).get(key)
    except (OSError, ValueError):
        return None
    return None if value is None else (value, f"recorded by model.pretrained {cfg.model.pretrained}")


def _record_of(path: str) -> dict[str, Any]:
    """The data settings the weights file ``path`` records (:func:`~swinlite.metadata.recorded_preprocessing`; a
    classification run's ``resume.pt``, which loads as its raw weights: the run's ``config.yaml`` beside it), {} where
    it records none."""
    meta = read_metadata(path)
    if not meta and resume_task(path) is not None:  # a run's resume.pt: its settings are the config.yaml beside it
        data = _config_data(Path(path).parent / "config.yaml")
        return {key: data[key] for key in MODEL_DATA_KEYS if data.get(key) is not None}
    return recorded_preprocessing(meta, path)


def _warn_unlike_record(cfg: Any, recorded: dict[str, Any]) -> None:
    """One warning naming the data keys set to other values than the ``model.pretrained`` file records (a fine-tune
    may change them on purpose; null, they are the file's). Not ``crop_pct``: the evaluation's crop, which the
    weights were not trained with (a fine-tune at 384 evaluates uncropped from weights a 0.875 crop scored)."""
    given = {
        key: getattr(cfg.data, key) for key in recorded if key != "crop_pct" and getattr(cfg.data, key) is not None
    }
    unlike = [f"data.{key}={_shown(value)} (the file's: {_shown(recorded[key])})"
              for key, value in given.items() if value != recorded[key]]  # fmt: skip
    if unlike:
        warnings.warn(
            f"model.pretrained {cfg.model.pretrained} was trained with other data settings than this run's: "
            f"{'; '.join(unlike)}; training with this run's (null takes the file's)",
            stacklevel=3,
        )


def _shown(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _model_data(task: type[Task], cfg: Any, keys: list[str]) -> dict[str, Any]:
    """``keys`` of the model's pretrained config (``timm.data.resolve_model_data_config`` of the model built on the
    meta device), as the data section holds them; ValueError for a value the key does not take (e.g. a mean of one
    value)."""
    if not keys:
        return {}
    name = task.model_name(cfg)
    resolved = resolve_model_data_config(meta_model(name, cfg.model.kwargs))
    values = {}
    for key in keys:
        try:
            values[key] = _taken(cfg, key, resolved[key])
        except ValueError as e:
            shown = _shown(resolved[key])
            raise ValueError(f"data.{key}: {name}'s pretrained config gives {shown!r} ({e}); set data.{key}") from None
    return values


def _recorded_data(cfg: Any, keys: list[str]) -> dict[str, Any]:
    """The values of ``keys`` in the data section of the run's ``config.yaml`` in ``train.output_dir``, each where it
    records one its key takes; {} without the file (an unreadable one: the resume check names it)."""
    data = _config_data(Path(cfg.train.output_dir) / "config.yaml")
    found = {}
    for key in (key for key in keys if data.get(key) is not None):
        with contextlib.suppress(ValueError):
            found[key] = _taken(cfg, key, data[key])
    return found


def _config_data(path: Path) -> dict[str, Any]:
    """The data section of the run config ``path``; {} without the file, or an unreadable one."""
    try:
        data = read_yaml(path).get("data") if path.is_file() else None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _taken(cfg: Any, key: str, value: Any) -> Any:
    """``value`` as the data section's key ``key`` holds it, converted and checked as a config value is
    (:func:`~swinlite.engine.config.apply_overrides`, :func:`~swinlite.engine.config.check_values`).

    Raises:
        ValueError: a value the key does not take (of another type or length, outside its range or choices).
    """
    taken = apply_overrides(cfg, {f"data.{key}": value})
    check_values(taken)
    return getattr(taken.data, key)
