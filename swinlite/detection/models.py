"""torchvision detectors on a Swin FPN backbone, with anchors that follow the backbone's real strides.

torchvision's default anchors (32-512 px on strides 4-64) assume a patch-4 backbone; a patch-2 Swin has
strides 2-32, so every anchor here is sized from the level's stride instead:

=============  =========================  ==============================================
detector       Swin levels -> FPN         anchors per level (s: stride, a: anchor_scale)
=============  =========================  ==============================================
fasterrcnn     0-3 + max-pooled level     a*s, aspect ratios 0.5, 1, 2
maskrcnn       0-3 + max-pooled level     a*s, aspect ratios 0.5, 1, 2
retinanet      1-3 + P6, P7               a/2*s x 2^(0, 1/3, 2/3), aspect ratios 0.5, 1, 2
fcos           1-3 + P6, P7               s (FCOS reads the anchor size as the stride)
=============  =========================  ==============================================

``model.min_level`` changes the first Swin level (e.g. 1 skips a patch-2 model's stride-2 level).

Two things make every detector's output independent of batch size and order:

- The RoI poolers' scales are set from the backbone's strides when the detector is built. torchvision's
  ``MultiScaleRoIAlign`` otherwise infers them from the first batch it sees and keeps them, so a small
  first image padded a lot could fix them one level off for the rest of the process.
- In eval mode each image runs through the network alone (padded only to its own size multiple). In a
  batch, an image is padded to the largest one, and Swin's windows and the detectors' anchors would see
  that padding: the same image could give other boxes beside another image. Training batches as usual.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torchvision.models.detection import FCOS, FasterRCNN, MaskRCNN, RetinaNet
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
from torchvision.ops import MultiScaleRoIAlign
from torchvision.ops.poolers import initLevelMapper

from ..engine.model import pretrained_file, weights_kwargs
from ..fpn import SwinFPNBackbone, build_fpn_backbone
from .config import DetModelConfig

_RATIOS = (0.5, 1.0, 2.0)


def anchor_generator(detector: str, strides: Sequence[int], anchor_scale: float = 8.0) -> AnchorGenerator:
    """Anchors for each FPN level of the given strides (see the module table)."""
    if detector == "fcos":
        return AnchorGenerator(tuple((s,) for s in strides), ((1.0,),) * len(strides))
    if detector == "retinanet":
        sizes = tuple(tuple(round(anchor_scale / 2 * s * 2 ** (k / 3)) for k in range(3)) for s in strides)
    else:
        sizes = tuple((round(anchor_scale * s),) for s in strides)
    return AnchorGenerator(sizes, (_RATIOS,) * len(strides))


def roi_align(names: Sequence[str], strides: Sequence[int], output_size: int) -> MultiScaleRoIAlign:
    """torchvision's RoIAlign over the FPN levels ``names`` of the given strides, its scales fixed from them."""
    pool = MultiScaleRoIAlign(list(names), output_size=output_size, sampling_ratio=2)
    pool.scales = [1.0 / s for s in strides]
    levels = [int(math.log2(s)) for s in strides]
    pool.map_levels = initLevelMapper(levels[0], levels[-1], pool.canonical_scale, pool.canonical_level)
    return pool


class OneImageAtATime(nn.Module):
    """Eval-mode ``forward`` of a torchvision detector that runs each image alone (module docstring: why)."""

    def forward(self, images: list[torch.Tensor], targets: list[dict] | None = None) -> Any:
        if self.training:
            return super().forward(images, targets)
        detect = super().forward
        return [detect([image])[0] for image in images]


class SwinFasterRCNN(OneImageAtATime, FasterRCNN):
    pass


class SwinMaskRCNN(OneImageAtATime, MaskRCNN):
    pass


class SwinRetinaNet(OneImageAtATime, RetinaNet):
    pass


class SwinFCOS(OneImageAtATime, FCOS):
    pass


def _backbone(cfg: DetModelConfig, **model_kwargs: Any) -> SwinFPNBackbone:
    """The Swin + FPN the detector ``cfg`` describes; ``model.kwargs`` (and ``model_kwargs``) go to the Swin, whose
    output norms are on unless ``model.kwargs.out_norm=false``; ``model.pretrained`` as in every task."""
    kwargs = {"out_norm": True, **cfg.kwargs, **model_kwargs}
    two_stage = cfg.detector in ("fasterrcnn", "maskrcnn")
    min_level = (0 if two_stage else 1) if cfg.min_level is None else cfg.min_level
    path = pretrained_file(cfg)  # a file loads strictly into the whole Swin; the tag's weights as in every task
    weights = {"checkpoint": path} if path is not None else weights_kwargs(cfg)
    backbone = build_fpn_backbone(
        cfg.name,
        out_indices=tuple(range(min_level, 4)),
        fpn_channels=cfg.fpn_channels,
        extra_levels="pool" if two_stage else "p6p7",
        **weights,
        **kwargs,
    )
    if cfg.grad_checkpointing:
        backbone.set_grad_checkpointing(True)
    return backbone


def build_detector(
    cfg: DetModelConfig,
    num_classes: int,
    test_size: int,
    max_size: int,
    mean: Sequence[float] = (0.485, 0.456, 0.406),
    std: Sequence[float] = (0.229, 0.224, 0.225),
    **model_kwargs: Any,
) -> nn.Module:
    """The detector ``cfg.detector`` names, for ``num_classes`` object classes (plus the background).

    Training images arrive resized by the data transforms; evaluation images are resized by the detector to
    short side ``test_size`` (long side at most ``max_size``) and its boxes mapped back to the input size.
    """
    backbone = _backbone(cfg, **model_kwargs)
    anchors = anchor_generator(cfg.detector, backbone.strides, cfg.anchor_scale)
    common = dict(min_size=test_size, max_size=max_size, image_mean=list(mean), image_std=list(std), _skip_resize=True)
    if cfg.detector == "retinanet":
        return SwinRetinaNet(backbone, num_classes + 1, anchor_generator=anchors, score_thresh=cfg.score_thresh,
                         detections_per_img=cfg.detections_per_img, **common)  # fmt: skip
    if cfg.detector == "fcos":
        return SwinFCOS(backbone, num_classes + 1, anchor_generator=anchors, score_thresh=cfg.score_thresh,
                    detections_per_img=cfg.detections_per_img, **common)  # fmt: skip
    width = cfg.fpn_channels
    names = [str(i) for i in range(len(backbone.strides) - 1)]  # the FPN levels of Swin levels, not "pool"
    strides = backbone.strides[: len(names)]
    two_stage = dict(
        box_roi_pool=roi_align(names, strides, 7),
        rpn_anchor_generator=anchors,
        rpn_batch_size_per_image=cfg.rpn_batch_size_per_image,
        box_batch_size_per_image=cfg.box_batch_size_per_image,
        box_head=TwoMLPHead(width * 7 * 7, cfg.box_head_dim),  # RoIAlign output: 7 x 7 per FPN channel
        box_predictor=FastRCNNPredictor(cfg.box_head_dim, num_classes + 1),
        box_score_thresh=cfg.score_thresh,
        box_detections_per_img=cfg.detections_per_img,
        **common,
    )
    if cfg.detector == "maskrcnn":
        return SwinMaskRCNN(backbone, mask_roi_pool=roi_align(names, strides, 14),
                        mask_head=MaskRCNNHeads(width, [width] * 4, 1),
                        mask_predictor=MaskRCNNPredictor(width, width, num_classes + 1), **two_stage)  # fmt: skip
    return SwinFasterRCNN(backbone, **two_stage)
