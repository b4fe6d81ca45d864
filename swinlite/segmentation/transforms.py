"""Segmentation augmentation with ``torchvision.transforms.v2``: the image and its ``tv_tensors.Mask`` move together.

mmsegmentation's ADE20K training pipeline, step by step (``build_train_transform``):

=======================================  ========================================================================
mmsegmentation                           here
=======================================  ========================================================================
Resize(2048x512, ratio 0.5-2.0, keep)    :class:`RandomRescale` (v2's ``resize``; the mask by nearest neighbour)
RandomCrop(512x512, cat_max_ratio 0.75)  :class:`CatMaxRandomCrop` (v2's ``crop``)
RandomFlip(0.5)                          ``v2.RandomHorizontalFlip(data.hflip)``
PhotoMetricDistortion                    :func:`photometric_distortion` (v2's ``ColorJitter`` steps)
Normalize                                ``v2.ToDtype`` + ``v2.Normalize`` (images only)
Pad(512x512, 0, seg 255)                 :class:`PadTo` (v2's ``pad``: the image with 0, the mask with ignore)
=======================================  ========================================================================

v2 applies nearest-neighbour resizing to masks whatever the interpolation asked, and leaves masks out of colour
and normalisation steps; the geometry of a step is drawn once (``make_params``) and applied to both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from ..seg_views import rescaled_size
from .config import SegDataConfig


class RandomRescale(v2.Transform):
    """Rescale to ``scale`` x a ratio drawn uniformly from ``ratio_range`` (see :func:`rescaled_size`).

    Args:
        scale: (long side, short side) limits at ratio 1, e.g. (2048, 512).
        ratio_range: (low, high) ratio.
    """

    def __init__(self, scale: Sequence[int], ratio_range: Sequence[float]) -> None:
        super().__init__()
        self.scale, self.ratio_range = tuple(scale), tuple(ratio_range)

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        low, high = self.ratio_range
        ratio = low + float(torch.rand(())) * (high - low)
        height, width = v2.query_size(flat_inputs)
        scale = [int(side * ratio) for side in self.scale]  # mmsegmentation truncates the scale
        return {"size": list(rescaled_size(height, width, scale))}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        return self._call_kernel(F.resize, inpt, params["size"], interpolation=v2.InterpolationMode.BILINEAR)


class CatMaxRandomCrop(v2.Transform):
    """A random crop of ``size`` (or the whole side, when the image is smaller) where no class covers more than
    ``cat_max_ratio`` of the labelled pixels (those of the ``tv_tensors.Mask``): a crop that fails is redrawn, up to
    ten times, the last one kept.

    Args:
        size: (height, width).
        cat_max_ratio: 1 keeps the first crop drawn.
        ignore_index: the label not counted.
    """

    tries = 10

    def __init__(self, size: Sequence[int], cat_max_ratio: float = 1.0, ignore_index: int = 255) -> None:
        super().__init__()
        self.size, self.cat_max_ratio, self.ignore_index = tuple(size), cat_max_ratio, ignore_index

    def _draw(self, height: int, width: int) -> dict[str, int]:
        crop_h, crop_w = min(self.size[0], height), min(self.size[1], width)
        top = int(torch.randint(0, height - crop_h + 1, ()))
        left = int(torch.randint(0, width - crop_w + 1, ()))
        return {"top": top, "left": left, "height": crop_h, "width": crop_w}

    def _balanced(self, labels: torch.Tensor, crop: dict[str, int]) -> bool:
        region = labels[crop["top"] : crop["top"] + crop["height"], crop["left"] : crop["left"] + crop["width"]]
        counts = torch.bincount(region[region != self.ignore_index])  # labels are 0..K-1 besides ignore_index
        counts = counts[counts > 0]
        return len(counts) > 1 and int(counts.max()) / int(counts.sum()) < self.cat_max_ratio

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        height, width = v2.query_size(flat_inputs)
        crop = self._draw(height, width)
        mask = next((x for x in flat_inputs if isinstance(x, tv_tensors.Mask)), None)
        if self.cat_max_ratio < 1 and mask is not None:
            labels = mask.as_subclass(torch.Tensor).reshape(mask.shape[-2:])  # [H, W]
            for _ in range(self.tries):
                if self._balanced(labels, crop):
                    break
                crop = self._draw(height, width)
        return crop

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        return self._call_kernel(F.crop, inpt, **params)


class PadTo(v2.Transform):
    """Pad at the bottom and right up to ``size`` (height, width): images with 0, masks with ``ignore_index``."""

    def __init__(self, size: Sequence[int], ignore_index: int = 255) -> None:
        super().__init__()
        self.size, self.ignore_index = tuple(size), ignore_index

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        height, width = v2.query_size(flat_inputs)
        return {"padding": [0, 0, max(self.size[1] - width, 0), max(self.size[0] - height, 0)]}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        fill = self.ignore_index if isinstance(inpt, tv_tensors.Mask) else 0
        return self._call_kernel(F.pad, inpt, params["padding"], fill=fill)


def photometric_distortion() -> v2.Transform:
    """mmsegmentation's PhotoMetricDistortion from v2's jitter: brightness, then contrast either first or last
    around saturation and hue, each step with probability 0.5. Brightness scales by 0.875-1.125 (mmsegmentation
    adds -32..32 of 255); hue turns by up to 0.1 of the circle (18 of OpenCV's 180)."""

    def maybe(**jitter: tuple[float, float]) -> v2.Transform:
        return v2.RandomApply([v2.ColorJitter(**jitter)], p=0.5)

    contrast, rest = maybe(contrast=(0.5, 1.5)), [maybe(saturation=(0.5, 1.5)), maybe(hue=(-0.1, 0.1))]
    return v2.Compose([
        maybe(brightness=(0.875, 1.125)),
        v2.RandomChoice([v2.Compose([contrast, *rest]), v2.Compose([*rest, contrast])]),
    ])  # fmt: skip


def normalize(mean: Sequence[float] | None, std: Sequence[float] | None) -> v2.Normalize:
    """``v2.Normalize`` of ``data.mean`` and ``data.std``, resolved.

    Raises:
        ValueError: either is unset (None), as a fresh config's are: a run resolves them before it builds its
            transforms (:func:`swinlite.engine.preflight.resolve_normalisation`), where torchvision's Normalize
            failed with a TypeError.
    """
    unset = [f"data.{name}" for name, value in (("mean", mean), ("std", std)) if value is None]
    if unset:
        raise ValueError(
            f"{' and '.join(unset)} {'is' if len(unset) == 1 else 'are'} unset (None), which the transforms cannot "
            "normalise with: resolve the config as a run does, cfg = swinlite.engine.preflight.resolve_normalisation("
            "SegmentationTask, cfg) (the model.pretrained weights file's record, else the model's pretrained "
            "config's), or set them"
        )
    return v2.Normalize(list(mean), list(std))


def build_train_transform(cfg: SegDataConfig, ignore_index: int) -> v2.Transform:
    """Rescale, crop, flip, distort colours, normalise, pad: images [3, h, w] float and masks [h, w] int64 of
    ``data.crop_size``. ``data.mean`` and ``data.std`` resolved (:func:`normalize`: the task fills them in where
    unset, from the weights file's record, else the model's)."""
    steps = [
        RandomRescale(cfg.img_scale, cfg.ratio_range),
        CatMaxRandomCrop(cfg.crop_size, cfg.cat_max_ratio, ignore_index),
        v2.RandomHorizontalFlip(cfg.hflip),
        *([photometric_distortion()] if cfg.photometric else []),
        v2.ToDtype(torch.float32, scale=True),
        normalize(cfg.mean, cfg.std),
        PadTo(cfg.crop_size, ignore_index),
        v2.ToPureTensor(),
    ]
    return v2.Compose(steps)


def build_eval_transform(mean: Sequence[float] | None, std: Sequence[float] | None) -> v2.Transform:
    """Normalised images at their own size (inference resizes them, see ``swinlite.segmentation.inference``) and
    their masks as they are: the metrics are computed at each image's own size. ``mean`` and ``std``: resolved
    ``data.mean`` and ``data.std`` (:func:`normalize`)."""
    return v2.Compose([v2.ToDtype(torch.float32, scale=True), normalize(mean, std), v2.ToPureTensor()])
