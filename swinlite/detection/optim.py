"""AdamW (any timm optimizer) and the step / cosine schedule for detection, counted in optimizer steps."""

from __future__ import annotations

import math

import torch
from timm.optim import create_optimizer_v2, param_groups_weight_decay
from timm.scheduler import CosineLRScheduler, MultiStepLRScheduler
from timm.scheduler.scheduler import Scheduler
from torch import nn

from .config import DetConfig


def no_weight_decay_names(model: nn.Module) -> set[str]:
    """Full parameter names every submodule's ``no_weight_decay()`` lists (e.g. the Swin's rel-pos tables / CPB).

    A torchvision detector has no ``no_weight_decay`` of its own; the Swin inside it, at
    ``backbone.body.model``, does, and its names are relative to itself.
    """
    names = set()
    for prefix, module in model.named_modules():
        if module is not model and hasattr(module, "no_weight_decay"):
            names |= {f"{prefix}.{n}" for n in module.no_weight_decay()}
    return names


def weight_decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two parameter groups: no weight decay for norms, biases (anything 1-D) and relative position tables / CPB,
    ``weight_decay`` for the rest. Frozen parameters are left out."""
    return param_groups_weight_decay(model, weight_decay, no_weight_decay_list=no_weight_decay_names(model))


def build_optimizer(model: nn.Module, cfg: DetConfig) -> torch.optim.Optimizer:
    groups = weight_decay_groups(model, cfg.optim.weight_decay)
    return create_optimizer_v2(groups, opt=cfg.optim.opt, lr=cfg.optim.lr, momentum=cfg.optim.momentum)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: DetConfig, steps_per_epoch: int) -> Scheduler:
    """Linear warm-up over ``schedule.warmup_iters`` steps from ``lr * warmup_ratio``, then step or cosine decay."""
    total = cfg.train.epochs * steps_per_epoch
    warmup = min(cfg.schedule.warmup_iters, total - 1)
    common = dict(warmup_t=warmup, warmup_lr_init=cfg.optim.lr * cfg.schedule.warmup_ratio, t_in_epochs=False)
    if cfg.schedule.kind == "cosine":
        return CosineLRScheduler(
            optimizer, t_initial=total - warmup, lr_min=cfg.schedule.min_lr, warmup_prefix=True, **common
        )
    # timm decays once t + 1 reaches a milestone; +1 so that the first step of epoch e + 1 runs at the lower lr
    milestones = [math.ceil(e * steps_per_epoch) + 1 for e in cfg.schedule.decay_epochs]
    return MultiStepLRScheduler(
        optimizer, decay_t=milestones, decay_rate=cfg.schedule.decay_rate, warmup_prefix=False, **common
    )
