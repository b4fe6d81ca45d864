"""The optimizer and the lr schedule of every task (timm's), both counted in optimizer steps."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from timm.optim import (
    OptimInfo,
    create_optimizer_v2,
    get_optimizer_info,
    list_optimizers,
    param_groups_layer_decay,
    param_groups_weight_decay,
)
from timm.scheduler import CosineLRScheduler, MultiStepLRScheduler, PolyLRScheduler
from timm.scheduler.scheduler import Scheduler
from torch import nn

from ..wording import counted
from .sections import OptimConfig, ScheduleConfig, optimizer_name

CUDA_PACKAGES = ("apex", "bitsandbytes")  # their optimizers run on CUDA alone (timm asserts it as it builds one)


def no_weight_decay_names(model: nn.Module) -> set[str]:
    """Full parameter names every module's ``no_weight_decay()`` lists (e.g. the Swin's relative position tables).

    A torchvision detector has no ``no_weight_decay`` of its own; the Swin inside it (``backbone.body.model``)
    does, with names relative to itself.
    """
    names = set()
    for prefix, module in model.named_modules():
        if hasattr(module, "no_weight_decay"):
            names |= {f"{prefix}.{n}" if prefix else n for n in module.no_weight_decay()}
    return names


def lr_scale(cfg: OptimConfig, global_batch: int) -> float:
    """What the config's learning rates (``optim.lr``, ``schedule.warmup_lr``, ``schedule.min_lr``) are multiplied
    by: ``global_batch / lr_base_batch`` (the linear scaling rule, applied to all three as the Swin recipe does),
    1 without ``lr_base_batch``.

    Args:
        global_batch: images per optimizer step over all processes.
    """
    return 1.0 if cfg.lr_base_batch is None else global_batch / cfg.lr_base_batch


def warn_long_accumulation(cfg: OptimConfig, batches: int) -> None:
    """A UserWarning where ``optim.accum_steps`` exceeds the ``batches`` micro-batches of an epoch (per process): each
    optimizer step then averages the epoch's ``batches``, not ``accum_steps``, while ``optim.lr_base_batch`` scales the
    lr for ``accum_steps`` of them (:func:`lr_scale`), as timm's train.py does: a larger lr than any step's batch."""
    if cfg.accum_steps <= batches:
        return
    scaled = f", yet optim.lr_base_batch scales the lr for {cfg.accum_steps}" if cfg.lr_base_batch is not None else ""
    warnings.warn(
        f"optim.accum_steps={cfg.accum_steps} exceeds the {counted(batches, 'micro-batch', 'micro-batches')} of an "
        f"epoch (per process): every optimizer step averages {batches}{scaled}; set optim.accum_steps={batches}",
        stacklevel=2,
    )


def warn_short_batch(cfg: OptimConfig, batch_size: int, shard: int) -> None:
    """A UserWarning where ``data.batch_size`` exceeds the ``shard`` training samples a process gets (a task that keeps
    the last incomplete batch, detection's; the others refuse it: :func:`~swinlite.engine.loaders.build_loaders`):
    every micro-batch then holds ``shard`` images, while ``optim.lr_base_batch`` scales the lr for ``batch_size``."""
    if batch_size <= shard or cfg.lr_base_batch is None:
        return
    warnings.warn(
        f"data.batch_size={batch_size} exceeds the {counted(shard, 'training sample')} a process gets: every "
        f"micro-batch holds {shard}, yet optim.lr_base_batch scales the lr for {batch_size}; "
        f"set data.batch_size={shard}",
        stacklevel=2,
    )


def build_optimizer(model: nn.Module, cfg: OptimConfig, global_batch: int) -> torch.optim.Optimizer:
    """timm optimizer; no weight decay on norms, biases (anything 1-D) and ``no_weight_decay()`` names; layer-wise
    lr decay through the model's ``group_matcher`` when ``layer_decay`` is set. Frozen parameters are left out.
    ``betas`` go to an optimizer that takes them (:func:`check_optimizer`), which otherwise keeps its own.

    Args:
        global_batch: images per optimizer step over all processes (``lr`` scales with it: :func:`lr_scale`).
    """
    lr = cfg.lr * lr_scale(cfg, global_batch)
    common = dict(opt=cfg.opt, lr=lr, weight_decay=cfg.weight_decay, momentum=cfg.momentum)
    if cfg.betas is not None:
        common["betas"] = tuple(cfg.betas)
    if cfg.layer_decay is not None:
        return create_optimizer_v2(layer_decay_groups(model, cfg.weight_decay, cfg.layer_decay), **common)
    return create_optimizer_v2(weight_decay_groups(model, cfg.weight_decay), **common)


def layer_decay_groups(model: nn.Module, weight_decay: float, layer_decay: float) -> list[dict[str, Any]]:
    """timm's parameter groups of layer-wise lr decay (:func:`param_groups_layer_decay`, layers by the model's
    ``group_matcher``), with no weight decay on norms, biases and every module's ``no_weight_decay()`` names
    (:func:`no_weight_decay_names`): timm's ``create_optimizer_v2(model, layer_decay=...)`` reads the model's own
    only, so a Swin inside a task's model (``backbone.``) had weight decay on its relative position tables."""
    no_decay = no_weight_decay_names(model)
    return param_groups_layer_decay(
        model, weight_decay=weight_decay, no_weight_decay_list=no_decay, layer_decay=layer_decay
    )


