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

Under autocast (``train.amp``, ``evaluate_detection.py --amp``) the Swin, the FPN and the heads' convolutions and
linears run in autocast's dtype, and everything that makes boxes and scores of their outputs in fp32, as mmdetection
decodes boxes: each head returns its outputs as fp32 (:class:`Fp32Outputs`: the RPN head, the R-CNN box head,
RetinaNet's and FCOS's heads, whose last convolutions stay in bf16), the R-CNN's last layers (class scores and box
deltas, the 1x1 mask logits) run with autocast off on fp32 inputs (:class:`Fp32Predictor`), and the anchors are fp32
whatever the maps' dtype (:class:`Fp32AnchorGenerator`; torchvision's take the maps'). So anchors, decoding,
proposals, NMS, the losses and the returned boxes and scores are fp32. With the heads' outputs in bf16 the boxes past
256 px lay on a 2-px grid (4 px past 512) and most scores tied. RetinaNet's and FCOS's logits are still rounded to
bf16 before their fp32 sigmoid, so their scores tie more often than in fp32. Benchmarks in ``docs/detection.md``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torch import nn
from torchvision.models.detection import FCOS, FasterRCNN, MaskRCNN, RetinaNet
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, RPNHead, TwoMLPHead
from torchvision.models.detection.fcos import FCOSHead
from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
from torchvision.models.detection.retinanet import RetinaNetHead
from torchvision.ops import MultiScaleRoIAlign
from torchvision.ops.poolers import initLevelMapper

from ..convert import (
    RUN_SWIN_PREFIXES,
    backbone_state_dict,
    convert_state_dict,
    first_keys,
    misfit_note,
    other_classes,
    shape_mismatch,
    without_wrapper_prefix,
)
from ..engine.model import check_reserved, load_leniently, pretrained_file, warn_unkept_in_build, weights_kwargs
from ..fpn import SwinFPNBackbone, build_fpn_backbone
from ..io import read_metadata, read_state_dict
from ..weights import WeightsMismatchError, load_checkpoint, load_strict
from .config import DetModelConfig

_RATIOS = (0.5, 1.0, 2.0)
DETECTOR_SWIN = RUN_SWIN_PREFIXES["swinlite-detection"]  # where a swinlite detector's weights hold its Swin
# the layers whose shape follows the class count (R-CNN box predictor, Mask R-CNN mask logits, RetinaNet / FCOS logits)
CLASS_LAYERS = (
    "roi_heads.box_predictor.",
    "roi_heads.mask_predictor.mask_fcn_logits.",
    "head.classification_head.cls_logits.",
)
MASK_LAYERS = ("roi_heads.mask_head.", "roi_heads.mask_predictor.")  # what Mask R-CNN adds to Faster R-CNN
TWO_STAGE = ("fasterrcnn", "maskrcnn")  # the R-CNNs: region proposals, their FPN from level 0 and a pool level
# the Swin's keywords the detector sets (_backbone), each with who sets it: refused in model.kwargs and model_kwargs
FPN_BACKBONE = "the detector's FPN backbone (swinlite.fpn.build_fpn_backbone takes the Swin's levels as NCHW maps)"
SWIN_SET_BY = {
    "out_indices": "model.min_level (the FPN takes the Swin levels min_level..3; unset, 0 for fasterrcnn and maskrcnn, "
    "1 for retinanet and fcos)",
    "features_only": FPN_BACKBONE,
    "output_fmt": FPN_BACKBONE,
}


def anchor_generator(detector: str, strides: Sequence[int], anchor_scale: float = 8.0) -> AnchorGenerator:
    """Anchors for each FPN level of the given strides (see the module table)."""
    if detector == "fcos":
        return Fp32AnchorGenerator(tuple((s,) for s in strides), ((1.0,),) * len(strides))
    if detector == "retinanet":
        sizes = tuple(tuple(round(anchor_scale / 2 * s * 2 ** (k / 3)) for k in range(3)) for s in strides)
    else:
        sizes = tuple((round(anchor_scale * s),) for s in strides)
    return Fp32AnchorGenerator(sizes, (_RATIOS,) * len(strides))


