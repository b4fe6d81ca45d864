"""Classification configuration: the shared sections, with the ImageFolder data and augmentation keys.

The defaults are a generic ImageFolder recipe; ``configs/*.yaml`` (but ``det_*`` and ``seg_*``) hold only the keys
they change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engine.config import bounded, choice, per_channel, span
from ..engine.sections import DataConfig as SharedData
from ..engine.sections import ModelConfig as SharedModel
from ..engine.sections import RunConfig, TrainConfig

# what timm's train and eval transforms both take and a weights file records (swinlite.metadata.INTERPOLATIONS):
# not "random" (the train transform's only)
INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "lanczos")
AFFINE_INTERPOLATIONS = ("bilinear", "bicubic", "nearest")  # what the rotations and shears of auto_augment take


def classifier_kwargs_problem(kwargs: dict[str, Any]) -> str | None:
    """Why ``model.kwargs`` cannot build a classifier, or None: ``features_only`` makes timm's model return its
    feature maps, where a classifier trains on logits (it passed every check, then the first step failed on a list
    after the data scan)."""
    if kwargs.get("features_only"):
        return (
            "has features_only=true: a classifier trains on the model's logits, and features_only gives its feature "
            "maps (for feature extraction: scripts/extract_features.py); drop it"
        )
    return None


@dataclass
class ModelConfig(SharedModel):
    kwargs: dict[str, Any] = field(default_factory=dict, metadata={"problem": classifier_kwargs_problem})


@dataclass
class DataConfig(SharedData):
    data_dir: str = "data"  # holds train/<class>/* and val/<class>/*
    dataset: str = choice("folder", "folder", "digits")  # "digits": scikit-learn's digits built into data_dir
    img_size: int = bounded(224, ge=1)
    # none (mean, std, interpolation, crop_pct): the model's pretrained config's, as timm's train.py takes them
    # (ImageNet's for swinlite models, 0.5 for many ViTs; the tag's crop); the run writes the values into config.yaml
    # and the weights files
    mean: tuple[float, float, float] | None = per_channel(None, ge=0, le=1)
    std: tuple[float, float, float] | None = per_channel(None, gt=0)
    scale: tuple[float, float] = span((0.08, 1.0), gt=0, le=1)  # RandomResizedCrop area range
    ratio: tuple[float, float] = span((3 / 4, 4 / 3), gt=0)  # timm only warns of one the wrong way round
    color_jitter: float = bounded(0.4, ge=0)
    auto_augment: str | None = None  # e.g. "rand-m9-mstd0.5-inc1"
    re_prob: float = bounded(0.0, ge=0, le=1)  # random erasing probability
    # random erasing's fill: per-pixel normal noise (the Swin recipe's and timm's train.py's), 0, or one value a channel
    re_mode: str = choice("pixel", "pixel", "const", "rand")
    interpolation: str | None = choice(None, *INTERPOLATIONS)  # of the train and eval resizes; none: the model's
    crop_pct: float | None = bounded(None, gt=0, le=1)  # eval: resize to img_size / crop_pct, crop; none: the model's
    mixup: float = bounded(0.0, ge=0)  # mixup alpha (0: off)
    cutmix: float = bounded(0.0, ge=0)  # cutmix alpha (0: off)


@dataclass
class ClassificationTrainConfig(TrainConfig):
    label_smoothing: float = bounded(0.0, ge=0, lt=1)


@dataclass
class Config(RunConfig):
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: ClassificationTrainConfig = field(default_factory=ClassificationTrainConfig)