def weight_decay_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """timm's parameter groups (:func:`param_groups_weight_decay`: norms, biases and ``no_weight_decay()`` names at
    0, the rest at ``weight_decay``), two whatever ``weight_decay`` is: timm puts every parameter in one group at 0,
    which a ``--resume`` that changes ``optim.weight_decay`` to or from 0 could not load the saved groups into. A group
    at 0 updates as the parameters would in no group of weight decay (AdamW's ``1 - lr * 0``, SGD's skipped term)."""
    groups = param_groups_weight_decay(model, 1.0, no_weight_decay_list=no_weight_decay_names(model))  # 1: any non-0
    return [group | {"weight_decay": group["weight_decay"] * weight_decay} for group in groups]  # 0 or weight_decay


def group_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[list[str]]:
    """The names of ``optimizer``'s parameters, group after group, as ``model.named_parameters()`` gives them: what
    :func:`regrouped_by_name` lays a saved state out by. ``model``: the bare model the optimizer is built from (not its
    DDP or ``torch.compile`` wrapper, which would prefix ``module.`` or ``_orig_mod.``)."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]


def regrouped_by_name(
    saved: dict[str, Any], saved_names: list[list[str]], optimizer: torch.optim.Optimizer, names: list[list[str]]
) -> dict[str, Any]:
    """``saved`` (an optimizer's ``state_dict()``, whose groups held the parameters ``saved_names``) laid out in
    ``optimizer``'s groups, which hold the same parameters as ``names`` (:func:`group_names`), grouped and ordered
    as they may be: each parameter's state is its own saved one. A group's settings are those of the saved group that
    held its first parameter (the lr the scheduler sets before each step, the step counters some optimizers keep per
    group, alike in every group; an empty group keeps its own)."""
    held: dict[str, tuple[int, dict[str, Any]]] = {}  # name: (its number in saved, its saved group)
    for group, group_of_names in zip(saved["param_groups"], saved_names, strict=True):
        held |= {name: (n, group) for n, name in zip(group["params"], group_of_names, strict=True)}
    laid_out = optimizer.state_dict()["param_groups"]  # numbers its parameters 0, 1, ... group after group
    numbers = [held[name][0] for group in names for name in group]  # in saved, of this numbering's parameters
    state = {n: saved["state"][old] for n, old in enumerate(numbers) if old in saved["state"]}
    groups = [
        (held[ns[0]][1] if ns else group) | {"params": group["params"]}
        for group, ns in zip(laid_out, names, strict=True)
    ]
    return {"state": state, "param_groups": groups}


def regrouped(saved: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``saved`` (an optimizer's ``state_dict()``, of a resume file that records no parameter names to lay it out by:
    :func:`regrouped_by_name`) laid out in ``optimizer``'s groups where it holds its parameters in one group at weight
    decay 0: timm's one group (every trained parameter in ``model``'s order), which swinlite saved at
    ``optim.weight_decay=0`` before :func:`weight_decay_groups`; else ``saved`` as it is."""
    trained = [p for p in model.parameters() if p.requires_grad]
    laid_out = optimizer.state_dict()["param_groups"]  # numbers its parameters 0, 1, ... group after group
    number = {id(p): n for n, p in enumerate(p for group in optimizer.param_groups for p in group["params"])}
    first, *others = saved["param_groups"]
    same = len(first["params"]) == len(trained) and {id(p) for p in trained} == number.keys()
    if others or len(laid_out) == 1 or first["weight_decay"] != 0 or not same:
        return saved
    renumbered = dict(zip(first["params"], (number[id(p)] for p in trained), strict=True))
    state = {renumbered[n]: s for n, s in saved["state"].items()}
    return {"state": state, "param_groups": [first | {"params": group["params"]} for group in laid_out]}


def check_optimizer(cfg: OptimConfig) -> None:
    """ValueError for ``optim.betas`` the optimizer does not take: none at all (SGD), or another count; for an
    ``optim.momentum`` other than the config's default given to an optimizer that takes none (AdamW: timm dropped it
    without a word; the default, which every ``config.yaml`` records, is left unused); for a Nesterov SGD (timm's
    ``sgd``, ``nesterov``) without momentum, which torch refuses only when the optimizer is built, after the data
    scan; and for an optimizer this machine cannot build (:func:`missing_need`), which timm said only then, in a
    traceback. The name is known to be timm's (the config check, :func:`swinlite.engine.sections.optimizer_problem`);
    a ``lookahead_`` one is judged by the optimizer it wraps."""
    name = optimizer_name(cfg.opt)
    info = get_optimizer_info(name)
    missing = missing_need(info)
    if missing is not None:
        plain = name.removeprefix("fused").removeprefix("bnb").removesuffix("8bit")  # fusedadamw: adamw
        other = cfg.opt.lower().removesuffix(name) + (plain if plain in list_optimizers() else "adamw")
        raise ValueError(
            f"optim.opt={cfg.opt} ({info.description}) needs {missing}; pick another, e.g. optim.opt={other}"
        )
    default = type(cfg)().momentum
    if not info.has_momentum and cfg.momentum != default:
        raise ValueError(
            f"optim.momentum: optim.opt={cfg.opt} takes no momentum (timm's SGD family does: momentum, sgd, nesterov; "
            f"also rmsprop, lars, ...); leave optim.momentum at its default {default:g}"
        )
    if (info.defaults or {}).get("nesterov") and cfg.momentum == 0:
        raise ValueError(
            f"optim.opt={cfg.opt} is timm's Nesterov SGD, which needs optim.momentum > 0; for plain SGD set "
            "optim.opt=momentum optim.momentum=0"
        )
    if cfg.betas is None:
        return
    if not info.has_betas:
        raise ValueError(f"optim.betas: optim.opt={cfg.opt} takes no betas; leave optim.betas unset")
    if len(cfg.betas) != info.num_betas:
        raise ValueError(f"optim.betas: {cfg.opt} takes {info.num_betas} betas, got {list(cfg.betas)}")


def check_loss_scaling(cfg: OptimConfig, amp: torch.dtype | None) -> None:
    """ValueError for a second-order optimizer (timm's ``adahessian``) under ``train.amp=fp16`` (``amp``, the autocast
    dtype): it differentiates the gradients' graph, which holds the loss scale that the scaler divides out of the
    gradients alone, so its Hessian came out that many times (65536 at first) too large and its steps as much too
    small, without a word (timm's train.py does the same)."""
    if amp is torch.float16 and get_optimizer_info(optimizer_name(cfg.opt)).second_order:
        raise ValueError(
            f"optim.opt={cfg.opt} is second order, which train.amp=fp16's loss scaling would skew (the Hessian it "
            "takes keeps the scale the gradients are rid of); use train.amp=bf16 or none"
        )


def missing_need(info: OptimInfo) -> str | None:
    """What the timm optimizer ``info`` needs that this machine lacks, or None: CUDA for timm's APEX (``fused*``) and
    bitsandbytes (``bnb*``) ones, the package of one that timm imports only as it builds it."""
    if not isinstance(info.opt_class, str):  # a class timm imported with itself
        return None
    package = info.opt_class.split(".")[0]
    if package in CUDA_PACKAGES and not torch.cuda.is_available():
        return f"CUDA ({package}'s), which this machine lacks"
    if importlib.util.find_spec(package) is None:
        return f"the package {package}, which is not installed"
    return None


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: ScheduleConfig, epochs: int, steps_per_epoch: int, scale: float = 1.0
) -> Scheduler:
    """Linear warm-up from ``warmup_lr`` over ``warmup_epochs``, then cosine decay to ``min_lr``, a step decay by
    ``decay_rate`` after each of ``decay_epochs``, or a polynomial decay of ``power`` to ``min_lr`` at the last step
    (mmsegmentation's "poly"); stepped per optimizer step (``step_update``).

    Args:
        scale: what ``warmup_lr`` and ``min_lr`` are multiplied by, as the optimizer's lr (:func:`lr_scale`).
    """
    total = epochs * steps_per_epoch
    wanted = _whole_steps(cfg.warmup_epochs * steps_per_epoch)
    warmup = min(wanted, total - 1)
    run = f"the run ({counted(epochs, 'epoch')} of {counted(steps_per_epoch, 'step')})"
    one_left = total - warmup == 1  # one step after the warm-up: a cosine or poly decay changes nothing
    if warmup < wanted:
        warnings.warn(
            f"schedule.warmup_epochs {cfg.warmup_epochs} is not shorter than {run}: the warm-up is cut to "
            f"{counted(warmup, 'step')} and the run ends near the peak lr",
            stacklevel=2,
        )
    elif one_left and warmup > 0 and cfg.kind != "step":
        warnings.warn(
            f"schedule.warmup_epochs {cfg.warmup_epochs} leaves one step of {run} after the warm-up: the lr does not "
            "decay and the run ends near the peak lr",
            stacklevel=2,
        )
    common = dict(warmup_t=warmup, warmup_lr_init=cfg.warmup_lr * scale, t_in_epochs=False)
    decay = dict(t_initial=total - warmup, lr_min=cfg.min_lr * scale, warmup_prefix=True, **common)
    if cfg.kind in ("cosine", "poly"):
        kind = CosineLRScheduler if cfg.kind == "cosine" else PolyLRScheduler
        power = {} if cfg.kind == "cosine" else {"power": cfg.power}
        with _without_timm_note(kind) if one_left else contextlib.nullcontext():  # the warnings above say it
            return kind(optimizer, **decay, **power)
    beyond = [e for e in cfg.decay_epochs if e >= epochs]  # decays after the last step: none happens
    if beyond:
        warnings.warn(
            f"schedule.decay_epochs {', '.join(f'{e:g}' for e in beyond)} lie at or beyond the end of {run}: the lr "
            "never decays there",
            stacklevel=2,
        )
    elif cfg.decay_epochs and max(cfg.decay_epochs) < epochs / 2:  # a longer run that kept a shorter one's epochs
        last = max(cfg.decay_epochs)
        warnings.warn(
            f"schedule.decay_epochs end at epoch {last:g} of {run}: its last {epochs - last:g} epochs, more than half, "
            f"run at the decayed lr; move them with train.epochs (e.g. mmdetection's 2x: train.epochs=24 "
            "schedule.decay_epochs=[16,22])",
            stacklevel=2,
        )
    # timm decays once t + 1 reaches a milestone; +1 so that the first step of epoch e + 1 runs at the lower lr
    milestones = [_whole_steps(e * steps_per_epoch) + 1 for e in cfg.decay_epochs]
    return MultiStepLRScheduler(optimizer, decay_t=milestones, decay_rate=cfg.decay_rate, warmup_prefix=False, **common)


def _whole_steps(steps: float) -> int:
    """``steps`` rounded up to whole steps, the float's own rounding aside: 0.14 epochs of 50 steps (7.000000000000001)
    is 7 steps, not 8."""
    return math.ceil(round(steps, 9))


@contextlib.contextmanager
def _without_timm_note(kind: type[Scheduler]) -> Iterator[None]:
    """Drop what timm's scheduler ``kind`` logs while it is built: its unprefixed note that a cosine (timm's poly says
    the same) of one step changes nothing, which swinlite's own warning says in its words."""
    logger = logging.getLogger(kind.__module__)

    def drop(record: logging.LogRecord) -> bool:
        return False

    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