def roi_align(names: Sequence[str], strides: Sequence[int], output_size: int) -> MultiScaleRoIAlign:
    """torchvision's RoIAlign over the FPN levels ``names`` of the given strides, its scales fixed from them."""
    pool = MultiScaleRoIAlign(list(names), output_size=output_size, sampling_ratio=2)
    pool.scales = [1.0 / s for s in strides]
    levels = [int(math.log2(s)) for s in strides]
    pool.map_levels = initLevelMapper(levels[0], levels[-1], pool.canonical_scale, pool.canonical_level)
    return pool


def _float(out: Any) -> Any:
    """``out`` with every tensor in it (in lists, tuples, dicts) as fp32; an fp32 tensor is returned as is."""
    if isinstance(out, torch.Tensor):
        return out.float()
    if isinstance(out, dict):
        return type(out)((key, _float(value)) for key, value in out.items())
    if isinstance(out, (list, tuple)):
        return type(out)(_float(value) for value in out)
    return out


class Fp32Outputs(nn.Module):
    """A torchvision head that computes in autocast's dtype and returns fp32 tensors (module docstring: why)."""

    def forward(self, x: Any) -> Any:
        return _float(super().forward(x))


class Fp32Predictor(nn.Module):
    """A final layer that runs with autocast off on its input made fp32 (module docstring: why)."""

    def forward(self, x: torch.Tensor) -> Any:
        if not torch.is_autocast_enabled(x.device.type):
            return super().forward(x)
        with torch.autocast(x.device.type, enabled=False):
            return super().forward(x.float())


class Fp32AnchorGenerator(AnchorGenerator):
    """torchvision's anchors in fp32 whatever the maps' dtype (it takes the first map's; bf16 ones past 256 px lay on
    a 2-px grid): it reads only the maps' shapes, so it gets fp32 stand-ins of their shapes that hold no data."""

    def forward(self, image_list: Any, feature_maps: list[torch.Tensor]) -> list[torch.Tensor]:
        if feature_maps[0].dtype not in (torch.bfloat16, torch.float16):
            return super().forward(image_list, feature_maps)
        shapes = [torch.empty((), device=m.device).expand(m.shape) for m in feature_maps]
        return super().forward(image_list, shapes)


class Fp32OutRPNHead(Fp32Outputs, RPNHead):
    pass


class Fp32OutTwoMLPHead(Fp32Outputs, TwoMLPHead):
    pass


class Fp32FastRCNNPredictor(Fp32Predictor, FastRCNNPredictor):
    pass


class Fp32Conv2d(Fp32Predictor, nn.Conv2d):
    pass


class Fp32MaskRCNNPredictor(MaskRCNNPredictor):
    """torchvision's mask predictor: its transposed convolution (the costly part) in autocast's dtype, its 1x1 logits
    convolution in fp32 (:class:`Fp32Predictor`)."""

    def __init__(self, in_channels: int, dim_reduced: int, num_classes: int) -> None:
        super().__init__(in_channels, dim_reduced, num_classes)
        self.mask_fcn_logits.__class__ = Fp32Conv2d  # the same parameters, initialized as torchvision does


class Fp32OutRetinaNetHead(Fp32Outputs, RetinaNetHead):
    pass


class Fp32OutFCOSHead(Fp32Outputs, FCOSHead):
    pass


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


def min_level(cfg: DetModelConfig) -> int:
    """The first Swin level the detector's FPN reads (it reads ``min_level``..3): ``model.min_level``, or where unset
    0 for the two-stage detectors (Faster and Mask R-CNN) and 1 for RetinaNet and FCOS."""
    if cfg.min_level is not None:
        return cfg.min_level
    return 0 if cfg.detector in TWO_STAGE else 1


