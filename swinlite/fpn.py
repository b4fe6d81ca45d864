"""A swinlite backbone with an FPN, ready for torchvision's FasterRCNN, MaskRCNN, RetinaNet and FCOS.

Follows torchvision's ``BackboneWithFPN`` conventions: ``forward`` returns an OrderedDict of NCHW
maps named "0", "1", ... (one per returned Swin level) plus the extra levels (``"pool"``, a max-pooled
level as the two-stage detectors use, or ``"p6"``, ``"p7"`` as RetinaNet and FCOS use), all with
``out_channels`` channels. ``strides`` lists each output's stride in input pixels, which the anchors follow.
"""

import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import timm
import torch
from torch import nn
from torchvision.ops import FeaturePyramidNetwork
from torchvision.ops.feature_pyramid_network import LastLevelMaxPool, LastLevelP6P7

from .convert import backbone_state_dict
from .io import read_state_dict
from .models.swin import SwinTransformer
from .models.variants import SwinFeatureBody
from .weights import load_checkpoint, warn_if_resume_with_ema

EXTRA_LEVELS = ("pool", "p6p7")


class SwinFPNBackbone(nn.Module):
    """Swin feature levels -> FPN.

    Args:
        body: a features-only Swin returning a list of NCHW maps.
        in_channels: channels of each returned level.
        fpn_channels: channels of every FPN output.
        strides: stride of each returned level in input pixels; by default the body's own
            (``body.feature_info.reduction()``, as timm's features-only models and :class:`SwinFeatureBody` give).
        extra_levels: "pool" (one max-pooled level) or "p6p7" (two strided convs on the last FPN level; for
            RetinaNet / FCOS on three body levels, P3-P5: see :func:`build_fpn_backbone`).
    """

    def __init__(
        self,
        body: nn.Module,
        in_channels: Sequence[int],
        fpn_channels: int = 256,
        strides: Sequence[int] | None = None,
        extra_levels: str = "pool",
    ) -> None:
        super().__init__()
        if extra_levels not in EXTRA_LEVELS:
            raise ValueError(f"extra_levels must be one of {', '.join(EXTRA_LEVELS)}, got {extra_levels!r}")
        extra = LastLevelMaxPool() if extra_levels == "pool" else LastLevelP6P7(fpn_channels, fpn_channels)
        self.body = body
        self.fpn = FeaturePyramidNetwork(list(in_channels), fpn_channels, extra_blocks=extra)
        self.out_channels = fpn_channels
        if strides is None:
            if not hasattr(body, "feature_info"):
                raise ValueError("strides must be given for a body without feature_info (its levels' real strides)")
            strides = body.feature_info.reduction()
        strides = list(strides)
        if len(strides) != len(in_channels):
            raise ValueError(f"{len(in_channels)} in_channels but {len(strides)} strides: one of each per level")
        self.strides = strides + [strides[-1] * 2 ** (k + 1) for k in range(1 if extra_levels == "pool" else 2)]

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """images [B, 3, H, W] -> {"0": [B, F, H/s0, W/s0], ..., "pool" or "p6", "p7": [B, F, ., .]}, in order.

        Scriptable (``torch.jit.script``), as torchvision's ``BackboneWithFPN``."""
        maps = self.body(x)
        if not torch.jit.isinstance(maps, list[torch.Tensor]):  # (refines the body's Union for TorchScript too)
            raise TypeError("the body must return a list of NCHW maps, finest first")
        levels: dict[str, torch.Tensor] = OrderedDict()
        for i, level in enumerate(maps):
            levels[str(i)] = level
        return self.fpn(levels)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute the Swin stages' activations in the backward pass (less memory, more compute)."""
        self.body.set_grad_checkpointing(enable)


