"""Checks of a run's settings that involve more than one key, made before anything is read or written, and the
settings left to the model, resolved once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from timm.data import resolve_model_data_config

from .config import copy_config, read_yaml
from .model import check_model, check_pretrained, meta_model
from .optim import check_betas
from .task import Task


def check_run(task: type[Task], cfg) -> None:
    """ValueError for settings that cannot work together, then the model's checks and the task's own (which may build
    the model, on the meta device), the data's existence, and last whether the pretrained weights can be had (which
    may ask the hub): a mistyped ``--data-dir`` is named before weights are looked for."""
    if cfg.train.best_of == "ema" and cfg.train.ema_decay is None:
        raise ValueError("train.best_of=ema needs train.ema_decay (e.g. train.ema_decay=0.9998)")
    if cfg.schedule.kind == "step" and not cfg.schedule.decay_epochs:
        raise ValueError("schedule.kind=step needs schedule.decay_epochs, e.g. schedule.decay_epochs=[8,11]")
    check_betas(cfg.optim)
    check_model(cfg.model, task.reserved_kwargs, task.model_name(cfg))
    task.check_config(cfg)
    task.check_inputs(cfg)
    check_pretrained(cfg.model)


def check_demo_paths(data: Any, demo: str, keys: tuple[str, ...], instead: str) -> None:
    """ValueError when ``data.dataset`` is the task's built-in ``demo`` while the user's own data paths (``keys`` of
    the data section) are set: the demo would be written into ``data.data_dir`` and trained, those paths ignored or
    read with the demo's classes. ``instead`` says which ``data.dataset`` to set."""
    own = [f"data.{key}" for key in keys if getattr(data, key)]
    if data.dataset == demo and own:
        raise ValueError(
            f"{', '.join(own)} point at your own data, but data.dataset={demo} trains the built-in demo (written into "
            f"data.data_dir {data.data_dir}); set {instead} to train on your files"
        )


def resolve_normalisation(task: type[Task], cfg: Any, resume: bool = False) -> Any:
    """``cfg``, or a copy whose ``data.mean`` / ``data.std`` left unset (None) are the model's: its pretrained
    config's (``timm.data.resolve_model_data_config`` of the model built on the meta device: ImageNet's for swinlite
    models, 0.5 for many ViTs, ImageNet's where a model gives none), as timm's train.py takes them unless --mean /
    --std are given. A value given stays. Resolved once, after the model is checked and before anything is written:
    ``config.yaml``, ``--resume``'s comparison with it, every task's transforms and the weights files see numbers.
    With ``resume``, unset values are the run's own (its ``config.yaml``'s): a run started before they were the
    model's (ImageNet's for every model) keeps the statistics its epochs so far were trained with.
    """
    data = cfg.data
    if data.mean is not None and data.std is not None:
        return cfg
    unset = [key for key in ("mean", "std") if getattr(data, key) is None]
    statistics = _recorded_data(cfg) if resume else {}
    if len(statistics) < 2:  # a new run, or a run that recorded none: the model's
        statistics = _model_statistics(task, cfg, unset)
    cfg = copy_config(cfg)
    for key in unset:
        setattr(cfg.data, key, statistics[key])
    return cfg


def _model_statistics(task: type[Task], cfg: Any, keys: list[str]) -> dict[str, tuple[float, ...]]:
    """``keys`` (of ``mean``, ``std``) of the model's pretrained config (``timm.data.resolve_model_data_config`` of
    the model built on the meta device); ValueError unless each has one value per RGB channel."""
    name = task.model_name(cfg)
    resolved = resolve_model_data_config(meta_model(name, cfg.model.kwargs))
    statistics = {key: tuple(float(v) for v in resolved[key]) for key in keys}
    for key, values in statistics.items():
        if len(values) != 3:
            raise ValueError(f"data.{key}: {name}'s pretrained config gives {list(values)}, not one value per RGB "
                             f"channel; set data.mean and data.std")  # fmt: skip
    return statistics


def _recorded_data(cfg: Any) -> dict[str, tuple[float, ...]]:
    """``data.mean`` and ``data.std`` of the run's ``config.yaml`` in ``train.output_dir`` where it records three
    numbers for one; {} without the file (an unreadable one: the resume check names it)."""
    path = Path(cfg.train.output_dir) / "config.yaml"
    try:
        data = read_yaml(path).get("data") if path.is_file() else None
    except (OSError, ValueError):
        return {}
    found = {}
    for key in ("mean", "std"):
        value = data.get(key) if isinstance(data, dict) else None
        if isinstance(value, list) and len(value) == 3 and all(isinstance(v, int | float) for v in value):
            found[key] = tuple(float(v) for v in value)
    return found
