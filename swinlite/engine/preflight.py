"""Checks of a run's settings that involve more than one key, made before anything is read or written."""

from __future__ import annotations

from .model import check_model, check_pretrained
from .optim import check_betas
from .task import Task


def check_run(task: type[Task], cfg) -> None:
    """ValueError for settings that cannot work together, then the task's own checks and the model's, the data's
    existence, and last whether the pretrained weights can be had (which may ask the hub): a mistyped
    ``--data-dir`` is named before weights are looked for."""
    if cfg.train.best_of == "ema" and cfg.train.ema_decay is None:
        raise ValueError("train.best_of=ema needs train.ema_decay (e.g. train.ema_decay=0.9998)")
    if cfg.schedule.kind == "step" and not cfg.schedule.decay_epochs:
        raise ValueError("schedule.kind=step needs schedule.decay_epochs, e.g. schedule.decay_epochs=[8,11]")
    check_betas(cfg.optim)
    task.check_config(cfg)
    check_model(cfg.model, task.reserved_kwargs, task.model_name(cfg))
    task.check_inputs(cfg)
    check_pretrained(cfg.model)