def build_fpn_backbone(
    model_name: str,
    out_indices: Sequence[int] = (0, 1, 2, 3),
    fpn_channels: int = 256,
    frozen_stages: int = -1,
    checkpoint: str | os.PathLike | Mapping[str, object] | None = None,
    extra_levels: str = "pool",
    **model_kwargs: Any,
) -> SwinFPNBackbone:
    """Build a swinlite + FPN detection backbone.

    Args:
        model_name: a registered swinlite model, e.g. ``"swinlite_tiny_patch4_window7_224"`` (a pretrained tag
            such as ``".ms_in1k"`` may follow the name).
        out_indices: Swin levels fed to the FPN (strides patch * 2**i).
        fpn_channels: FPN width, the backbone's ``out_channels``.
        frozen_stages: -1 trains all; k freezes the patch embedding and the first k stages.
        checkpoint: weights in any layout :func:`swinlite.convert_state_dict` reads (path or state dict),
            loaded strictly into every weight the backbone uses (not the classifier, nor the final norm and the
            stages after the last of ``out_indices`` it is pruned of: a detection or segmentation run's trained with
            ``out_norm=False`` has no final norm; an ImageNet file's later stages are left out, as timm's
            ``features_only`` leaves them).
        extra_levels: levels added above the last FPN level: "pool" (Faster/Mask R-CNN) or "p6p7" (RetinaNet,
            FCOS, with ``out_indices=(1, 2, 3)``: P3-P7, the five levels their default anchor generators expect;
            with four Swin levels there are six maps, and torchvision's default anchors fail an assertion).
        **model_kwargs: passed to ``timm.create_model`` (e.g. ``pretrained=True``, ``out_norm=True``,
            ``drop_path_rate``).

    Returns:
        The backbone; ``torchvision.models.detection.FasterRCNN(backbone, num_classes=...)`` takes it.

    Raises:
        ValueError: bad ``out_indices`` / ``frozen_stages`` / ``extra_levels`` (naming the allowed values), or
            a checkpoint that does not fit ``model_name``.
    """
    if not model_name.startswith("swinlite_"):
        raise ValueError(f"model_name must be a registered swinlite model (swinlite_*), got {model_name!r}")
    model = timm.create_model(model_name, frozen_stages=frozen_stages, **model_kwargs)
    if not isinstance(model, SwinTransformer):
        raise ValueError(f"expected {model_name} to build a SwinTransformer, got {type(model).__name__}")
    num_stages = len(model.layers)
    indices = list(out_indices)
    if (
        not indices
        or any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < num_stages for i in indices)
        or indices != sorted(set(indices))
    ):  # the body returns the levels finest first, each once: the FPN's in_channels and strides follow this order
        raise ValueError(
            f"out_indices must be levels in 0..{num_stages - 1}, strictly increasing (each level once, finest "
            f"first), got {tuple(out_indices)}"
        )
    body = SwinFeatureBody(model, out_indices=list(out_indices), output_fmt="NCHW")  # unused out_norms frozen
    if checkpoint is not None:  # into the Swin pruned of the final norm it does not use, which the file need not hold
        _load_swin(body.model, checkpoint)
    info = body.feature_info
    return SwinFPNBackbone(body, info.channels(), fpn_channels, info.reduction(), extra_levels)


def _load_swin(swin: SwinTransformer, checkpoint: str | os.PathLike | Mapping[str, object]) -> None:
    """``checkpoint`` (a path names itself in the errors) into the features-only ``swin``, strictly, without the
    checkpoint's classifier (:func:`~swinlite.convert.backbone_state_dict`, as the segmentation backbone's)."""
    path = checkpoint if isinstance(checkpoint, (str, os.PathLike)) else None
    state = read_state_dict(path, stacklevel=4) if path is not None else checkpoint
    try:
        load_checkpoint(swin, backbone_state_dict(state))
    except ValueError as e:
        raise (e if path is None else ValueError(f"{path}: {e}")) from None
    if path is not None:
        warn_if_resume_with_ema(path, stacklevel=4)
