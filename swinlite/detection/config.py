"""Detection configuration: the shared sections, with the detector and COCO data keys.

The defaults are a COCO recipe for Faster R-CNN on Swin-T (mmdetection's Swin-T 1x: AdamW 1e-4, 12 epochs,
lr x0.1 after epochs 8 and 11, a warm-up of about 1,000 steps of 16 images, 800 px test size); a YAML file
(``configs/det_*.yaml``) holds only the keys it changes, and ``section.key=value`` on the command line changes
any key again. Loading, type and range checks and "did you mean" errors are the engine's
(:mod:`swinlite.engine.config`); the shared keys are those of :mod:`swinlite.engine.sections`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.config import bounded, choice, span
from ..engine.sections import SCHEDULES, DataConfig, ModelConfig, OptimConfig, RunConfig, ScheduleConfig, TrainConfig

DETECTORS = ("fasterrcnn", "maskrcnn", "retinanet", "fcos")


@dataclass
class DetModelConfig(ModelConfig):
    detector: str = choice("fasterrcnn", *DETECTORS)
    min_level: int | None = bounded(None, ge=0)  # first Swin level fed to the FPN; None: 0 for R-CNNs, 1 for others
    fpn_channels: int = bounded(256, ge=1)
    anchor_scale: float = bounded(8.0, gt=0)  # R-CNN anchor side = scale x level stride (RetinaNet: half, x 2^(k/3))
    box_head_dim: int = bounded(1024, ge=1)  # R-CNN box head MLP width
    rpn_batch_size_per_image: int = bounded(256, ge=1)  # anchors sampled per image for the RPN loss
    box_batch_size_per_image: int = bounded(512, ge=1)  # proposals sampled per image for the box head loss
    score_thresh: float = bounded(0.05, ge=0, le=1)  # detections kept for evaluation
    detections_per_img: int = bounded(100, ge=1)


@dataclass
class DetDataConfig(DataConfig):
    data_dir: str = "data/coco"  # COCO 2017 layout: annotations/instances_{train,val}2017.json, {train,val}2017/
    dataset: str = choice("coco", "coco", "digits")  # "digits": the embedded demo, built into data_dir if absent
    batch_size: int = bounded(2, ge=1)  # images per process
    train_ann: str | None = None  # None: <data_dir>/annotations/instances_train2017.json
    train_images: str | None = None  # None: <data_dir>/train2017
    val_ann: str | None = None  # None: <data_dir>/annotations/instances_val2017.json
    val_images: str | None = None  # None: <data_dir>/val2017
    # training short side drawn from this range (mmdetection's 1x: 800 alone; its 3x: [480, 800]) ...
    train_sizes: tuple[int, int] = span((800, 800), ge=1)
    size_step: int = bounded(32, ge=1)  # ... in steps of this many pixels (which must divide the span)
    test_size: int = bounded(800, ge=1)  # evaluation short side
    max_size: int = bounded(1333, ge=1)  # long side cap, training (but with lsj: its square) and evaluation
    lsj: bool = False  # large-scale jitter (scale 0.1-2.0 of a test_size square, then crop/pad) instead of multi-scale


@dataclass
class DetOptimConfig(OptimConfig):
    lr: float = bounded(1e-4, ge=0)


@dataclass
class DetScheduleConfig(ScheduleConfig):
    kind: str = choice("step", *SCHEDULES)
    warmup_epochs: float = bounded(0.14, ge=0)  # about 1,000 steps of 16 COCO images
    warmup_lr: float = bounded(1e-7, ge=0)
    min_lr: float = bounded(0.0, ge=0)
    decay_epochs: tuple[float, ...] = bounded((8.0, 11.0), ge=0)  # floats, as a config file read back gives them


@dataclass
class DetTrainConfig(TrainConfig):
    epochs: int = bounded(12, ge=1)
    output_dir: str = "runs/detection"


@dataclass
class DetConfig(RunConfig):
    model: DetModelConfig = field(default_factory=DetModelConfig)
    data: DetDataConfig = field(default_factory=DetDataConfig)
    optim: DetOptimConfig = field(default_factory=DetOptimConfig)
    schedule: DetScheduleConfig = field(default_factory=DetScheduleConfig)
    train: DetTrainConfig = field(default_factory=DetTrainConfig)
