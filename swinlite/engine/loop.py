"""One training epoch of any task: micro-batches, AMP, gradient accumulation, clipping, EMA, divergence check."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from .distributed import DistInfo, SharedError, all_answer, all_gather_object, all_reduce_sum
from .metrics import ENGINE_COLUMNS
from .progress import Progress
from .task import StepOutput

SINGLE = DistInfo()  # a single process


@dataclass
class StepSettings:
    """How each optimizer step is taken."""

    device: torch.device
    amp_dtype: torch.dtype | None = None  # autocast dtype; None: full precision
    accum_steps: int = 1
    clip_grad: float | None = None
    log_interval: int = 50
    channels_last: bool = False  # image batches in channels-last memory format (for a channels-last model)


@dataclass
class EpochPosition:
    """How far this process is through a training epoch: the resume file keeps it for a restart mid-epoch."""

    batch: int = 0  # micro-batches done in this epoch
    step: int = 0  # optimizer steps taken in the run
    sums: dict[str, float] = field(default_factory=dict)  # summed losses over this process's samples of the epoch
    count: int = 0  # this process's samples so far in this epoch


class TrainingDiverged(ValueError):
    """The loss (or a weight) became NaN or infinite: the run stops before saving anything of it."""


class SharedDivergence(TrainingDiverged, SharedError):
    """Every process diverged at the same point: rank 0 alone says it, every process exits with code 2."""


def diverged_alike(message: str, dist: DistInfo, wait: float) -> TrainingDiverged:
    """The error of a divergence this process met (``message``): said once, rank 0's (:class:`SharedDivergence`),
    where every process meets one within ``wait`` seconds (the weights they share, or the loss of them, went NaN);
    else named by this process's rank: its own batch's loss alone, while the others wait in the step's all-reduce and
    end as it ends, saying its ``message`` (``run``'s ``notes_elsewhere``)."""
    if all_answer(dist, wait, f"rank {dist.rank}: {message}"):
        return SharedDivergence(message)
    return TrainingDiverged(f"rank {dist.rank}: {message}")


def autocast(settings: StepSettings) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to ``settings.amp_dtype`` on the settings' device, or a no-op without mixed precision."""
    if settings.amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(settings.device.type, dtype=settings.amp_dtype)


def train_one_epoch(
    model: nn.Module,
    loader: Iterable,
    step_fn: Callable[[nn.Module, object], StepOutput],
    optimizer: torch.optim.Optimizer,
    scheduler,
    position: EpochPosition,
    settings: StepSettings,
    *,
    total: int,
    scaler: torch.amp.GradScaler,
    ema: nn.Module | None = None,
    dist: DistInfo = SINGLE,
    desc: str = "train",
    on_step: Callable[[EpochPosition], None] | None = None,
) -> tuple[dict[str, float], float]:
    """Train over ``loader`` (from ``position.batch`` on, when the loader starts there) up to micro-batch ``total``.

    Args:
        model: the (possibly DDP-wrapped, possibly compiled) model, in train mode on return.
        step_fn: the task's loss step: ``step_fn(model, batch)`` runs under autocast here.
        optimizer: a timm ``Lookahead`` one syncs its slow weights into the model at the epoch's last step.
        scheduler: a timm scheduler; ``step_update(n)`` sets the lr for optimizer step ``n``.
        position: where the epoch stands (updated in place): micro-batches done, steps, loss sums.
        total: micro-batches in the whole epoch (the progress display shows its optimizer steps: ``epoch_steps``).
        scaler: gradient scaler (disabled unless fp16).
        ema: timm ``ModelEmaV3`` updated after each optimizer step, or None.
        on_step: called with ``position`` after each optimizer step (e.g. to save a step checkpoint).

    Returns:
        ({"train_loss": mean, "loss_<part>": mean, ...} over all processes' samples of the epoch,
        samples/s of this process in this call)

    Raises:
        TrainingDiverged: a micro-batch's loss is NaN or infinite.
    """
    model.train()
    accum = settings.accum_steps
    steps = epoch_steps(total, accum)
    progress = Progress(steps, desc, dist.is_main, settings.log_interval, done=epoch_steps(position.batch, accum))
    seen, start, step_images, step_loss = 0, time.perf_counter(), 0, 0.0
    # a second-order optimizer (timm's adahessian) differentiates the gradients: they keep their graph, as in timm's
    # train.py (a Lookahead around it says so too)
    create_graph = getattr(optimizer, "is_second_order", False)
    for batch in loader:
        if position.batch >= total:  # train.max_iters: the epoch ends early
            break
        position.batch += 1
        last_micro = position.batch % accum == 0 or position.batch == total
        sync = contextlib.nullcontext() if last_micro or not dist.enabled else model.no_sync()
        with sync:
            with autocast(settings):
                out = step_fn(model, batch)
            if not seen:  # the parts' names, at the first micro-batch
                check_parts(out.parts)
            if not torch.isfinite(out.loss):
                parts = ", ".join(f"{k} {part_value(v):.4g}" for k, v in out.parts.items())
                where = f"training diverged in {desc} at step {epoch_steps(position.batch, accum)}/{steps}"
                raise TrainingDiverged(f"{where}: the loss is {out.loss.item()}" + (f" ({parts})" if parts else ""))
            scaler.scale(out.loss / _group_size(position.batch, total, accum)).backward(create_graph=create_graph)
        if last_micro:
            scheduler.step_update(position.step)
            optimizer_step(model, optimizer, scaler, settings.clip_grad, position.batch == total)
            position.step += 1
            if ema is not None:
                ema.update(unwrap(model), step=position.step)
        values = {"train_loss": out.loss.item()} | {k: part_value(v) for k, v in out.parts.items()}
        for key, value in values.items():
            position.sums[key] = position.sums.get(key, 0.0) + value * out.size
        position.count += out.size
        seen += out.size
        step_images, step_loss = step_images + out.size, step_loss + values["train_loss"] * out.size
        if last_micro:  # the display counts optimizer steps, as the schedule and the checkpoints do; its images are
            # the run's (each process trains as many, in step through DDP's all-reduce: no collective of its own), as
            # the epoch line's train_img_s; its losses are this process's (rank 0's, the one that shows them): the
            # epoch's running mean, as TensorBoard's, and the step's
            running = running_loss(position.sums, position.count)
            progress.update(epoch_steps(position.batch, accum), step_images * dist.world_size, running,
                            current_lr(optimizer), step_loss / max(step_images, 1))  # fmt: skip
            step_images, step_loss = 0, 0.0
            if on_step is not None:
                on_step(position)
    progress.close()
    rate = seen / max(time.perf_counter() - start, 1e-9)
    keys = agreed_parts(sorted(position.sums), dist)
    *totals, count = all_reduce_sum([*(position.sums[k] for k in keys), position.count], dist, settings.device)
    means = {k: v / max(count, 1) for k, v in zip(keys, totals, strict=True)}
    return {"train_loss": means.pop("train_loss", float("nan"))} | means, rate


def check_parts(parts: dict[str, torch.Tensor | float]) -> None:
    """ValueError for a :attr:`~swinlite.engine.task.StepOutput.parts` key that is a column of the engine's metrics
    (:data:`~swinlite.engine.metrics.ENGINE_COLUMNS`): the part replaced the training loss (or the epoch, its lr,
    time or rate) in metrics.csv, silently."""
    taken = next((key for key in parts if key in ENGINE_COLUMNS), None)
    if taken is not None:
        raise ValueError(
            f"the task's train_step returned StepOutput.parts[{taken!r}], a column of the engine's metrics "
            f"({', '.join(ENGINE_COLUMNS)}) that it would replace: name the training loss's parts loss_*"
        )


def agreed_parts(keys: list[str], dist: DistInfo) -> list[str]:
    """``keys`` (this process's summed losses of the epoch: ``train_loss`` and the task's
    :attr:`~swinlite.engine.task.StepOutput.parts`), checked to be every process's: the epoch's all-reduce sums them
    position by position. Where they differ, a :class:`SharedError` naming each process's (every process compares
    the same lists): unchecked, lists of different lengths waited ``train.dist_timeout`` in the all-reduce, and lists
    of equal lengths summed different losses together."""
    per_process = all_gather_object(keys, dist)
    if any(other != keys for other in per_process):
        found = "; ".join(f"rank {rank}: {', '.join(names) or 'none'}" for rank, names in enumerate(per_process))
        raise SharedError(
            f"the processes' training losses have different parts ({found}): expected the same on every process; "
            "the task's train_step must return StepOutput.parts with the same keys on every process"
        )
    return keys


def running_loss(sums: dict[str, float], count: int) -> float:
    """The mean loss per sample of an epoch whose ``count`` samples summed to ``sums`` (:class:`EpochPosition`'s)."""
    return sums.get("train_loss", 0.0) / max(count, 1)


def part_value(part: torch.Tensor | float) -> float:
    """A :class:`~swinlite.engine.task.StepOutput` part as a number, detached: a task may return one with grad."""
    return float(part.detach()) if isinstance(part, torch.Tensor) else float(part)


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    """The largest lr over parameter groups (layer decay scales the others down)."""
    return max(group["lr"] for group in optimizer.param_groups)


def optimizer_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    clip_grad: float | None,
    epoch_end: bool = False,
) -> None:
    """Clip the global gradient norm to ``clip_grad`` (if set, after unscaling), step, update the scaler, zero grads.

    At ``epoch_end`` a timm ``Lookahead`` optimizer (``optim.opt=lookahead_*``) syncs its slow weights into the model,
    as timm's train.py does at the end of each epoch: what is evaluated, saved and resumed are the slow weights. The
    sync is part of the epoch's last step (a step checkpoint and an uninterrupted run agree), before the grads are
    zeroed: timm's ``sync_lookahead`` skips a parameter without a gradient.
    """
    if clip_grad is not None:
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
    scaler.step(optimizer)
    scaler.update()
    if epoch_end and hasattr(optimizer, "sync_lookahead"):
        optimizer.sync_lookahead()
    optimizer.zero_grad(set_to_none=True)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside ``torch.compile`` and DistributedDataParallel wrappers."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):  # torch.compile's OptimizedModule
            model = model._orig_mod
        else:
            return model


def epoch_steps(batches: int, accum_steps: int) -> int:
    """Optimizer steps of an epoch that ``batches`` micro-batches take (the last one begun counts): what the
    progress display, the resume note and the divergence message number as "step k/n" of an epoch."""
    return -(-batches // accum_steps)


def _group_size(batch: int, total: int, accum_steps: int) -> int:
    """How many micro-batches the optimizer step of micro-batch ``batch`` (1-based, of ``total``) averages: the
    last step of an epoch whose batches ``accum_steps`` does not divide averages the remainder (timm's
    ``last_accum_steps``), so that it is not scaled down."""
    remainder = total % accum_steps
    return remainder if remainder and batch > total - remainder else accum_steps
