"""UperNet (Xiao et al., ECCV 2018) on a swinlite backbone, as mmsegmentation's ``UPerHead`` + ``FCNHead`` build it.

::

    images [B, 3, H, W] ── Swin (features_only, out_norm) ──> levels 0..3 [B, C_i, H/s_i, W/s_i]
    level 3 ── pyramid pooling (1, 2, 3, 6 cells) ── concat ── 3x3 ──┐ top
    levels 0..2 ── 1x1 lateral ── + upsampled level above ── 3x3 ────┤ (FPN, top-down)
    all four, upsampled to level 0 ── concat ── 3x3 fusion ── dropout ── 1x1 classifier ── upsample, crop ─ [B, K, H, W]
    level 2 ── 3x3 ── dropout ── 1x1 classifier ── upsample, crop (auxiliary head, training only)

Every convolution but the classifiers is conv (no bias) + BatchNorm + ReLU (torchvision's ``Conv2dNormActivation``);
upsampling is bilinear with ``align_corners=False``. The logits are upsampled to the input padded as the backbone pads
it, then cropped (:func:`upsample_to_input`): mmsegmentation and Hugging Face resize straight to the input, the same
logits at sizes that are patch multiples. Module names follow mmsegmentation's and Hugging Face's
(``decode_head.psp_modules``, ``lateral_convs``, ``fpn_convs``, ``fpn_bottleneck``, ``auxiliary_head.convs``), so
their checkpoints map onto this model by renaming (``swinlite.segmentation.convert``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import timm
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops.misc import Conv2dNormActivation

from ..convert import backbone_state_dict, misfit_note, other_classes
from ..engine.model import check_reserved, load_leniently, pretrained_file, warn_unkept_in_build
from ..io import read_metadata, read_state_dict
from ..models.variants import SwinFeatureBody
from ..weights import WeightsMismatchError, check_model_name, load_checkpoint, load_strict
from .config import SegModelConfig
from .convert import CLASSIFIERS, convert_upernet

AUX_LEVEL = 2  # the auxiliary head's level: stage 3 of 4, mmsegmentation's in_index=2
# the Swin's keywords build_upernet sets, for EVERY_LEVEL: refused in its model_kwargs and a run's model.kwargs
LEVEL_KWARGS = ("features_only", "out_indices", "output_fmt")
EVERY_LEVEL = "UperNet takes every Swin level, as NCHW maps"
# a name ending so (in any case) is a file, not a model: weights (model.pth.tar: .tar), or an exported ONNX model
WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt", ".tar")
ONNX_SUFFIX = ".onnx"


def conv_bn_relu(in_channels: int, out_channels: int, kernel_size: int) -> Conv2dNormActivation:
    return Conv2dNormActivation(in_channels, out_channels, kernel_size, norm_layer=nn.BatchNorm2d)


def upsample(x: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    return F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=False)


def upsample_to_input(logits: torch.Tensor, stride: Sequence[int], size: Sequence[int]) -> torch.Tensor:
    """A level's logits [B, K, h, w], its cells ``stride`` (height, width) pixels apart -> [B, K, *size] at the
    input's pixels.

    Cell (i, j) covers input pixels [i * sh, (i + 1) * sh) x [j * sw, (j + 1) * sw): the backbone pads the input on
    the bottom and right to whole patches (or, with ``mask_padding=False``, drops the remainder past the last whole
    patch). Upsampled to the h * sh x w * sw pixels the cells cover and cropped to ``size``, each prediction stays
    over its own pixels. Resized straight to ``size`` (mmsegmentation's and Hugging Face's way), the
    padding is squeezed into the image and an odd size's predictions shift toward the top-left by up to half a patch;
    at patch multiples the two agree (to rounding)."""
    h, w = logits.shape[2:]
    # one more cell, a copy of the last: the pixels a cropping backbone dropped (fewer than a patch) take the last
    # cell's values, as interpolation gives past the last centre; a padding backbone's crop drops it again
    logits = F.pad(logits, (0, 1, 0, 1), mode="replicate")  # [B, K, h + 1, w + 1]
    return upsample(logits, ((h + 1) * stride[0], (w + 1) * stride[1]))[..., : size[0], : size[1]]  # [B, K, H, W]


class UperNetHead(nn.Module):
    """Pyramid pooling on the last level, a top-down FPN over all levels, their fusion, per-pixel class logits.

    Args:
        in_channels: channels of each level, finest first.
        num_classes: outputs per pixel.
        channels: width of every convolution.
        pool_scales: grid sides of the pyramid pooling.
        dropout: Dropout2d probability before the classifier.
    """

    def __init__(
        self,
        in_channels: Sequence[int],
        num_classes: int,
        channels: int = 512,
        pool_scales: Sequence[int] = (1, 2, 3, 6),
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        top = in_channels[-1]
        self.psp_modules = nn.ModuleList(
            nn.Sequential(nn.AdaptiveAvgPool2d(scale), conv_bn_relu(top, channels, 1)) for scale in pool_scales
        )
        self.bottleneck = conv_bn_relu(top + len(pool_scales) * channels, channels, 3)
        self.lateral_convs = nn.ModuleList(conv_bn_relu(c, channels, 1) for c in in_channels[:-1])
        self.fpn_convs = nn.ModuleList(conv_bn_relu(channels, channels, 3) for _ in in_channels[:-1])
        self.fpn_bottleneck = conv_bn_relu(len(in_channels) * channels, channels, 3)
        self.dropout = nn.Dropout2d(dropout)
        self.classifier = nn.Conv2d(channels, num_classes, 1)

    def pyramid_pooling(self, x: torch.Tensor) -> torch.Tensor:
        """Last level [B, C, h, w] -> [B, channels, h, w]: itself and its pooled grids, upsampled, fused."""
        pooled = [upsample(pool(x), x.shape[2:]) for pool in self.psp_modules]
        return self.bottleneck(torch.cat([x, *pooled], dim=1))

    def forward(self, levels: Sequence[torch.Tensor]) -> torch.Tensor:
        """levels [B, C_i, H_i, W_i] -> logits [B, num_classes, H_0, W_0]."""
        laterals = [conv(level) for conv, level in zip(self.lateral_convs, levels, strict=False)]
        laterals.append(self.pyramid_pooling(levels[-1]))
        for i in range(len(laterals) - 1, 0, -1):  # top-down: each level gets the coarser one added
            laterals[i - 1] = laterals[i - 1] + upsample(laterals[i], laterals[i - 1].shape[2:])
        outs = [conv(lateral) for conv, lateral in zip(self.fpn_convs, laterals, strict=False)] + [laterals[-1]]
        fused = torch.cat([outs[0], *(upsample(out, outs[0].shape[2:]) for out in outs[1:])], dim=1)
        return self.classifier(self.dropout(self.fpn_bottleneck(fused)))


class FCNHead(nn.Module):
    """The auxiliary head: ``num_convs`` 3x3 convolutions on one level, per-pixel class logits."""

    def __init__(
        self, in_channels: int, num_classes: int, channels: int = 256, num_convs: int = 1, dropout: float = 0.1
    ) -> None:
        super().__init__()
        widths = [in_channels] + [channels] * num_convs
        self.convs = nn.Sequential(*(conv_bn_relu(a, b, 3) for a, b in zip(widths, widths[1:], strict=False)))
        self.dropout = nn.Dropout2d(dropout)
        self.classifier = nn.Conv2d(widths[-1], num_classes, 1)

    def forward(self, level: torch.Tensor) -> torch.Tensor:
        """level [B, C, h, w] -> logits [B, num_classes, h, w]."""
        return self.classifier(self.dropout(self.convs(level)))


class SegOutput(NamedTuple):
    logits: torch.Tensor  # [B, K, H, W], at the input size
    aux_logits: torch.Tensor | None  # [B, K, H, W] in training mode with an auxiliary head, else None


class UperNet(nn.Module):
    """A features-only backbone, the UperNet head and an optional auxiliary head.

    Args:
        backbone: images -> list of NCHW levels, finest first, with timm's ``feature_info``.
        num_classes: classes per pixel.
        channels, pool_scales, dropout: of the UperNet head.
        aux_channels: width of the auxiliary head on level :data:`AUX_LEVEL`; 0: none.
    """

    def __init__(
        self,
        backbone: nn.Module,
        num_classes: int,
        channels: int = 512,
        pool_scales: Sequence[int] = (1, 2, 3, 6),
        aux_channels: int = 256,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        in_channels = backbone.feature_info.channels()
        self.backbone = backbone
        self.decode_head = UperNetHead(in_channels, num_classes, channels, pool_scales, dropout)
        self.auxiliary_head = (
            FCNHead(in_channels[AUX_LEVEL], num_classes, aux_channels, 1, dropout) if aux_channels else None
        )
        self.num_classes = num_classes

    def forward(self, images: torch.Tensor) -> SegOutput:
        """images [B, 3, H, W] (normalised) -> :class:`SegOutput` with fp32 logits at [H, W] (also under autocast)."""
        levels = self.backbone(images)
        # fp32 before the upsampling: under autocast the bf16 interpolation tied a pixel's top classes 65x as often
        logits = upsample_to_input(self.decode_head(levels).float(), self.level_stride(0), images.shape[2:])
        aux = None
        if self.training and self.auxiliary_head is not None:
            aux_logits = self.auxiliary_head(levels[AUX_LEVEL]).float()
            aux = upsample_to_input(aux_logits, self.level_stride(AUX_LEVEL), images.shape[2:])
        return SegOutput(logits, aux)

    def level_stride(self, level: int) -> tuple[int, int]:
        """(height, width) input pixels between the cells of ``level``: the Swin's patch, doubled by each merge (its
        ``feature_info`` reduction is one number, the patch's longer side, timm's; a patch may be h x w)."""
        ph, pw = self.backbone.model.patch_size
        return ph * 2**level, pw * 2**level

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute the backbone's stage activations in the backward pass."""
        self.backbone.set_grad_checkpointing(enable)


