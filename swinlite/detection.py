"""A swinlite backbone with an FPN, ready for torchvision's FasterRCNN, MaskRCNN and RetinaNet.

Follows torchvision's ``BackboneWithFPN`` conventions: ``forward`` returns an OrderedDict of NCHW
maps named "0", "1", ... (one per returned Swin level) plus "pool" (a max-pooled extra level), all
with ``out_channels`` channels.
"""

import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import timm
import torch
from timm.models._features import FeatureGetterNet
from torch import nn
from torchvision.ops import FeaturePyramidNetwork
from torchvision.ops.feature_pyramid_network import LastLevelMaxPool

from .convert import load_checkpoint
from .models.swin import SwinTransformer


class SwinFPNBackbone(nn.Module):
    """Swin feature levels -> FPN.

    Args:
        body: a features-only Swin returning a list of NCHW maps.
        in_channels: channels of each returned level.
        fpn_channels: channels of every FPN output.
    """

    def __init__(self, body: nn.Module, in_channels: Sequence[int], fpn_channels: int = 256) -> None:
        super().__init__()
        self.body = body
        self.fpn = FeaturePyramidNetwork(list(in_channels), fpn_channels, extra_blocks=LastLevelMaxPool())
        self.out_channels = fpn_channels

    def forward(self, x: torch.Tensor) -> OrderedDict[str, torch.Tensor]:
        """images [B, 3, H, W] -> {"0": [B, F, H/s0, W/s0], ..., "pool": [B, F, ., .]}."""
        levels = self.body(x)
        return self.fpn(OrderedDict((str(i), level) for i, level in enumerate(levels)))


def build_fpn_backbone(
    model_name: str,
    out_indices: Sequence[int] = (0, 1, 2, 3),
    fpn_channels: int = 256,
    frozen_stages: int = -1,
    checkpoint: str | os.PathLike | Mapping[str, object] | None = None,
    **model_kwargs: Any,
) -> SwinFPNBackbone:
    """Build a swinlite + FPN detection backbone.

    Args:
        model_name: a registered swinlite model, e.g. ``"swinlite_tiny_patch4_window7_224"``.
        out_indices: Swin levels fed to the FPN (strides patch * 2**i).
        fpn_channels: FPN width, the backbone's ``out_channels``.
        frozen_stages: -1 trains all; k freezes the patch embedding and the first k stages.
        checkpoint: weights in any layout :func:`swinlite.convert_state_dict` reads (path or state dict),
            loaded strictly into the full model before the classifier is dropped.
        **model_kwargs: passed to ``timm.create_model`` (e.g. ``out_norm=True``, ``drop_path_rate``).

    Returns:
        The backbone; ``torchvision.models.detection.FasterRCNN(backbone, num_classes=...)`` takes it.

    Raises:
        ValueError: bad ``out_indices`` / ``frozen_stages`` (naming the allowed values), or a checkpoint
            that does not fit ``model_name``.
    """
    if not model_name.startswith("swinlite_"):
        raise ValueError(f"model_name must be a registered swinlite model (swinlite_*), got {model_name!r}")
    model = timm.create_model(model_name, frozen_stages=frozen_stages, **model_kwargs)
    if not isinstance(model, SwinTransformer):
        raise ValueError(f"expected {model_name} to build a SwinTransformer, got {type(model).__name__}")
    num_stages = len(model.layers)
    if len(out_indices) == 0 or any(not isinstance(i, int) or not 0 <= i < num_stages for i in out_indices):
        raise ValueError(f"out_indices must be levels in 0..{num_stages - 1}, got {tuple(out_indices)}")
    if checkpoint is not None:
        load_checkpoint(model, checkpoint)
    body = FeatureGetterNet(model, out_indices=list(out_indices), output_fmt="NCHW")
    return SwinFPNBackbone(body, body.feature_info.channels(), fpn_channels)
