"""One training epoch and one evaluation pass, free of argument parsing and file handling."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader

from .distributed import DistInfo, all_reduce_sum
from .progress import Progress

SINGLE = DistInfo()  # a single process


@dataclass
class StepSettings:
    """How each optimizer step is taken."""

    device: torch.device
    amp_dtype: torch.dtype | None = None  # autocast dtype; None: full precision
    accum_steps: int = 1
    clip_grad: float | None = None
    log_interval: int = 50
    channels_last: bool = False  # batches in channels-last memory format (for a channels-last model)


@dataclass
class EpochPosition:
    """How far this process is through a training epoch: the resume file keeps it for a restart mid-epoch."""

    batch: int = 0  # micro-batches done in this epoch
    step: int = 0  # optimizer steps taken in the run
    loss_sum: float = 0.0  # summed loss over this process's images so far in this epoch
    count: int = 0  # this process's images so far in this epoch


@dataclass
class EvalResult:
    loss: float
    top1: float  # percent
    top5: float  # percent (top-k with k = min(5, classes))
    confusion: torch.Tensor  # [true class, predicted class] counts
    k: int = 5  # the k of ``top5``: min(5, classes)

    @property
    def per_class_accuracy(self) -> torch.Tensor:
        """Percent correct for each true class (NaN where the class has no images)."""
        return 100.0 * self.confusion.diag() / self.confusion.sum(1)


def autocast(settings: StepSettings) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to ``settings.amp_dtype`` on the settings' device, or a no-op without mixed precision."""
    if settings.amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(settings.device.type, dtype=settings.amp_dtype)


def train_one_epoch(
    model: nn.Module,
    loader: DataLoader,
    loss_fn: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    position: EpochPosition,
    settings: StepSettings,
    *,
    scaler: torch.amp.GradScaler,
    mixup: Callable | None = None,
    ema: nn.Module | None = None,
    dist: DistInfo = SINGLE,
    desc: str = "train",
    on_step: Callable[[EpochPosition], None] | None = None,
) -> tuple[float, float]:
    """Train over ``loader`` once (from ``position.batch`` on, when the loader starts there).

    Args:
        model: the (possibly DDP-wrapped, possibly compiled) model, in train mode on return.
        scheduler: a timm scheduler; ``step_update(n)`` sets the lr for optimizer step ``n``.
        position: where the epoch stands (updated in place): micro-batches done, steps, loss sums.
        scaler: gradient scaler (disabled unless fp16).
        mixup: timm ``Mixup`` (targets become soft) or None.
        ema: timm ``ModelEmaV3`` updated after each optimizer step, or None.
        on_step: called with ``position`` after each optimizer step (e.g. to save a step checkpoint).

    Returns:
        (mean loss over all processes' images of the epoch, images/s of this process in this call)
    """
    model.train()
    total = position.batch + len(loader)  # micro-batches in the whole epoch
    progress = Progress(total, desc, dist.is_main, settings.log_interval)
    images_seen, start = 0, time.perf_counter()
    for images, targets in loader:
        images = images.to(settings.device, non_blocking=True)
        targets = targets.to(settings.device, non_blocking=True)
        if settings.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        if mixup is not None:
            images, targets = mixup(images, targets)
        position.batch += 1
        last_micro = position.batch % settings.accum_steps == 0 or position.batch == total
        sync = contextlib.nullcontext() if last_micro or not dist.enabled else model.no_sync()
        with sync:
            with autocast(settings):
                loss = loss_fn(model(images), targets)
            scaler.scale(loss / settings.accum_steps).backward()
        if last_micro:
            scheduler.step_update(position.step)
            optimizer_step(model, optimizer, scaler, settings.clip_grad)
            position.step += 1
            if ema is not None:
                ema.update(_unwrap(model), step=position.step)
        loss_value = loss.item()
        position.loss_sum, position.count = position.loss_sum + loss_value * len(images), position.count + len(images)
        images_seen += len(images)
        progress.update(position.batch, len(images), loss_value, current_lr(optimizer))
        if last_micro and on_step is not None:
            on_step(position)
    progress.close()
    rate = images_seen / (time.perf_counter() - start)
    loss_sum, count = all_reduce_sum([position.loss_sum, position.count], dist, settings.device)
    return loss_sum / count, rate


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    """The largest lr over parameter groups (layer decay scales the others down)."""
    return max(group["lr"] for group in optimizer.param_groups)


def optimizer_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, clip_grad: float | None
) -> None:
    """Clip the global gradient norm to ``clip_grad`` (if set, after unscaling), step, update the scaler, zero grads."""
    if clip_grad is not None:
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def _unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside ``torch.compile`` and DistributedDataParallel wrappers."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):  # torch.compile's OptimizedModule
            model = model._orig_mod
        else:
            return model


@torch.no_grad()
def evaluate(
    model: nn.Module, loader: DataLoader, num_classes: int, settings: StepSettings, dist: DistInfo = SINGLE
) -> EvalResult:
    """Cross-entropy, top-1/top-5 and the confusion matrix over ``loader`` (summed over processes)."""
    model.eval()
    k = min(5, num_classes)
    loss_sum, top1, topk, count = 0.0, 0.0, 0.0, 0
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.float64, device=settings.device)
    for images, targets in loader:
        images = images.to(settings.device, non_blocking=True)
        targets = targets.to(settings.device, non_blocking=True)
        if settings.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with autocast(settings):
            logits = model(images)
        logits = logits.float()
        loss_sum += nn.functional.cross_entropy(logits, targets, reduction="sum").item()
        best = logits.topk(k, dim=1).indices  # [B, k]
        top1 += (best[:, 0] == targets).sum().item()
        topk += (best == targets[:, None]).any(1).sum().item()
        count += len(targets)
        confusion.index_put_((targets, best[:, 0]), torch.ones_like(targets, dtype=torch.float64), accumulate=True)
    loss_sum, top1, topk, count = all_reduce_sum([loss_sum, top1, topk, count], dist, settings.device)
    if dist.enabled:
        torch.distributed.all_reduce(confusion)
    count = max(count, 1)
    return EvalResult(loss_sum / count, 100.0 * top1 / count, 100.0 * topk / count, confusion.cpu(), k)
