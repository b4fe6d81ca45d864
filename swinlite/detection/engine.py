"""One detection training epoch and one prediction pass, free of argument parsing and file handling."""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
from torch import nn
from torch.utils.data import DataLoader

from ..train.distributed import DistInfo, all_gather_object, all_reduce_sum
from ..train.engine import StepSettings, autocast, current_lr, optimizer_step
from ..train.progress import Progress
from .data import Categories
from .evaluation import to_coco_results

SINGLE = DistInfo()  # a single process


def loss_column(name: str) -> str:
    """torchvision's loss names as metrics columns: ``loss_classifier`` stays, RetinaNet's ``classification``
    becomes ``loss_classification``."""
    return name if name.startswith("loss_") else f"loss_{name}"


def _to_device(images: list[torch.Tensor], targets: list[dict], device: torch.device) -> tuple[list, list]:
    images = [im.to(device, non_blocking=True) for im in images]
    targets = [{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in t.items()} for t in targets]
    return images, targets


def train_one_epoch(
    model: nn.Module,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    scheduler,
    step: int,
    settings: StepSettings,
    *,
    scaler: torch.amp.GradScaler,
    dist: DistInfo = SINGLE,
    desc: str = "train",
    max_iters: int | None = None,
) -> tuple[dict[str, float], int, float]:
    """Train over ``loader`` once (or its first ``max_iters`` batches).

    Args:
        model: a (possibly DDP-wrapped) torchvision detector; returns its loss dict in train mode.
        scheduler: a timm scheduler; ``step_update(n)`` sets the lr for optimizer step ``n``.
        step: optimizer steps taken before this epoch.
        scaler: gradient scaler (disabled unless fp16).

    Returns:
        ({"train_loss": mean total, "loss_<component>": mean, ...} over all processes' images,
        optimizer steps taken so far, images/s of this process)
    """
    model.train()
    total = len(loader) if max_iters is None else min(max_iters, len(loader))
    progress = Progress(total, desc, dist.is_main, settings.log_interval)
    sums: dict[str, float] = {}
    count, start = 0, time.perf_counter()
    for i, (images, targets) in enumerate(loader):
        if i == total:
            break
        images, targets = _to_device(images, targets, settings.device)
        with autocast(settings):
            losses = model(images, targets)
        loss = sum(losses.values())
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"{desc} step {i + 1}: loss is {loss.item()} ({ {k: v.item() for k, v in losses.items()} })"
            )
        scaler.scale(loss).backward()
        scheduler.step_update(step)
        optimizer_step(model, optimizer, scaler, settings.clip_grad)
        step += 1
        values = {"train_loss": loss.item()} | {loss_column(k): v.item() for k, v in sorted(losses.items())}
        for k, v in values.items():
            sums[k] = sums.get(k, 0.0) + v * len(images)
        count += len(images)
        progress.update(i + 1, len(images), values["train_loss"], current_lr(optimizer))
    progress.close()
    rate = count / (time.perf_counter() - start)
    *totals, count = all_reduce_sum([*sums.values(), count], dist, settings.device)
    return {k: v / count for k, v in zip(sums, totals, strict=True)}, step, rate


@torch.no_grad()
def predict(
    model: nn.Module, loader: DataLoader, categories: Categories, settings: StepSettings, dist: DistInfo = SINGLE
) -> list[dict[str, object]]:
    """COCO result dicts for every image of ``loader`` (each process its shard; all processes' on return)."""
    model.eval()
    results = []
    for images, targets in loader:
        images = [im.to(settings.device, non_blocking=True) for im in images]
        with autocast(settings):
            outputs = model(images)
        for output, target in zip(outputs, targets, strict=True):
            results += to_coco_results(output, target["image_id"], categories)
    return [r for part in all_gather_object(results, dist) for r in part]
