"""Training configuration: typed dataclasses, YAML files of overrides, ``section.key=value`` overrides.

The dataclass defaults are a generic ImageFolder recipe; a YAML file (``configs/*.yaml``) holds only
the keys it changes, and the command line can change any key again, e.g. ``train.epochs=12``.
Every value is converted to the field's declared type, and an unknown key is a ValueError that
names the closest valid key.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass
class ModelConfig:
    name: str = "swinlite_tiny_patch4_window7_224"  # any timm model name, with a pretrained tag if wanted (.ms_in1k)
    pretrained: str | None = None  # true: the name's pretrained weights; or a weights file (any Swin layout)
    drop_path_rate: float | None = None  # None: the variant's default
    grad_checkpointing: bool = False


@dataclass
class DataConfig:
    data_dir: str = "data"  # holds train/<class>/* and val/<class>/*
    dataset: str = "folder"  # "folder", or "digits" to build scikit-learn's digits into data_dir if absent
    img_size: int = 224
    batch_size: int = 128  # per process
    num_workers: int = 4
    verify_images: bool = True  # read every image's header before training (in parallel) and skip unreadable ones
    persistent_workers: bool = True  # keep loader workers alive between epochs (when num_workers > 0)
    prefetch_factor: int = 2  # batches each loader worker prepares ahead
    scale: tuple[float, float] = (0.08, 1.0)  # RandomResizedCrop area range
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    hflip: float = 0.5
    color_jitter: float = 0.4
    auto_augment: str | None = None  # e.g. "rand-m9-mstd0.5-inc1"
    re_prob: float = 0.0  # random erasing probability
    interpolation: str = "bicubic"
    crop_pct: float = 0.875  # eval: resize to img_size / crop_pct, then center crop
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    mixup: float = 0.0  # mixup alpha (0: off)
    cutmix: float = 0.0  # cutmix alpha (0: off)


@dataclass
class OptimConfig:
    opt: str = "adamw"  # any timm optimizer name
    lr: float = 1e-3
    lr_base_batch: int | None = None  # lr is given per this many images; None: no scaling
    weight_decay: float = 0.05  # not applied to norms, biases and relative position bias tables
    momentum: float = 0.9
    layer_decay: float | None = None  # layer-wise lr decay (fine-tuning), e.g. 0.9
    clip_grad: float | None = None  # max gradient norm
    accum_steps: int = 1  # micro-batches per optimizer step


@dataclass
class ScheduleConfig:
    warmup_epochs: float = 0.0  # linear warm-up, stepped per optimizer step
    warmup_lr: float = 1e-6
    min_lr: float = 1e-5  # cosine floor


@dataclass
class TrainConfig:
    epochs: int = 30
    output_dir: str = "runs/train"
    seed: int = 0
    device: str = "auto"  # "auto", "cpu", "cuda", "cuda:1", ...
    amp: str = "none"  # "none", "bf16", "fp16" (CUDA only)
    label_smoothing: float = 0.0
    ema_decay: float | None = None  # keep and evaluate an EMA of the weights, e.g. 0.9998
    deterministic: bool = False  # deterministic algorithms (bitwise-reproducible resume)
    log_interval: int = 50  # steps between plain progress lines when stdout is not a terminal
    best_of: str = "both"  # best.safetensors: "raw" or "ema" weights by their val top-1, or "both": the better one
    save_every_steps: int = 0  # also write resume.pt every N optimizer steps inside an epoch (0: at epoch ends only)
    compile: bool = False  # torch.compile the model for training and evaluation
    channels_last: bool = False  # channels-last memory format for the model and its input batches
    tensorboard: bool = False  # also write TensorBoard event files beside metrics.csv (needs the tensorboard package)
    dist_timeout: float = 1800.0  # seconds a multi-process collective waits for a stalled process before failing


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


def valid_keys(cfg: Config | None = None) -> list[str]:
    """All dotted keys, e.g. ``["model.name", ..., "train.seed"]``."""
    cfg = cfg or Config()
    return [f"{s.name}.{f.name}" for s in dataclasses.fields(cfg) for f in dataclasses.fields(getattr(cfg, s.name))]


def _unknown_key(key: str, cfg: Config) -> ValueError:
    close = difflib.get_close_matches(key, valid_keys(cfg), n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(valid_keys(cfg))}"
    return ValueError(f"unknown config key '{key}'{hint}")


def _describe(annotation: Any) -> str:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is tuple:
        return f"a list of {len(args)} values"
    return {bool: "true or false", float: "a number", int: "an integer"}.get(annotation, "a string")


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """Convert ``value`` (from YAML or the command line) to the declared ``annotation``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "~")):
            return None
        return _coerce(value, next(a for a in args if a is not type(None)), key)
    parsed = yaml.safe_load(value) if isinstance(value, str) and annotation is not str else value
    ok = True
    if origin is tuple:
        ok = isinstance(parsed, list | tuple) and len(parsed) == len(args)
        if ok:
            return tuple(_coerce(v, a, key) for v, a in zip(parsed, args, strict=True))
    elif annotation is bool:
        ok = isinstance(parsed, bool)
    elif annotation is int:
        ok = isinstance(parsed, int) and not isinstance(parsed, bool)
    elif annotation is float:
        try:
            parsed = float(parsed)  # YAML 1.1 reads "5e-4" as a string; float() does not
        except (TypeError, ValueError):
            ok = False
    else:
        parsed = str(parsed)
    if not ok:
        raise ValueError(f"config key '{key}': cannot use {value!r}, expected {_describe(annotation)}")
    return parsed


