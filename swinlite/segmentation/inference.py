"""Test-time prediction as mmsegmentation's ``EncoderDecoder`` does it: the image rescaled to ``img_scale`` (keeping
its aspect ratio), the whole image or sliding windows through the model, the logits resized back to the image's own
size; optionally several scales and the mirrored image, their softmax averaged (mmsegmentation's ``aug_test``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..engine.distributed import DistInfo, all_gather_object, all_reduce_sum
from ..engine.loop import SINGLE, StepSettings, autocast
from ..images import LeftOut, nothing_scored
from ..seg_views import (
    default_stride,
    large_problem,
    slide_windows,
    stride_problem,
    stride_unused,
    test_views,
    thin_problem,
)
from .config import TEST_MODES, SegDataConfig
from .evaluation import confusion


@dataclass(frozen=True)
class InferenceSettings:
    """How an image is predicted (the ``data.test_*`` keys; recorded in checkpoints as ``preprocessing``)."""

    img_scale: tuple[int, int] = (2048, 512)  # (long, short) side limits
    mode: str = "whole"  # or "slide"
    crop_size: tuple[int, int] = (512, 512)  # slide: window (height, width)
    stride: tuple[int, int] = (341, 341)  # slide: step (height, width), at most crop_size
    ratios: tuple[float, ...] = (1.0,)  # of img_scale, averaged
    flip: bool = False  # also the mirrored image

    @classmethod
    def of(cls, cfg: SegDataConfig) -> InferenceSettings:
        stride = cfg.test_stride or default_stride(cfg.crop_size)
        return cls(cfg.img_scale, cfg.test_mode, cfg.crop_size, stride, cfg.test_ratios, cfg.test_flip)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def overridden(
        self,
        mode: str | None,
        ratios: Sequence[float] | None,
        flip: bool | None,
        stride: Sequence[int] | None = None,
    ) -> InferenceSettings:
        """These settings with a script's ``--mode``, ``--ratios``, ``--flip`` / ``--no-flip`` and ``--stride`` where
        given (None: the recorded setting), checked
        (:meth:`check`: slide mode with a stride that would leave gaps is refused before any data is read or output
        removed).

        Raises:
            ValueError: a ``stride`` for settings that predict each image whole (the mode given, or the recorded one
                without a ``mode``), which would ignore it; or what :meth:`check` refuses.
        """
        test = replace(
            self,
            mode=mode or self.mode,
            ratios=tuple(ratios or self.ratios),
            flip=self.flip if flip is None else flip,
            stride=tuple(stride or self.stride),
        )
        unused = stride_unused(stride, test.mode, None if mode else "the checkpoint")
        if unused:
            raise ValueError(unused)
        test.check()
        return test

    def check(self) -> None:
        """ValueError for settings that predict no image, or leave pixels between the windows unpredicted; the
        latter only in slide mode, so that a checkpoint recording such a stride still predicts images whole."""
        if self.mode not in TEST_MODES:
            raise ValueError(f"test mode must be one of {', '.join(TEST_MODES)}, got {self.mode!r}")
        if min(*self.img_scale, *self.crop_size, *self.stride) < 1 or min(self.ratios) <= 0:
            raise ValueError(f"test sizes, strides and ratios must be positive, got {self.to_dict()}")
        problem = stride_problem(self.crop_size, self.stride) if self.mode == "slide" else None
        if problem:  # a checkpoint of a run before data.test_stride was checked
            raise ValueError(f"slide mode: {problem} (or predict in mode whole; scripts: --stride H W, --mode whole)")


def slide_logits(model: nn.Module, images: torch.Tensor, crop: Sequence[int], stride: Sequence[int]) -> torch.Tensor:
    """Logits [B, K, H, W] of windows of ``crop`` every ``stride`` pixels (the last ones flush with the border),
    averaged where they overlap; a side shorter than the window is one window of its own size."""
    height, width = images.shape[2:]
    total, count = None, images.new_zeros((1, 1, height, width))
    for top, bottom, left, right in slide_windows(height, width, crop, stride):
        logits = model(images[:, :, top:bottom, left:right]).logits.float()  # [B, K, h, w]
        if total is None:
            total = images.new_zeros((images.shape[0], logits.shape[1], height, width), dtype=torch.float32)
        total[:, :, top:bottom, left:right] += logits
        count[:, :, top:bottom, left:right] += 1
    return total / count


def _view_scores(
    model: nn.Module, images: torch.Tensor, size: tuple[int, int], flip: bool, test: InferenceSettings, softmax: bool
) -> torch.Tensor:
    """Scores [B, K, H, W] of one view (:func:`~swinlite.seg_views.test_views`) of ``images`` [B, 3, H, W], back at
    their own size: its logits, or with ``softmax`` their softmax (computed in place: one map of the K classes at the
    images' size, as :func:`~swinlite.seg_views.image_bytes` counts them)."""
    height, width = images.shape[2:]
    x = images if size == (height, width) else F.interpolate(images, size, mode="bilinear", antialias=True)
    x = x.flip(-1) if flip else x
    logits = slide_logits(model, x, test.crop_size, test.stride) if test.mode == "slide" else model(x).logits
    logits = logits.float().flip(-1) if flip else logits.float()
    logits = F.interpolate(logits, (height, width), mode="bilinear", align_corners=False)
    return torch.softmax(logits, 1, out=logits) if softmax else logits


@torch.no_grad()
def predict_scores(model: nn.Module, images: torch.Tensor, test: InferenceSettings) -> torch.Tensor:
    """Per-class scores [B, K, H, W] of normalised ``images`` [B, 3, H, W] at their own size: logits for one view,
    the mean softmax over several (scales x flips). ``argmax(1)`` is the prediction. Each view's scores are added
    into the first's as they come, so that at most two maps of the K classes are held at the images' size.

    Raises:
        ValueError: ``images`` not a batch [B, 3, H, W] (one image [3, H, W] is ``images[None]``).
    """
    if images.dim() != 4:
        raise ValueError(
            f"predict_scores takes a batch of images [B, 3, H, W], got a {images.dim()}-D tensor of shape "
            f"{list(images.shape)} (one image [3, H, W]: pass images[None])"
        )
    views = test_views(*images.shape[2:], test.img_scale, test.ratios, test.flip)
    total = _view_scores(model, images, *views[0], test, softmax=len(views) > 1)
    for size, flip in views[1:]:
        total += _view_scores(model, images, size, flip, test, softmax=True)
    return total.div_(len(views))


def patch_side(model: nn.Module) -> int:
    """The thinnest input side a segmenter takes: its backbone's patch (the stride of its first level)."""
    return model.backbone.feature_info.reduction()[0]


def thin_check(model: nn.Module, test: InferenceSettings) -> Callable[[int, int], str | None]:
    """``(height, width) -> why`` ``test`` cannot predict an image of that size with ``model``, or None: a view
    thinner than its backbone's patch (:func:`~swinlite.seg_views.thin_problem`). Training and the evaluation
    script leave such images out of the split before any work (:func:`~.data.without_thin_pairs`, one warning); an
    evaluation dataset's ``too_thin`` catches one replaced since the scan, as it is read."""
    return functools.partial(thin_problem, img_scale=test.img_scale, ratios=test.ratios, min_side=patch_side(model))


def large_check(
    model: nn.Module, test: InferenceSettings, option: str = "--ratios"
) -> Callable[[int, int], str | None]:
    """``(height, width) -> why`` ``test`` would predict an image of that size with ``model`` through more memory
    than :func:`~swinlite.seg_views.memory_budget` (a view's full-size tensors beside the scores at the image's own
    size: :func:`~swinlite.seg_views.large_problem`; ``option``: where the ratios come from), or None.
    ``segment.py``, ``evaluate_segmentation.py`` and training's val split refuse such an image before any work
    (``--ratios 100`` took all the memory, and so did a 6000x8000 photo of 150 classes); ``segment.py --onnx``
    applies the same rule."""
    return functools.partial(
        large_problem,
        img_scale=test.img_scale,
        ratios=test.ratios,
        flip=test.flip,
        num_classes=model.num_classes,
        option=option,
    )


@torch.no_grad()
def confusion_of(
    model: nn.Module,
    loader: Iterable,
    test: InferenceSettings,
    num_classes: int,
    ignore_index: int,
    settings: StepSettings,
    dist: DistInfo = SINGLE,
) -> tuple[torch.Tensor, int, list[LeftOut]]:
    """(summed confusion counts [K, K], images counted, images left out) over every (image, mask) of ``loader``
    (this process's shard; all processes' on return). Batches are (images, masks, left out): stacked tensors or
    lists of images of different sizes, then the records of the pairs an evaluation could not read, or predict
    (``data.collate``; the dataset's ``too_thin``, :func:`thin_check`)."""
    model.eval()
    counts = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    images_counted, left_out = 0, []
    for images, masks, left in loader:
        left_out += left
        if isinstance(images, torch.Tensor):  # one size: the whole batch at once
            groups = [(images, masks)]
        else:
            groups = [(image[None], mask[None]) for image, mask in zip(images, masks, strict=True)]
        for x, y in groups:
            images_counted += len(x)
            x = x.to(settings.device, non_blocking=True)
            if settings.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with autocast(settings):
                pred = predict_scores(model, x, test).argmax(1).cpu()
            counts += confusion(pred, y, num_classes, ignore_index)
    summed = all_reduce_sum([*counts.flatten().double().tolist(), float(images_counted)], dist, settings.device)
    total = torch.tensor(summed, dtype=torch.float64).round().long()
    left_out = [item for part in all_gather_object(left_out, dist) for item in part]
    return total[:-1].reshape(num_classes, num_classes), int(total[-1]), left_out


def check_counted(counts: torch.Tensor, images: int, left_out: list[LeftOut], what: str) -> None:
    """ValueError when an evaluation (:func:`confusion_of`) counted no labelled pixel: every image left out as it was
    read (pixels that do not decode behind a header the scan read), or those it scored hold only ``ignore_index``.
    The mIoU of no pixel is NaN, which would read as a result (a report of nulls; a training run that never picks
    best weights)."""
    if int(counts.sum()) == 0:
        raise nothing_scored(images, left_out, what, "pixel of a class", "mIoU")