def _backbone(
    cfg: DetModelConfig, swin_state: Mapping[str, torch.Tensor] | None, **model_kwargs: Any
) -> SwinFPNBackbone:
    """The Swin + FPN the detector ``cfg`` describes; ``model.kwargs`` (and ``model_kwargs``) go to the Swin, whose
    output norms are on unless ``model.kwargs.out_norm=false``. Its weights: ``swin_state`` (``model.pretrained``'s
    file's state dict, a Swin's in any layout: its Swin alone, the FPN starts fresh), fitted as every task's
    ``model.pretrained`` (:func:`~swinlite.convert.backbone_state_dict`), else the tag's as in every task (none for a
    whole detector's file, loaded later); ``swin_state`` loads strictly, or with
    ``model.kwargs.pretrained_strict=false`` as a classifier's Swin loads then (:func:`load_leniently`)."""
    kwargs = {"out_norm": True, **cfg.kwargs, **model_kwargs}
    two_stage = cfg.detector in TWO_STAGE
    path = pretrained_file(cfg)
    if path is None:
        weights = weights_kwargs(cfg)
    elif swin_state is None:
        weights = {"pretrained": False}
    else:  # loaded below; no classifier on either side: the detector has none
        weights = {"num_classes": 0}
    try:
        backbone = build_fpn_backbone(
            cfg.name,
            out_indices=tuple(range(min_level(cfg), 4)),
            fpn_channels=cfg.fpn_channels,
            extra_levels="pool" if two_stage else "p6p7",
            **weights,
            **kwargs,
        )
        if swin_state is not None:
            swin = backbone.body.model
            fitted = backbone_state_dict(swin_state, swin)
            if kwargs.get("pretrained_strict", True):
                load_checkpoint(swin, fitted)
            else:
                load_leniently(swin, fitted)
    except ValueError as e:
        if swin_state is None:
            raise
        note = misfit_note(read_metadata(path), cfg.name, swin_state)  # the keys named are the converted ones
        raise ValueError(f"model.pretrained {path}: {e}{note}") from None
    if cfg.grad_checkpointing:
        backbone.set_grad_checkpointing(True)
    return backbone


def _pretrained_state(
    state: dict[str, torch.Tensor], path: str
) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
    """(Swin weights, whole detector weights) in ``state``, read from the file ``model.pretrained`` names (``path``),
    one of them None.

    A swinlite detector's own file (``scripts/train_detection.py``'s, or its state dict saved from a DDP or
    ``torch.compile`` wrapper: without the wrapper's prefix) gives the whole detector; any other file is a Swin's in
    any layout swinlite converts (a segmentation run's weights: their Swin), given as it is (:func:`_backbone` fits
    it to the model built), its layout checked here, before any model is built.
    """
    unwrapped = without_wrapper_prefix(state)
    if any(key.startswith(DETECTOR_SWIN) for key in unwrapped):
        return None, unwrapped
    try:
        convert_state_dict(state)  # a layout swinlite does not read is refused before the model is built
    except ValueError as e:
        raise ValueError(f"model.pretrained {path}: {e}") from None
    return state, None


