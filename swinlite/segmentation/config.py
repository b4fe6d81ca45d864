"""Segmentation configuration: the shared sections, with the UperNet head and the label-map data keys.

The defaults are mmsegmentation's Swin-T UperNet ADE20K 160k recipe (``upernet_swin_tiny_patch4_window7_512x512_
160k_ade20k``): AdamW lr 6e-5 per 16 images, betas (0.9, 0.999), weight decay 0.01, poly decay (power 1) after a
linear warm-up of 1,500 steps, crops of 512 x 512 from images rescaled by 0.5-2.0 of 2048 x 512, an auxiliary FCN
head weighted 0.4. On ADE20K's 20,210 training images, 16 images per step give 1,263 steps an epoch: the 1,500
warm-up steps are ``schedule.warmup_epochs`` 1.1876 and 127 epochs are 160,401 steps (mmsegmentation's 160k).
``configs/seg_*.yaml`` hold only the keys they change; loading and checks are the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.config import bounded, choice, span
from ..engine.sections import SCHEDULES, DataConfig, ModelConfig, OptimConfig, RunConfig, ScheduleConfig, TrainConfig
from ..seg_views import TEST_MODES

DATASETS = ("ade20k", "folder", "shapes")


@dataclass
class SegModelConfig(ModelConfig):
    head_channels: int = bounded(512, ge=1)  # UperNet width: pyramid pooling, FPN and fusion convolutions
    pool_scales: tuple[int, ...] = bounded((1, 2, 3, 6), ge=1)  # pyramid pooling grid sides on the last level
    aux_channels: int = bounded(256, ge=1)  # auxiliary FCN head on level 2 (stage 3 of 4), training only
    aux_weight: float = bounded(0.4, ge=0)  # its loss weight; 0: no auxiliary head
    dropout: float = bounded(0.1, ge=0, lt=1)  # Dropout2d before each classifier


@dataclass
class SegDataConfig(DataConfig):
    data_dir: str = "data/ade20k"  # images/{training,validation}/*, annotations/{training,validation}/*.png
    dataset: str = choice("ade20k", *DATASETS)  # ade20k: its 150 classes; folder: data.classes; shapes: the demo
    batch_size: int = bounded(2, ge=1)  # images per process (x 8 processes = the recipe's 16)
    train_images: str | None = None  # None: <data_dir>/images/training
    train_masks: str | None = None  # None: <data_dir>/annotations/training (same file names, any image suffix)
    val_images: str | None = None  # None: <data_dir>/images/validation
    val_masks: str | None = None  # None: <data_dir>/annotations/validation
    classes: tuple[str, ...] = ()  # folder: the class of each label value 0, 1, ...; ade20k and shapes: their own
    ignore_index: int = bounded(255, ge=0, le=65535)  # label value left out of the loss and the metrics
    # folder: true maps label 0 -> ignore_index, the others - 1 (null: false); ade20k, shapes: their own (true, false)
    reduce_zero_label: bool | None = None
    img_scale: tuple[int, int] = bounded((2048, 512), ge=1)  # (long, short) side limits of the test resize ...
    ratio_range: tuple[float, float] = span((0.5, 2.0), gt=0)  # ... and of training, times a ratio from this
    crop_size: tuple[int, int] = bounded((512, 512), ge=1)  # training crop (height, width), padded up to it
    cat_max_ratio: float = bounded(0.75, gt=0, le=1)  # a crop where one class covers more is redrawn (10 tries)
    photometric: bool = True  # brightness, contrast, saturation and hue jitter, each with probability 0.5
    test_mode: str = choice("whole", *TEST_MODES)  # whole image, or sliding crop_size windows
    test_stride: tuple[int, int] | None = bounded(None, ge=1)  # slide: window step (height, width), at most
    # the crop; None: 2/3 of crop_size, rounded (341 for 512, mmsegmentation's)
    test_ratios: tuple[float, ...] = bounded((1.0,), gt=0)  # img_scale ratios averaged (multi-scale), e.g. [0.5, 1]
    test_flip: bool = False  # also the mirrored image (softmax averaged)


@dataclass
class SegOptimConfig(OptimConfig):
    lr: float = bounded(6e-5, ge=0)
    lr_base_batch: int | None = bounded(16, ge=1)
    weight_decay: float = bounded(0.01, ge=0)  # betas: unset, the optimizer's own (AdamW's are the recipe's)


@dataclass
class SegScheduleConfig(ScheduleConfig):
    kind: str = choice("poly", *SCHEDULES)
    warmup_epochs: float = bounded(1.1876, ge=0)  # 1,500 steps of 16 ADE20K images
    warmup_lr: float = bounded(6e-11, ge=0)  # lr x 1e-6, mmsegmentation's warmup_ratio
    min_lr: float = bounded(0.0, ge=0)


@dataclass
class SegTrainConfig(TrainConfig):
    epochs: int = bounded(127, ge=1)
    output_dir: str = "runs/segmentation"


@dataclass
class SegConfig(RunConfig):
    model: SegModelConfig = field(default_factory=SegModelConfig)
    data: SegDataConfig = field(default_factory=SegDataConfig)
    optim: SegOptimConfig = field(default_factory=SegOptimConfig)
    schedule: SegScheduleConfig = field(default_factory=SegScheduleConfig)
    train: SegTrainConfig = field(default_factory=SegTrainConfig)
