"""Detection augmentation with ``torchvision.transforms.v2``: image, boxes and masks move together.

Training resizes here (multi-scale short side, or large-scale jitter), so the detector is built with
``_skip_resize=True`` and only resizes in evaluation, to ``data.test_size`` (mapping boxes back to the
original image, as COCO evaluation needs).
"""

from __future__ import annotations

import torch
from torchvision.transforms import v2

from .config import DetDataConfig


def train_sizes(cfg: DetDataConfig) -> list[int]:
    """Short sides multi-scale training draws from, e.g. 480, 512, ..., 800."""
    lo, hi = cfg.train_sizes
    return list(range(lo, hi + 1, cfg.size_step))


def build_train_transform(cfg: DetDataConfig) -> v2.Transform:
    """Flip, then multi-scale resize (or large-scale jitter of a ``test_size`` square); drop boxes left empty."""
    if cfg.lsj:
        side = (cfg.test_size, cfg.test_size)
        resize = [v2.ScaleJitter(side, scale_range=(0.1, 2.0)), v2.RandomCrop(side, pad_if_needed=True)]
    else:
        resize = [v2.RandomShortestSize(train_sizes(cfg), max_size=cfg.max_size)]
    return v2.Compose(
        [
            v2.RandomHorizontalFlip(cfg.hflip),
            *resize,
            v2.SanitizeBoundingBoxes(min_size=1.0),
            v2.ToDtype(torch.float32, scale=True),
            v2.ToPureTensor(),
        ]
    )


def build_eval_transform() -> v2.Transform:
    """Full-size float images; the detector resizes them to ``test_size`` itself."""
    return v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.ToPureTensor()])