def _load_detector(
    model: nn.Module,
    cfg: DetModelConfig,
    num_classes: int,
    state: dict,
    source: str,
    names: Sequence[str] | None = None,
) -> None:
    """A swinlite detector's weights (from the file ``source``) into ``model``, the detector ``cfg`` describes for
    ``num_classes`` classes (``names``, where known): strictly, but for the layers whose shape follows the class count
    (:data:`CLASS_LAYERS`), which start fresh, with a warning, when the file's detector has another class count; a
    Faster R-CNN's weights start a Mask R-CNN, its mask head fresh (with a warning). Class layers of as many classes
    load as they are, row by row: where the file records other class names a warning names both lists.

    Raises:
        ValueError: weights of another detector (named when the file's metadata names it), or that do not fit
            otherwise (FPN width, ...), naming the keys.
    """
    meta = read_metadata(source)  # a file scripts/train_detection.py wrote: its detector and classes
    theirs, classes = (meta.get("detector") or {}).get("detector"), meta.get("classes")
    box_only = not any(k.startswith(MASK_LAYERS) for k in state)
    grows_masks = cfg.detector == "maskrcnn" and box_only and theirs in (None, "fasterrcnn")
    if theirs is not None and theirs != cfg.detector and not grows_masks:
        raise ValueError(
            f"model.pretrained {source} holds a {theirs} detector's weights, model.detector is {cfg.detector}: set "
            f"model.detector={theirs} to start from them (or start from its Swin alone: scripts/convert_checkpoint.py "
            f"{source} SWIN.safetensors writes it, for model.pretrained=SWIN.safetensors)"
        )
    start_fresh: tuple[str, ...] = ()
    if grows_masks:  # Mask R-CNN from Faster R-CNN, as detectron2 and mmdetection start it
        warnings.warn(f"{source}: a Faster R-CNN's weights; the mask head starts fresh", stacklevel=3)
        start_fresh = MASK_LAYERS
    target = model.state_dict()
    other = [k for k in state if k.startswith(CLASS_LAYERS) and k in target and state[k].shape != target[k].shape]
    fresh: tuple[str, ...] = ()
    if other and not (isinstance(classes, list) and len(classes) == num_classes):  # else not a class count
        dropped = [k for k in state if k.startswith(CLASS_LAYERS)]
        counts = (
            f"{len(classes)} classes in the file, {num_classes} here"
            if isinstance(classes, list)
            else shape_mismatch(other[0], state[other[0]].shape, target[other[0]].shape)
        )
        warnings.warn(
            f"{source}: a detector of another class count ({counts}); its class layers start fresh: "
            f"{first_keys(dropped)}",
            stacklevel=3,
        )
        state, fresh = {k: v for k, v in state.items() if k not in dropped}, CLASS_LAYERS
    elif names is not None and (renamed := other_classes(classes, names)):
        warnings.warn(
            f"{source}: its class layers were trained on other classes {renamed}; they are kept, row i now class i of "
            "the data",
            stacklevel=3,
        )
    try:
        load_strict(model, state, source, may_start_fresh=fresh + start_fresh)
    except WeightsMismatchError as e:  # another refusal (NaN weights, say) is no matter of settings: as raised
        raise WeightsMismatchError(
            f"{e}; a detector's weights load whole into a detector built alike (model.detector, model.name, "
            "model.min_level, model.fpn_channels, model.box_head_dim, model.kwargs as the run that wrote them)"
        ) from None


def build_detector(
    cfg: DetModelConfig,
    num_classes: int,
    test_size: int,
    max_size: int,
    mean: Sequence[float] = IMAGENET_DEFAULT_MEAN,
    std: Sequence[float] = IMAGENET_DEFAULT_STD,
    classes: Sequence[str] | None = None,
    **model_kwargs: Any,
) -> nn.Module:
    """The detector ``cfg.detector`` names, for ``num_classes`` object classes (plus the background), named
    ``classes`` where the caller knows them (a run's data).

    Training images arrive resized by the data transforms; evaluation images are resized by the detector to
    short side ``test_size`` (long side at most ``max_size``) and its boxes mapped back to the input size.
    ``model.pretrained``: ``true`` loads the tag's weights into the Swin; a file is a Swin checkpoint of any layout
    swinlite converts (a segmentation run's weights too: their Swin; the FPN and heads start fresh) or a swinlite
    detector's own weights (everything loads, the class layers of another class count start fresh with a warning, and
    those of other class names, named in a warning, load as they are: :func:`_load_detector`).

    Raises:
        ValueError: a keyword the detector sets itself (:data:`SWIN_SET_BY`, ``pretrained``; ``num_classes`` in
            ``cfg.kwargs``, the FPN's in ``model_kwargs``); weights that do not fit (naming the file and the keys).
    """
    set_by = {"pretrained": "the config's pretrained (DetModelConfig.pretrained)", **SWIN_SET_BY}
    check_reserved(cfg.kwargs, {"num_classes": "build_detector's num_classes", **set_by})
    fpn = {
        "fpn_channels": "the config (DetModelConfig.fpn_channels)",
        "min_level": "the config (DetModelConfig.min_level)",
        "extra_levels": "the detector (p6p7 for retinanet and fcos, pool for the R-CNNs)",
        "checkpoint": set_by["pretrained"],
    }
    check_reserved(model_kwargs, set_by | fpn, "model_kwargs")
    path = pretrained_file(cfg)
    state = read_state_dict(path) if path is not None else None
    swin_state, detector_state = _pretrained_state(state, path) if state is not None else (None, None)
    backbone = _backbone(cfg, swin_state, **model_kwargs)
    model = _detector(cfg, backbone, num_classes, test_size, max_size, mean, std)
    if detector_state is not None:
        _load_detector(model, cfg, num_classes, detector_state, path, classes)
    warn_unkept_in_build(cfg)  # the file's Swin settings cfg.kwargs leaves out (a V2's windows), but in a run
    return model