def apply_overrides(cfg: Config, overrides: dict[str, Any]) -> Config:
    """Return a copy of ``cfg`` with dotted-key overrides applied (values converted to field types)."""
    cfg = dataclasses.replace(
        cfg, **{s.name: dataclasses.replace(getattr(cfg, s.name)) for s in dataclasses.fields(cfg)}
    )
    for key, value in overrides.items():
        section_name, _, name = key.partition(".")
        section = (
            getattr(cfg, section_name, None) if section_name in {s.name for s in dataclasses.fields(cfg)} else None
        )
        if section is None or name not in {f.name for f in dataclasses.fields(section)}:
            raise _unknown_key(key, cfg)
        hints = typing.get_type_hints(type(section))
        setattr(section, name, _coerce(value, hints[name], key))
    return cfg


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1}}`` -> ``{"optim.lr": 1}``; a leaf that is not a section stays as is."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and not prefix:
            out.update(flatten(value, f"{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def parse_cli_overrides(items: list[str]) -> dict[str, str]:
    """``["optim.lr=5e-4", ...]`` -> ``{"optim.lr": "5e-4"}``; ValueError for an item without ``=``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override '{item}' is not of the form section.key=value, e.g. train.epochs=12")
        out[key.strip()] = value.strip()
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, defaults: Any = None) -> Config:
    """Defaults (``Config()``, or ``defaults``: any dataclass of section dataclasses), then the YAML file's
    overrides, then command-line ``key=value`` overrides."""
    cfg = Config() if defaults is None else defaults
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"config file {path} does not exist")
        tree = yaml.safe_load(path.read_text()) or {}
        if not isinstance(tree, dict):
            raise ValueError(f"config file {path} must hold a mapping of sections, e.g. 'train: {{epochs: 10}}'")
        cfg = apply_overrides(cfg, flatten(tree))
    return apply_overrides(cfg, parse_cli_overrides(overrides or []))


def to_dict(cfg: Config) -> dict[str, Any]:
    """Plain nested dict (tuples as lists), ready for YAML."""

    def plain(v: Any) -> Any:
        return list(v) if isinstance(v, tuple) else v

    return {s: {k: plain(v) for k, v in sec.items()} for s, sec in dataclasses.asdict(cfg).items()}


def config_diff(old: Config, new: Config) -> list[str]:
    """Human-readable list of keys whose values differ, e.g. ``["train.epochs: 10 -> 20"]``."""
    a, b = flatten(to_dict(old)), flatten(to_dict(new))
    return [f"{k}: {a[k]} -> {b[k]}" for k in a if a[k] != b[k]]
