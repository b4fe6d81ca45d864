"""Detection training configuration: typed dataclasses, loaded like the classification config.

The defaults are a COCO recipe for Faster R-CNN on Swin-T (AdamW, 12 epochs, 800 px test size); a YAML
file (``configs/det_*.yaml``) holds only the keys it changes, and ``section.key=value`` on the command line
changes any key again. Loading, type conversion and "did you mean" errors are those of
:mod:`swinlite.train.config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..train.config import load_config

DETECTORS = ("fasterrcnn", "maskrcnn", "retinanet", "fcos")


@dataclass
class DetModelConfig:
    detector: str = "fasterrcnn"  # "fasterrcnn", "maskrcnn", "retinanet" or "fcos"
    name: str = "swinlite_tiny_patch4_window7_224"  # the swinlite backbone (a pretrained tag may follow the name)
    pretrained: str | None = None  # backbone weights file (any layout swinlite converts), or "timm": timm's weights
    min_level: int | None = None  # first Swin level fed to the FPN; None: 0 for R-CNNs, 1 for RetinaNet / FCOS
    frozen_stages: int = -1  # -1: train all; k: freeze the patch embedding and the first k stages
    out_norm: bool = True  # a LayerNorm on each Swin level fed to the FPN
    fpn_channels: int = 256
    drop_path_rate: float | None = None  # None: the variant's default
    grad_checkpointing: bool = False  # recompute Swin activations in backward (less memory)
    anchor_scale: float = 8.0  # R-CNN anchor side = anchor_scale * level stride (RetinaNet: half of it, x 2^(k/3))
    box_head_dim: int = 1024  # R-CNN box head MLP width
    rpn_batch_size_per_image: int = 256  # anchors sampled per image for the RPN loss
    box_batch_size_per_image: int = 512  # proposals sampled per image for the box head loss
    score_thresh: float = 0.05  # detections kept for evaluation
    detections_per_img: int = 100


@dataclass
class DetDataConfig:
    data_dir: str = "data/coco"  # COCO 2017 layout: annotations/instances_{train,val}2017.json, {train,val}2017/
    dataset: str = "coco"  # "coco", or "digits" to build the embedded demo into data_dir if absent
    train_ann: str | None = None  # None: <data_dir>/annotations/instances_train2017.json
    train_images: str | None = None  # None: <data_dir>/train2017
    val_ann: str | None = None  # None: <data_dir>/annotations/instances_val2017.json
    val_images: str | None = None  # None: <data_dir>/val2017
    batch_size: int = 2  # images per process
    num_workers: int = 4
    verify_images: bool = False  # decode every image once before training (slow on COCO); a stat is always done
    train_sizes: tuple[int, int] = (480, 800)  # multi-scale training: short side drawn from this range ...
    size_step: int = 32  # ... in steps of this many pixels
    test_size: int = 800  # evaluation short side
    max_size: int = 1333  # long side cap, training and evaluation
    hflip: float = 0.5
    lsj: bool = False  # large-scale jitter (scale 0.1-2.0 of a max_size square, then crop/pad) instead of multi-scale
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)


@dataclass
class DetOptimConfig:
    opt: str = "adamw"  # any timm optimizer name
    lr: float = 1e-4
    weight_decay: float = 0.05  # not applied to norms, biases and relative position bias tables / CPB
    momentum: float = 0.9
    clip_grad: float | None = None  # max gradient norm


@dataclass
class DetScheduleConfig:
    kind: str = "step"  # "step" (lr x decay_rate at each of decay_epochs) or "cosine"
    decay_epochs: tuple[int, int] = (8, 11)
    decay_rate: float = 0.1
    warmup_iters: int = 1000  # linear warm-up, in optimizer steps
    warmup_ratio: float = 0.001  # warm-up starts at lr x warmup_ratio
    min_lr: float = 0.0  # cosine floor


@dataclass
class DetTrainConfig:
    epochs: int = 12
    output_dir: str = "runs/detection"
    seed: int = 0
    device: str = "auto"  # "auto", "cpu", "cuda", "cuda:1", ...
    amp: str = "none"  # "none", "bf16", "fp16" (CUDA only)
    deterministic: bool = False  # deterministic algorithms (bitwise-reproducible resume)
    log_interval: int = 50  # steps between plain progress lines when stdout is not a terminal
    max_iters: int | None = None  # stop each epoch after this many steps (quick trials); None: whole epoch


@dataclass
class DetConfig:
    model: DetModelConfig = field(default_factory=DetModelConfig)
    data: DetDataConfig = field(default_factory=DetDataConfig)
    optim: DetOptimConfig = field(default_factory=DetOptimConfig)
    schedule: DetScheduleConfig = field(default_factory=DetScheduleConfig)
    train: DetTrainConfig = field(default_factory=DetTrainConfig)


def load_det_config(path: str | Path | None = None, overrides: list[str] | None = None) -> DetConfig:
    """Defaults, then the YAML file's overrides, then command-line ``key=value`` overrides."""
    return load_config(path, overrides, defaults=DetConfig())


def check_det_config(cfg: DetConfig) -> None:
    """ValueError for settings that cannot work, before any data is read."""
    choices = (
        ("model.detector", cfg.model.detector, DETECTORS),
        ("data.dataset", cfg.data.dataset, ("coco", "digits")),
        ("schedule.kind", cfg.schedule.kind, ("step", "cosine")),
        ("train.amp", cfg.train.amp, ("none", "bf16", "fp16")),
    )
    for key, value, allowed in choices:
        if value not in allowed:
            raise ValueError(f"{key} must be one of {', '.join(allowed)}, got {value!r}")
    positive = (
        ("train.epochs", cfg.train.epochs),
        ("data.batch_size", cfg.data.batch_size),
        ("data.test_size", cfg.data.test_size),
        ("data.size_step", cfg.data.size_step),
        ("model.fpn_channels", cfg.model.fpn_channels),
    )
    for key, value in positive:
        if value < 1:
            raise ValueError(f"{key} must be at least 1, got {value}")
    if cfg.model.detector == "fcos" and cfg.model.fpn_channels % 32:
        raise ValueError(
            f"model.fpn_channels must be a multiple of 32 for fcos (GroupNorm), got {cfg.model.fpn_channels}"
        )
    lo, hi = cfg.data.train_sizes
    if not 1 <= lo <= hi:
        raise ValueError(f"data.train_sizes must be [low, high] with 1 <= low <= high, got {[lo, hi]}")