def _detector(
    cfg: DetModelConfig,
    backbone: SwinFPNBackbone,
    num_classes: int,
    test_size: int,
    max_size: int,
    mean: Sequence[float],
    std: Sequence[float],
) -> nn.Module:
    """The torchvision detector ``cfg.detector`` names on ``backbone`` (see :func:`build_detector`)."""
    anchors = anchor_generator(cfg.detector, backbone.strides, cfg.anchor_scale)
    per_cell = anchors.num_anchors_per_location()[0]
    width = cfg.fpn_channels
    common = dict(min_size=test_size, max_size=max_size, image_mean=list(mean), image_std=list(std), _skip_resize=True)
    if cfg.detector == "retinanet":
        return SwinRetinaNet(backbone, num_classes + 1, anchor_generator=anchors, score_thresh=cfg.score_thresh,
                         head=Fp32OutRetinaNetHead(width, per_cell, num_classes + 1),
                         detections_per_img=cfg.detections_per_img, **common)  # fmt: skip
    if cfg.detector == "fcos":
        return SwinFCOS(backbone, num_classes + 1, anchor_generator=anchors, score_thresh=cfg.score_thresh,
                    head=Fp32OutFCOSHead(width, per_cell, num_classes + 1),
                    detections_per_img=cfg.detections_per_img, **common)  # fmt: skip
    names = [str(i) for i in range(len(backbone.strides) - 1)]  # the FPN levels of Swin levels, not "pool"
    strides = backbone.strides[: len(names)]
    heads = dict(  # built in torchvision's order (the RPN's last): a seed gives the weights it gave before
        box_head=Fp32OutTwoMLPHead(width * 7 * 7, cfg.box_head_dim),  # RoIAlign output: 7 x 7 per FPN channel
        box_predictor=Fp32FastRCNNPredictor(cfg.box_head_dim, num_classes + 1),
    )
    if cfg.detector == "maskrcnn":
        heads |= dict(mask_roi_pool=roi_align(names, strides, 14),
                      mask_head=MaskRCNNHeads(width, [width] * 4, 1),
                      mask_predictor=Fp32MaskRCNNPredictor(width, width, num_classes + 1))  # fmt: skip
    two_stage = dict(
        box_roi_pool=roi_align(names, strides, 7),
        rpn_anchor_generator=anchors,
        rpn_head=Fp32OutRPNHead(width, per_cell),
        rpn_batch_size_per_image=cfg.rpn_batch_size_per_image,
        box_batch_size_per_image=cfg.box_batch_size_per_image,
        box_score_thresh=cfg.score_thresh,
        box_detections_per_img=cfg.detections_per_img,
        **heads,
        **common,
    )
    return (SwinMaskRCNN if cfg.detector == "maskrcnn" else SwinFasterRCNN)(backbone, **two_stage)