def build_upernet(
    name_or_cfg: str | SegModelConfig, num_classes: int, classes: Sequence[str] | None = None, **model_kwargs: Any
) -> UperNet:
    """The UperNet ``name_or_cfg`` describes, for ``num_classes`` classes: a model name takes the
    :class:`~.config.SegModelConfig` defaults (head widths, no pretrained weights), as a run's ``model.name`` alone.

    Example::

        from swinlite.segmentation import SegModelConfig, build_upernet

        model = build_upernet("swinlite_tiny_patch4_window7_224", num_classes=150)
        model = build_upernet(SegModelConfig(name="swinlite_tiny_patch4_window7_224", head_channels=256), 150)

    The backbone is ``timm.create_model(cfg.name, **cfg.kwargs)`` with ``out_norm=True`` unless
    ``model.kwargs.out_norm=false``, all four levels through its ``forward_intermediates``.
    ``model.pretrained``: ``true`` loads the tag's weights through timm; a file is either a backbone checkpoint
    (any layout swinlite reads, a detection run's weights too: their Swin; the heads start fresh) or an UperNet
    checkpoint (swinlite's, mmsegmentation's or Hugging Face's; everything loads, a classifier of another class count
    starts fresh with a warning).

    ``classes``: the run's class names, where known: a swinlite UperNet file recording other names of as many classes
    is warned (its classifiers are kept, row i class i of the run), as detection and classification warn.

    Raises:
        TypeError: ``name_or_cfg`` neither a model name nor a SegModelConfig; ``pretrained`` beside a config.
        ValueError: a name that is no swinlite model (a file's path, a pathlib.Path too: naming what to give instead);
            ``num_classes`` below 1, or ``classes`` of another length; a keyword build_upernet sets itself
            (:data:`LEVEL_KWARGS`; in the config's ``kwargs`` also ``num_classes`` and ``pretrained``); weights that do
            not fit (naming the file and the keys).
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"build_upernet: num_classes must be a whole number of at least 1, got {num_classes!r}")
    if classes is not None and len(classes) != num_classes:
        raise ValueError(
            f"build_upernet: {len(classes)} class names (classes) for num_classes={num_classes}: one name per class"
        )
    if isinstance(name_or_cfg, str | os.PathLike):
        _refuse_a_file(name_or_cfg, num_classes)
    model_kwargs = dict(model_kwargs)
    cfg = _model_config(name_or_cfg, model_kwargs)
    levels = dict.fromkeys(LEVEL_KWARGS, f"build_upernet ({EVERY_LEVEL})")
    pretrained = {"pretrained": "the config's pretrained (SegModelConfig.pretrained)"}
    check_reserved(cfg.kwargs, {"num_classes": "build_upernet's num_classes", **pretrained, **levels})
    check_reserved(model_kwargs, levels, "model_kwargs")  # (pretrained: taken with a name, refused with a config)
    kwargs = {"out_norm": True, **cfg.kwargs, **model_kwargs}
    path = pretrained_file(cfg)
    state = read_state_dict(path) if path is not None else None
    upernet_state = convert_upernet(state) if state is not None else None
    backbone_file = path is not None and upernet_state is None
    if backbone_file:  # no classifier: the features-only model has none
        swin = timm.create_model(cfg.name, num_classes=0, **kwargs)
    else:
        swin = timm.create_model(cfg.name, pretrained=cfg.pretrained is True, **kwargs)
    body = SwinFeatureBody(swin, out_indices=list(range(len(swin.feature_info))), output_fmt="NCHW")
    if backbone_file:  # into the features-only Swin, pruned of the final norm it does not use
        _load_backbone(body.model, cfg.name, path, state, strict=kwargs.get("pretrained_strict", True))
    aux = cfg.aux_channels if cfg.aux_weight > 0 else 0
    model = UperNet(body, num_classes, cfg.head_channels, cfg.pool_scales, aux, cfg.dropout)
    if upernet_state is not None:
        _load_upernet(model, upernet_state, path)
        renamed = other_classes(read_metadata(path).get("classes"), classes) if classes is not None else None
        if renamed:  # (a classifier of another count started fresh, warned)
            warnings.warn(
                f"model.pretrained {path}: its classifiers were trained on other classes {renamed}; they are kept, "
                "row i now class i of the data",
                stacklevel=2,
            )
    warn_unkept_in_build(cfg)  # the file's Swin settings cfg.kwargs leaves out (a V2's windows), but in a run
    if cfg.grad_checkpointing:
        model.set_grad_checkpointing(True)
    return model


def _model_config(name_or_cfg: str | SegModelConfig, model_kwargs: dict[str, Any]) -> SegModelConfig:
    """``name_or_cfg`` as a SegModelConfig: a swinlite model name with the defaults (``pretrained`` taken from
    ``model_kwargs``, as ``timm.create_model`` takes it), a config as it is."""
    if isinstance(name_or_cfg, SegModelConfig):
        if "pretrained" in model_kwargs:
            raise TypeError("build_upernet: give pretrained in the SegModelConfig (pretrained=True or a file)")
        return name_or_cfg
    if isinstance(name_or_cfg, str):
        check_model_name(name_or_cfg, "swinlite_*")  # a UperNet on a Swin: timm's other models have no out_norm
        return SegModelConfig(name=name_or_cfg, pretrained=model_kwargs.pop("pretrained", False))
    raise TypeError(
        "build_upernet expects a model name (e.g. 'swinlite_tiny_patch4_window7_224') or a SegModelConfig, "
        f"got {type(name_or_cfg).__name__}"
    )


def _dotted_not_tag(name: str) -> bool:
    """Whether ``name`` has a dot that is no timm ``'<model>.<pretrained tag>'`` (a tag holds no dot, e.g.
    ``'swin_tiny_patch4_window7_224.ms_in1k'``): ``model.tar.gz``, ``weights.npz``, files of any suffix. A model name
    before the dot is a mistyped tag (``'<model>.ms_in1k_typo'``), no file: the unknown-model error suggests the tag."""
    model, dot, tag = name.partition(".")
    known_tags = {pretrained.partition(".")[2] for pretrained in timm.list_pretrained()}
    return bool(dot) and not timm.is_model(model) and tag not in known_tags


def _refuse_a_file(name: str | os.PathLike, num_classes: int) -> None:
    """ValueError, naming what build_upernet takes instead, when ``name`` is a file's path: an os.PathLike, or a str
    with a path separator, a weights or ONNX suffix (:data:`WEIGHT_SUFFIXES`, in any case), a suffix that is no timm
    pretrained tag (:func:`_dotted_not_tag`) or naming an existing file. timm's unknown-model error said nothing of
    files; a pathlib.Path got a TypeError of no hint."""
    text = os.fsdecode(name)
    suffix = Path(text).suffix.lower()
    if suffix == ONNX_SUFFIX:
        raise ValueError(
            f"build_upernet: {text!r} is an ONNX file, an exported model, which build_upernet does not load (no model "
            "name, no weights file); build_upernet expects a swinlite model name (e.g. "
            "'swinlite_tiny_patch4_window7_224') or a SegModelConfig whose pretrained is the weights file the ONNX "
            "file was exported from (a train_segmentation.py run's best.safetensors)"
        )
    looks_like_a_file = (
        suffix in WEIGHT_SUFFIXES or "/" in text or os.sep in text or Path(text).is_file() or _dotted_not_tag(text)
    )
    if not isinstance(name, os.PathLike) and not looks_like_a_file:
        return
    raise ValueError(
        f"build_upernet: {text!r} is a file's path, not a model name; build_upernet expects a swinlite model name "
        "(e.g. 'swinlite_tiny_patch4_window7_224') or a SegModelConfig, whose pretrained takes a file: "
        f"build_upernet(SegModelConfig(name='<its swinlite model>', pretrained={text!r}), {num_classes}) "
        f"(a train_segmentation.py run's file, whole: swinlite.segmentation.predictor.load_segmenter({text!r}))"
    )


def _load_backbone(swin: nn.Module, name: str, path: str, state: dict[str, torch.Tensor], strict: bool = True) -> None:
    """The weights of ``model.pretrained``'s backbone checkpoint (``state``, read from ``path``; any layout swinlite
    reads, a detection run's weights too) into the features-only Swin ``name`` (``swin``), strictly: every weight it
    uses, so not the final norm it is pruned of (a run's Swin trained with ``model.kwargs.out_norm=false`` has none).
    No classifier on either side: the features-only model has none, and a note on the file's, or on its absence, would
    be of no use here. Its bias tables are fitted as every task's ``model.pretrained`` fits them, by timm's pretrained
    loader's rule (:func:`~swinlite.convert.backbone_state_dict`). ``strict=False``
    (``model.kwargs.pretrained_strict=false``): as a classifier's Swin loads then
    (:func:`~swinlite.engine.model.load_leniently`).

    Raises:
        ValueError: a layout swinlite does not read, or weights that do not fit, naming ``model.pretrained``, the file
            and the model the file records where it records another.
    """
    try:
        backbone = backbone_state_dict(state, swin)  # bias tables fitted as every task's model.pretrained
    except ValueError as e:
        raise ValueError(f"model.pretrained {path}: {e}") from None
    try:
        if strict:
            load_checkpoint(swin, backbone)
        else:
            load_leniently(swin, backbone)
    except ValueError as e:  # the keys named are the converted ones: what the file is
        raise ValueError(f"model.pretrained {path}: {e}{misfit_note(read_metadata(path), name, state)}") from None


def _load_upernet(model: UperNet, state: dict[str, torch.Tensor], source: str) -> None:
    """A whole UperNet checkpoint into ``model``, strictly but for what cannot fit, each warned: classifiers of
    another class count start fresh; an auxiliary head only the file has is left out, one only the model has
    starts fresh."""
    target, notes, fresh = model.state_dict(), [], []
    in_file = any(k.startswith("auxiliary_head.") for k in state)
    if in_file and model.auxiliary_head is None:
        state = {k: v for k, v in state.items() if not k.startswith("auxiliary_head.")}
        notes.append("its auxiliary head is left out (model.aux_weight=0)")
    elif model.auxiliary_head is not None and not in_file:
        fresh.append("auxiliary_head.")
        notes.append("the auxiliary head starts fresh (the file has none)")
    # another class count (a classifier of other input channels, another head width, is load_strict's error)
    other = [k for k in CLASSIFIERS if k in state and k in target and len(state[k]) != len(target[k])]
    if other:
        notes.append(f"the classifiers start fresh ({len(state[other[0]])} classes in the file, {model.num_classes} "
                     "here)")  # fmt: skip
        state = {k: v for k, v in state.items() if k not in other}
        fresh += other
    if notes:
        warnings.warn(f"{source}: {'; '.join(notes)}", stacklevel=3)
    try:
        load_strict(model, state, source, may_start_fresh=tuple(fresh))
    except WeightsMismatchError as e:  # e.g. a backbone of another model.kwargs.out_norm: its keys alone named
        raise WeightsMismatchError(
            f"{e}; an UperNet's weights load whole into an UperNet built alike (model.name, model.head_channels, "
            "model.pool_scales, model.aux_channels, model.kwargs (out_norm included) as the run that wrote them)"
        ) from None
