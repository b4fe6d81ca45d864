"""The config sections every task shares: the same key means the same thing in every task.

A task's config subclasses :class:`RunConfig` and may subclass a section to add its own keys (the
classification data section adds the ImageFolder augmentation, the detection model section the detector).
A task may change a shared key's default (detection trains 12 epochs), never its meaning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..device import AUTOCAST_DTYPES
from .config import bounded, checked, choice, closest, per_channel

SCHEDULES = ("cosine", "step", "poly")
LOOKAHEAD = "lookahead_"  # the prefix by which timm wraps an optimizer in Lookahead (optim.opt=lookahead_adamw)


def optimizer_name(opt: str) -> str:
    """The name in timm's optimizer registry that ``optim.opt`` gives: lower-cased, without ``lookahead_``."""
    return opt.lower().removeprefix(LOOKAHEAD)


def optimizer_problem(opt: str) -> str | None:
    """Why ``optim.opt`` names no timm optimizer, with the closest name that does; None when it names one.

    Checked with the config, before any data is read: timm named an unknown one only when the optimizer was built,
    after the data scan, without the key. The names are timm's registry's (``timm.optim.list_optimizers``), any
    case, optionally prefixed ``lookahead_``. timm takes the last ``_``-separated word and drops the others, so
    ``fused_adamw`` would train plain AdamW: any other prefix is refused here.
    """
    from timm.optim import list_optimizers  # here, not at import: the config machinery itself needs no timm

    names = list_optimizers()
    if optimizer_name(opt) in names:
        return None
    close = closest(opt.lower(), [*names, *(LOOKAHEAD + n for n in names)])
    hint = f"did you mean '{close}'?" if close else "timm.optim.list_optimizers() names them (adamw, sgd, lamb, ...)"
    return f"{opt!r} is not a timm optimizer; {hint}"


def pretrained_problem(pretrained: bool | str) -> str | None:
    """Why ``model.pretrained`` cannot be used (for :func:`~swinlite.engine.config.checked`): its retired value."""
    return "'timm' is now true (the weights of model.name's tag)" if pretrained == "timm" else None


@dataclass
class ModelConfig:
    name: str = "swinlite_tiny_patch4_window7_224"  # timm model name, with a pretrained tag if wanted (.ms_in1k)
    # true: the name's pretrained tag's weights; false; or a weights file (any layout)
    pretrained: bool | str = checked(False, pretrained_problem)
    kwargs: dict[str, Any] = field(default_factory=dict)  # timm.create_model keywords, e.g. {window_size: 12}
    grad_checkpointing: bool = False  # recompute activations in the backward pass (less memory)


@dataclass
class DataConfig:
    data_dir: str = "data"
    dataset: str = "folder"  # the task's layout, or its generated demo ("digits", "shapes"), built into data_dir
    batch_size: int = bounded(128, ge=1)  # per process
    num_workers: int = bounded(4, ge=0)
    verify_images: bool = False  # true: decode every image once before training (slow); false: read each header only
    persistent_workers: bool = True  # keep loader workers alive between epochs (when num_workers > 0)
    prefetch_factor: int = bounded(2, ge=1)  # batches each loader worker prepares ahead
    hflip: float = bounded(0.5, ge=0, le=1)  # horizontal flip probability
    # of pixels in 0..1; none: the model.pretrained weights file's record, else the model's pretrained config's
    # (ImageNet's for swinlite models), resolved before the run (preflight.resolve_normalisation)
    mean: tuple[float, float, float] | None = per_channel(None, ge=0, le=1)
    std: tuple[float, float, float] | None = per_channel(None, gt=0)


@dataclass
class OptimConfig:
    opt: str = checked("adamw", optimizer_problem)  # any timm optimizer name (lookahead_ prefix: wrapped in Lookahead)
    lr: float = bounded(1e-3, ge=0)
    lr_base_batch: int | None = bounded(None, ge=1)  # lr, warmup_lr, min_lr per this many images (global); None: as set
    weight_decay: float = bounded(0.05, ge=0)  # not applied to norms, biases and relative position tables / CPB
    momentum: float = bounded(0.9, ge=0, lt=1)
    betas: tuple[float, ...] | None = bounded(None, ge=0, lt=1)  # Adam-family betas, e.g. [0.9, 0.999]; None: its own
    layer_decay: float | None = bounded(None, gt=0, le=1)  # layer-wise lr decay (fine-tuning), e.g. 0.9
    clip_grad: float | None = bounded(None, gt=0)  # max global gradient norm
    accum_steps: int = bounded(1, ge=1)  # micro-batches per optimizer step


@dataclass
class ScheduleConfig:
    kind: str = choice("cosine", *SCHEDULES)  # cosine or poly decay to min_lr; step: lr x decay_rate
    warmup_epochs: float = bounded(0.0, ge=0)  # linear warm-up from warmup_lr (fractions allowed), per optimizer step
    warmup_lr: float = bounded(1e-6, ge=0)  # scaled as optim.lr is (per optim.lr_base_batch images), as is ...
    min_lr: float = bounded(1e-5, ge=0)  # ... the cosine and poly floor
    power: float = bounded(1.0, gt=0)  # poly: min_lr + (lr - min_lr) * (1 - t / T) ** power, t steps after warm-up
    decay_epochs: tuple[float, ...] = bounded((), ge=0)  # step: epochs after which the lr is multiplied ...
    decay_rate: float = bounded(0.1, gt=0, le=1)  # ... by this


@dataclass
class TrainConfig:
    epochs: int = bounded(30, ge=1)
    output_dir: str = "runs/train"
    seed: int = bounded(0, ge=0, lt=2**32)
    device: str = "auto"  # "auto", "cpu", "cuda", "cuda:1", ...
    amp: str = choice("none", *AUTOCAST_DTYPES, off="none")  # fp16: CUDA only; false is none
    deterministic: bool = False  # deterministic algorithms (bitwise-reproducible resume)
    log_interval: int = bounded(50, ge=1)  # steps between plain progress lines when stdout is not a terminal
    max_iters: int | None = bounded(None, ge=1)  # at most this many optimizer steps per epoch (quick trials)
    ema_decay: float | None = bounded(None, ge=0, lt=1)  # keep and evaluate an EMA of the weights, e.g. 0.9998
    ema_warmup: bool = False  # timm's EMA warm-up: decay 1 - step^(-2/3) up to ema_decay (short fine-tunes)
    best_of: str = choice("both", "raw", "ema", "both")  # best.safetensors: raw or EMA weights by the task's metric
    save_every_steps: int = bounded(0, ge=0)  # also write resume.pt every N optimizer steps (0: epoch ends only)
    compile: bool = False  # torch.compile the model for training and evaluation
    channels_last: bool = False  # channels-last memory format for the model (and image batches)
    tensorboard: bool = False  # also write TensorBoard event files beside metrics.csv (needs tensorboard)
    dist_timeout: float = bounded(1800.0, gt=0)  # seconds a collective waits for a stalled process before failing


@dataclass
class RunConfig:
    """The five sections; a task's config subclasses this with its own section types and defaults."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    renamed: ClassVar[dict[str, str]] = {  # old key -> where it went (one vocabulary for every task)
        "model.drop_path_rate": "model.kwargs.drop_path_rate",
        "model.out_norm": "model.kwargs.out_norm",
        "model.frozen_stages": "model.kwargs.frozen_stages",
        "schedule.warmup_iters": "schedule.warmup_epochs (in epochs, fractions allowed)",
        "schedule.warmup_ratio": "schedule.warmup_lr (the absolute lr the warm-up starts from)",
    }
