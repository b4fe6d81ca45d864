"""Build the model, optimizer, schedule, loss, mixup and EMA a config describes (timm pieces throughout)."""

from __future__ import annotations

import difflib
import math
from pathlib import Path

import timm
import torch
from timm.data import Mixup
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from timm.utils import ModelEmaV3
from torch import nn

from .config import Config, DataConfig, ModelConfig


def check_config(cfg: Config) -> None:
    """ValueError for settings that cannot work, before any data is read."""
    if cfg.train.amp not in ("none", "bf16", "fp16"):
        raise ValueError(f"train.amp must be none, bf16 or fp16, got {cfg.train.amp!r}")
    if cfg.data.dataset not in ("folder", "digits"):
        raise ValueError(f"data.dataset must be 'folder' or 'digits', got {cfg.data.dataset!r}")
    for key, value in (("train.epochs", cfg.train.epochs), ("optim.accum_steps", cfg.optim.accum_steps)):
        if value < 1:
            raise ValueError(f"{key} must be at least 1, got {value}")
    if cfg.data.batch_size < 1 or cfg.data.img_size < 1:
        raise ValueError("data.batch_size and data.img_size must be positive")
    if (cfg.data.mixup > 0 or cfg.data.cutmix > 0) and cfg.data.batch_size % 2:
        raise ValueError(f"mixup/cutmix need an even data.batch_size, got {cfg.data.batch_size}")
    if not timm.is_model(cfg.model.name):
        close = difflib.get_close_matches(cfg.model.name, timm.list_models(), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else "e.g. swinlite_pico_patch2_window4_32"
        raise ValueError(f"model.name {cfg.model.name!r} is not a timm model; {hint}")
    source = pretrained_source(cfg.model.pretrained)
    if source is True and not timm.models.is_model_pretrained(cfg.model.name):
        tags = timm.list_pretrained(cfg.model.name.split(".")[0] + ".*")
        raise ValueError(
            f"model.pretrained=true but {cfg.model.name!r} has no pretrained weights; tags with weights: "
            + (", ".join(tags) or "none (give a weights file instead)")
        )
    if isinstance(source, str) and not Path(source).is_file():
        raise ValueError(f"model.pretrained {source!r} is not a file (true loads the weights of model.name's tag)")


def pretrained_source(value: str | None) -> bool | str:
    """``model.pretrained``: False (none), True (the model name's pretrained tag) or a weights file path."""
    text = str(value).lower()
    if value is None or text in ("false", "no", "off", "none"):
        return False
    return True if text in ("true", "yes", "on") else str(value)


def build_model(cfg: ModelConfig, num_classes: int) -> nn.Module:
    """``timm.create_model``, starting from the name's pretrained weights or a file in any Swin layout.

    Both go through timm's loader and ``convert_state_dict``: bias tables are resized, a classifier of
    another size starts fresh (warned), a missing backbone weight is a ValueError.
    """
    kwargs = {} if cfg.drop_path_rate is None else {"drop_path_rate": cfg.drop_path_rate}
    source = pretrained_source(cfg.pretrained)
    if isinstance(source, str):
        kwargs["pretrained_cfg_overlay"] = dict(file=source)
    model = timm.create_model(cfg.name, pretrained=source is not False, num_classes=num_classes, **kwargs)
    if cfg.grad_checkpointing:
        model.set_grad_checkpointing(True)
    return model


def build_optimizer(model: nn.Module, cfg: Config, global_batch: int) -> torch.optim.Optimizer:
    """timm optimizer; no weight decay on norms, biases and ``model.no_weight_decay()``; optional layer decay."""
    lr = cfg.optim.lr if cfg.optim.lr_base_batch is None else cfg.optim.lr * global_batch / cfg.optim.lr_base_batch
    return create_optimizer_v2(
        model,
        opt=cfg.optim.opt,
        lr=lr,
        weight_decay=cfg.optim.weight_decay,
        momentum=cfg.optim.momentum,
        layer_decay=cfg.optim.layer_decay,
        filter_bias_and_bn=True,
    )


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: Config, steps_per_epoch: int) -> CosineLRScheduler:
    """Linear warm-up then cosine decay, both counted in optimizer steps."""
    total = cfg.train.epochs * steps_per_epoch
    warmup = min(math.ceil(cfg.schedule.warmup_epochs * steps_per_epoch), total - 1)
    return CosineLRScheduler(
        optimizer,
        t_initial=total - warmup,
        lr_min=cfg.schedule.min_lr,
        warmup_t=warmup,
        warmup_lr_init=cfg.schedule.warmup_lr,
        warmup_prefix=True,
        t_in_epochs=False,
    )


def build_mixup(cfg: DataConfig, label_smoothing: float, num_classes: int) -> Mixup | None:
    if cfg.mixup <= 0 and cfg.cutmix <= 0:
        return None
    return Mixup(
        mixup_alpha=cfg.mixup, cutmix_alpha=cfg.cutmix, label_smoothing=label_smoothing, num_classes=num_classes
    )


def build_loss(mixup: Mixup | None, label_smoothing: float) -> nn.Module:
    """Soft-target CE after mixup (which smooths labels itself), else label-smoothing or plain CE."""
    if mixup is not None:
        return SoftTargetCrossEntropy()
    if label_smoothing > 0:
        return LabelSmoothingCrossEntropy(smoothing=label_smoothing)
    return nn.CrossEntropyLoss()


def build_ema(model: nn.Module, decay: float | None) -> ModelEmaV3 | None:
    return None if decay is None else ModelEmaV3(model, decay=decay)
