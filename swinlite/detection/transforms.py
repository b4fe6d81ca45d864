"""Detection augmentation with ``torchvision.transforms.v2``: image, boxes and masks move together.

Training resizes here (multi-scale short side, or large-scale jitter), so the detector is built with
``_skip_resize=True`` and only resizes in evaluation, to ``data.test_size`` (mapping boxes back to the
original image, as COCO evaluation needs). Every one of these resizes follows one rule
(:func:`resize_problem`), under which a very thin image has no size to become.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torchvision import tv_tensors
from torchvision.ops import masks_to_boxes
from torchvision.transforms import v2

from .config import DetDataConfig

LSJ_SCALES = (0.1, 2.0)  # large-scale jitter: the scales of the test_size square drawn from


def resize_problem(height: int, width: int, short: float, long: float) -> str | None:
    """Why a ``height`` x ``width`` image cannot be resized toward a ``short`` short side with its long side at most
    ``long``, or None.

    torchvision's resizes (``RandomShortestSize``, ``ScaleJitter``, the detectors' own in evaluation) scale by
    ``min(short / short side, long / long side)`` and round each side down; a very thin image (say 1 x 4000) would
    become 0 pixels thin, which they refuse.
    """
    scale = min(short / min(height, width), long / max(height, width))
    new_height, new_width = math.floor(height * scale), math.floor(width * scale)
    if min(new_height, new_width) >= 1:
        return None
    to = f"short side {short:g}, long side at most {long:g}" if math.isfinite(short) else f"long side {long:g}"
    return f"a {height}x{width} (HxW) image would be resized to {new_height}x{new_width} ({to}): too thin"


def smallest_train_resize(cfg: DetDataConfig) -> tuple[float, float]:
    """(short, long) of the smallest resize the train transform draws: an image that survives it survives every
    draw (:func:`resize_problem`)."""
    if cfg.lsj:  # ScaleJitter: scale * test_size / long side
        return math.inf, LSJ_SCALES[0] * cfg.test_size
    return train_sizes(cfg)[0], cfg.max_size


def train_sizes(cfg: DetDataConfig) -> list[int]:
    """Short sides multi-scale training draws from, e.g. 480, 512, ..., 800."""
    lo, hi = cfg.train_sizes
    return list(range(lo, hi + 1, cfg.size_step))


def mask_extents(masks: torch.Tensor) -> torch.Tensor:
    """XYXY boxes [N, 4] of masks [N, H, W]: each mask's pixel extent (pixel ``i`` spans ``[i, i + 1)``), as
    detectron2's and mmdetection's boxes from masks; an empty mask gets the empty box (0, 0, 0, 0)."""
    masks = masks.as_subclass(torch.Tensor).bool()
    boxes = masks_to_boxes(masks) + torch.tensor([0.0, 0.0, 1.0, 1.0])
    boxes[~masks.flatten(1).any(dim=1)] = 0.0
    return boxes


class BoxesFromMasks(v2.Transform):
    """Each box set to its mask's extent (:func:`mask_extents`), after a crop that cut objects: the crop only clamps a
    box, which keeps the object's full extent along the uncut side (detectron2's ``recompute_boxes``, mmdetection's
    ``RandomCrop(recompute_bbox=True)``). A mask the crop left empty gets an empty box, which
    ``SanitizeBoundingBoxes`` then drops with its mask and label. A sample without masks passes unchanged."""

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        masks = next((x for x in flat_inputs if isinstance(x, tv_tensors.Mask)), None)
        return {"extents": None if masks is None else mask_extents(masks)}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if params["extents"] is None or not isinstance(inpt, tv_tensors.BoundingBoxes):
            return inpt
        boxes = tv_tensors.BoundingBoxes(params["extents"], format="XYXY", canvas_size=inpt.canvas_size)
        return v2.functional.convert_bounding_box_format(boxes, new_format=inpt.format).to(inpt.dtype)


def size_step_problem(cfg: DetDataConfig) -> str | None:
    """Why ``data.size_step`` cannot be used with ``data.train_sizes``, or None: a step that does not divide the
    span never draws the range's high end (sizes 56 to 72 in steps of 10: 56, 66)."""
    lo, hi = cfg.train_sizes
    step, sizes = cfg.size_step, train_sizes(cfg)
    if sizes[-1] == hi:
        return None
    drawn = ", ".join(map(str, sizes)) if len(sizes) <= 6 else f"{sizes[0]}, {sizes[1]}, ..., {sizes[-1]}"
    return (
        f"data.train_sizes=[{lo}, {hi}] with data.size_step={step} never draws {hi} (sizes {drawn}): choose a "
        f"data.size_step that divides {hi - lo}, or end data.train_sizes at {sizes[-1]} or {sizes[-1] + step}"
    )


def build_train_transform(cfg: DetDataConfig) -> v2.Transform:
    """Flip, then multi-scale resize (or large-scale jitter of a ``test_size`` square, padded with the mean colour,
    ``cfg.mean``, as the detector pads its batches, its boxes recomputed from the cropped masks where the sample has
    masks); drop boxes left empty.

    The resizes are not antialiased, as the detector's own resize in evaluation and prediction is not (torchvision's
    ``GeneralizedRCNNTransform``, and the ONNX path's :func:`swinlite.onnx_predict.bilinear_resize`): a shrunk image
    looks the same to the model in training and at test time (torchvision's default, antialiased, blurred the
    training images alone).

    Raises:
        ValueError: ``cfg.lsj`` with ``cfg.mean`` not resolved (None), which the pad colour needs.
    """
    if cfg.lsj:
        if cfg.mean is None:
            raise ValueError(
                "data.lsj pads with data.mean, which is None: give the mean the run resolves (the model's)"
            )
        side = (cfg.test_size, cfg.test_size)
        mean = tuple(round(255 * m) for m in cfg.mean)  # the uint8 image's mean colour: 0 once normalised
        resize = [
            v2.ScaleJitter(side, scale_range=LSJ_SCALES, antialias=False),
            v2.RandomCrop(side, pad_if_needed=True, fill={tv_tensors.Image: mean, "others": 0}),  # masks: no object
            BoxesFromMasks(),
        ]
    else:
        resize = [v2.RandomShortestSize(train_sizes(cfg), max_size=cfg.max_size, antialias=False)]
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
