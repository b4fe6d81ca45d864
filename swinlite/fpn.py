"""A swinlite backbone with an FPN, ready for torchvision's FasterRCNN, MaskRCNN, RetinaNet and FCOS.

Follows torchvision's ``BackboneWithFPN`` conventions: ``forward`` returns an OrderedDict of NCHW
maps named "0", "1", ... (one per returned Swin level) plus the extra levels (``"pool"``, a max-pooled
level as the two-stage detectors use, or ``"p6"``, ``"p7"`` as RetinaNet and FCOS use), all with
``out_channels`` channels. ``strides`` lists each output's stride in input pixels, which the anchors follow.
"""

import os
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Final

import timm
import torch
from torch import nn
from torchvision.ops import FeaturePyramidNetwork
from torchvision.ops.feature_pyramid_network import LastLevelMaxPool, LastLevelP6P7

from .convert import backbone_state_dict, detect_layout, state_dict_mismatch, without_wrapper_prefix
from .io import read_state_dict, unwrap_checkpoint
from .models.checks import as_int
from .models.swin import SwinTransformer
from .models.variants import SwinFeatureBody
from .weights import load_checkpoint, load_strict, warn_if_resume_with_ema, warn_ignored_settings

EXTRA_LEVELS = ("pool", "p6p7")
# the layout of a file's Swin (convert.detect_layout) -> where the file keeps the FPN's weights: a torchvision detector
# on the backbone (a swinlite detection run's too), and the backbone's own state dict
FPN_PREFIXES = {"swinlite-detection": "backbone.fpn.", "swinlite-fpn-backbone": "fpn."}


def _fpn_channels(value: object) -> int:
    """``value`` as the FPN's width: a whole number (numpy's too; not a bool or a float) of at least 1, else a
    ValueError (torchvision's FPN failed in forward, or at the build with an unrelated message)."""
    channels = as_int(value)
    if channels is None or channels < 1:
        raise ValueError(f"fpn_channels must be a whole number of at least 1, got {value!r}")
    return channels


class SwinFPNBackbone(nn.Module):
    """Swin feature levels -> FPN.

    Args:
        body: a features-only Swin returning a list of NCHW maps (one that records another ``output_fmt`` is a
            ValueError here, a map of other channels than ``in_channels`` one in ``forward``).
        in_channels: channels of each returned level.
        fpn_channels: channels of every FPN output.
        strides: stride of each returned level in input pixels; by default the body's own
            (``body.feature_info.reduction()``, as timm's features-only models and :class:`SwinFeatureBody` give).
        extra_levels: "pool" (one max-pooled level) or "p6p7" (two strided convs on the last FPN level; for
            RetinaNet / FCOS on three body levels, P3-P5: see :func:`build_fpn_backbone`).
    """

    # the errors' advice; a class constant, which TorchScript reads (not a global str)
    NCHW_EXPECTED: Final[str] = "NCHW maps expected (timm features_only with output_fmt='NCHW', feature_cls='getter')"

    def __init__(
        self,
        body: nn.Module,
        in_channels: Sequence[int],
        fpn_channels: int = 256,
        strides: Sequence[int] | None = None,
        extra_levels: str = "pool",
    ) -> None:
        super().__init__()
        fpn_channels = _fpn_channels(fpn_channels)
        if extra_levels not in EXTRA_LEVELS:
            raise ValueError(f"extra_levels must be one of {', '.join(EXTRA_LEVELS)}, got {extra_levels!r}")
        output_fmt = getattr(body, "output_fmt", "NCHW")  # timm's feature wrappers record it (a str Enum, Format)
        if output_fmt != "NCHW":
            raise ValueError(
                f"the body records output_fmt={getattr(output_fmt, 'value', output_fmt)!r}: {self.NCHW_EXPECTED}"
            )
        extra = LastLevelMaxPool() if extra_levels == "pool" else LastLevelP6P7(fpn_channels, fpn_channels)
        self.body = body
        self.in_channels = list(in_channels)
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
        if len(maps) != len(self.in_channels):
            raise ValueError(f"the body returned {len(maps)} maps, expected {len(self.in_channels)} (one per level)")
        levels: dict[str, torch.Tensor] = OrderedDict()
        for i, level in enumerate(maps):
            if level.dim() != 4 or level.shape[1] != self.in_channels[i]:  # an NHWC map failed in the FPN's conv
                raise ValueError(
                    f"the body's map {i} has shape {list(level.shape)}, not [B, {self.in_channels[i]}, H, W]: "
                    + self.NCHW_EXPECTED
                )
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
            loaded strictly into every weight the Swin uses (not the classifier, nor the final norm and the
            stages after the last of ``out_indices`` it is pruned of: a detection or segmentation run's trained with
            ``out_norm=False`` has no final norm; an ImageNet file's later stages are left out, as timm's
            ``features_only`` leaves them). The FPN loads strictly too from the file's FPN weights
            (``backbone.fpn.*``: a torchvision detector's state dict on such a backbone, a swinlite detection run's
            file; ``fpn.*``: the backbone's own state dict, its Swin under ``body.model.*``) where they fit it
            exactly (the same ``out_indices``, ``fpn_channels`` and ``extra_levels``); FPN weights that do not fit
            are left out with a warning naming the keys, as a classifier of another size is, and a file without any
            (a Swin's) leaves the FPN at its initial values. The Swin's bias tables load as a ``model.pretrained``
            file's do in every task (detection's loads its Swin alike): by timm's pretrained loader's rule
            (:func:`~swinlite.convert.convert_pretrained`), so a file in timm's (or the release's) layout has the
            table of the model's whole window in a stage timm shrinks at ``img_size`` (window 7 at 112: the last
            stage's 4x4) resized to that stage's window, as ``pretrained_cfg_overlay`` resizes it, where
            :func:`swinlite.load_checkpoint` keeps it whole.
        extra_levels: levels added above the last FPN level: "pool" (Faster/Mask R-CNN) or "p6p7" (RetinaNet,
            FCOS, with ``out_indices=(1, 2, 3)``: P3-P7, the five levels their default anchor generators expect;
            with four Swin levels there are six maps, and torchvision's default anchors fail an assertion).
        **model_kwargs: passed to ``timm.create_model`` (e.g. ``pretrained=True``, ``out_norm=True``,
            ``drop_path_rate``); with ``pretrained`` the Swin is built without a classifier (``num_classes=0``
            unless given), which the backbone prunes: a backbone's file (``pretrained_cfg_overlay``) holds none.

    Returns:
        The backbone; ``torchvision.models.detection.FasterRCNN(backbone, num_classes=...)`` takes it.

    Raises:
        ValueError: bad ``out_indices`` / ``fpn_channels`` / ``frozen_stages`` / ``extra_levels`` (naming the
            allowed values), or a checkpoint that does not fit ``model_name``.
    """
    if not model_name.startswith("swinlite_"):
        raise ValueError(f"model_name must be a registered swinlite model (swinlite_*), got {model_name!r}")
    channels = _fpn_channels(fpn_channels)  # before the model is built
    with warnings.catch_warnings():
        if model_kwargs.get("pretrained"):  # its classifier is pruned: none to load (a backbone's file holds none)
            model_kwargs.setdefault("num_classes", 0)
            warnings.filterwarnings("ignore", "dropping the checkpoint's classifier head.fc")  # a tag's: unused here
        model = timm.create_model(model_name, frozen_stages=frozen_stages, **model_kwargs)
    if not isinstance(model, SwinTransformer):
        raise ValueError(f"expected {model_name} to build a SwinTransformer, got {type(model).__name__}")
    num_stages = len(model.layers)
    indices = [as_int(i) for i in out_indices]  # numpy's integers too (np.arange), as timm's features_only takes them
    if (
        not indices or any(i is None or not 0 <= i < num_stages for i in indices) or indices != sorted(set(indices))
    ):  # the body returns the levels finest first, each once: the FPN's in_channels and strides follow this order
        raise ValueError(
            f"out_indices must be levels in 0..{num_stages - 1}, strictly increasing (each level once, finest "
            f"first), got {tuple(out_indices)}"
        )
    body = SwinFeatureBody(model, out_indices=indices, output_fmt="NCHW")  # unused out_norms frozen
    info = body.feature_info
    backbone = SwinFPNBackbone(body, info.channels(), channels, info.reduction(), extra_levels)
    if checkpoint is not None:
        _load_weights(backbone, checkpoint)
    return backbone


def _load_weights(backbone: SwinFPNBackbone, checkpoint: str | os.PathLike | Mapping[str, object]) -> None:
    """``checkpoint`` (a path names itself in the errors) into ``backbone``: into its features-only Swin strictly,
    pruned of the final norm it does not use, which the file need not hold, without the checkpoint's classifier and
    with its bias tables fitted as a ``model.pretrained`` file's (:func:`~swinlite.convert.backbone_state_dict`, as
    the segmentation backbone's); into its FPN the file's FPN weights, strictly, where they fit it exactly, else none,
    with a warning (:func:`build_fpn_backbone`)."""
    path = checkpoint if isinstance(checkpoint, (str, os.PathLike)) else None
    # an EMA warning names the user's line calling build_fpn_backbone
    state = read_state_dict(path, stacklevel=4) if path is not None else unwrap_checkpoint(checkpoint, stacklevel=4)
    try:
        load_checkpoint(backbone.body.model, backbone_state_dict(state, backbone.body.model))
    except ValueError as e:
        raise (e if path is None else ValueError(f"{path}: {e}")) from None
    if path is not None:  # the Swin settings the file records and the model was built without (a V2's windows)
        warn_ignored_settings(backbone.body.model, path)
    prefix = FPN_PREFIXES.get(detect_layout(state))  # None: a file of no FPN (a Swin's, mmdetection's)
    unwrapped = without_wrapper_prefix(state) if prefix is not None else {}
    fpn = {k.removeprefix(prefix): v for k, v in unwrapped.items() if k.startswith(prefix)}
    source = "checkpoint" if path is None else str(path)
    mismatch = state_dict_mismatch(backbone.fpn.state_dict(), fpn) if fpn else None
    if mismatch is not None:  # another fpn_channels, other levels or extra levels: dropped whole, as a classifier
        warnings.warn(
            f"{source}: its FPN weights ({prefix}*) do not fit this backbone's FPN (out_indices, fpn_channels or "
            f"extra_levels differ from the one that saved them); the FPN starts fresh: {mismatch}",
            stacklevel=3,
        )
    elif fpn:
        load_strict(backbone.fpn, fpn, source)
    if path is not None:
        warn_if_resume_with_ema(path, stacklevel=4)
