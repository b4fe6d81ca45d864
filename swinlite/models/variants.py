"""Registered swinlite variants: ``timm.create_model("swinlite_tiny_patch4_window7_224")`` after ``import swinlite``.

Swin (V1) and Swin-V2 (``swinlite_v2_*``, ``block="v2"``), one function per architecture; the pretrained tags of
those with a timm counterpart are timm's (:mod:`swinlite.models.pretrained`).

Every variant takes ``fast`` (default True): the model of :mod:`swinlite.models.swin` is built as written, then,
with ``fast=True``, handed to :func:`swinlite.fast.accelerate`, which swaps its block, attention and MLP modules
for their fast subclasses (same ``state_dict``). This builder is the one place the choice is applied.
"""

from __future__ import annotations

import functools
from typing import Any
from urllib.error import URLError

from huggingface_hub.errors import LocalEntryNotFoundError
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models._features import (
    FeatureDictNet,
    FeatureGetterNet,
    FeatureHookNet,
    FeatureListNet,
    feature_take_indices,
)
from timm.models._features_fx import FeatureGraphNet
from torch import nn

from ..convert import convert_pretrained
from ..fast import accelerate
from ..io import read_metadata
from ..metadata import info_in, recorded_preprocessing
from .checks import check_feature_indices
from .pretrained import check_weights_source, hub_kwargs, timm_tags, unavailable_error
from .swin import SwinTransformer


class SwinFeatureBody(FeatureGetterNet):
    """timm's feature getter around a Swin (``features_only=True``), with gradient checkpointing forwarded to the
    Swin (timm's FeatureListNet has ``set_grad_checkpointing``; its getter does not). The output norms
    (``out_norm=True``) of the levels it does not return are frozen, the state dict the same: a parameter that gets
    no gradient fails DistributedDataParallel's second step (timm's Swin has none)."""

    def __init__(self, model: nn.Module, *args: Any, **kwargs: Any) -> None:
        super().__init__(model, *args, **kwargs)
        returned, _ = feature_take_indices(len(self.model.layers), self.out_indices)
        for level, norm in enumerate(self.model.out_norms):
            if level not in returned:
                norm.requires_grad_(False)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.model.set_grad_checkpointing(enable)


class SwinFeatureHooks(FeatureHookNet):
    """timm's hook feature net around a Swin (``feature_cls="hook"``), with gradient checkpointing forwarded to the
    Swin: timm's holds the whole model as one module, ``body``, its first and last, which it never checkpoints (its
    ``set_grad_checkpointing`` was accepted and did nothing)."""

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.body.set_grad_checkpointing(enable)


# timm's feature_cls values that run the Swin as it is (timm's FeatureListNet / FeatureDictNet call its children one
# by one, skipping the input check, the padding to whole patches and the per-level out_norms of forward_intermediates)
FEATURE_CLASSES = ("getter", "hook", "fx")


def _feature_cls(feature_cls: Any) -> Any:
    """timm's ``feature_cls`` for a Swin: ``"getter"`` (the default) is :class:`SwinFeatureBody`, ``"hook"`` (timm
    takes any name holding it) :class:`SwinFeatureHooks`, ``"fx"`` timm's FeatureGraphNet; other classes go to timm;
    ``"list"`` / ``"dict"`` are a ValueError naming the supported values."""
    name = feature_cls.lower() if isinstance(feature_cls, str) else None
    if name == "getter" or feature_cls is FeatureGetterNet:
        return SwinFeatureBody
    if (name is not None and "hook" in name) or feature_cls is FeatureHookNet:
        return SwinFeatureHooks
    if name == "fx":
        return FeatureGraphNet
    if name in ("list", "dict") or feature_cls in (FeatureListNet, FeatureDictNet):
        raise ValueError(
            f"feature_cls={feature_cls!r} is not supported by swinlite models: timm's FeatureListNet / FeatureDictNet "
            "run the model's modules one by one, without its input check, its padding to whole patches and its "
            f"out_norms; use one of {', '.join(repr(n) for n in FEATURE_CLASSES)} (the default, 'getter', gives a list "
            "of maps, NCHW, output_fmt='NHWC' for timm's Swin's layout)"
        )
    return feature_cls


def _create(variant: str, pretrained: bool = False, fast: bool = True, **kwargs: Any) -> SwinTransformer:
    """Build a variant, accelerated unless ``fast=False``; with ``features_only=True`` timm wraps it in a
    :class:`SwinFeatureBody` (accelerated as well).

    ``pretrained_strict`` (timm's, default True): True keeps swinlite's checks (only per-level output norms and a
    classifier asked for with ``num_classes`` may start fresh: without it, a file whose classifier is of another size
    or absent is refused); False lets any weights the file lacks start fresh, and drops file keys the model lacks,
    each named in a warning (:func:`~swinlite.convert.convert_pretrained`).

    Feature options: ``out_indices`` (levels in 0..num_stages-1, or negative from the last), ``output_fmt``
    ("NCHW" default or "NHWC"; "NHWC" alone with ``feature_cls`` "hook" or "fx"), plus the model's own ``out_norm``
    and ``frozen_stages``.

    Raises:
        WeightsUnavailableError: ``pretrained=True`` and the weights are neither cached nor downloadable.
    """
    num_stages = len(kwargs.get("depths", (2, 2, 6, 2)))
    out_indices = kwargs.pop("out_indices", tuple(range(num_stages)))
    levels = check_feature_indices(out_indices, num_stages, ordered=True)  # an int n: the last n levels
    feature_cfg = dict(out_indices=out_indices, feature_cls=SwinFeatureBody)
    if kwargs.get("features_only", False) and "feature_cls" in kwargs:
        feature_cfg["feature_cls"] = _feature_cls(kwargs.pop("feature_cls"))
    if "output_fmt" in kwargs:
        output_fmt = kwargs.pop("output_fmt")
        if not kwargs.get("features_only", False) or output_fmt not in ("NCHW", "NHWC"):
            raise ValueError(f"output_fmt ('NCHW' or 'NHWC') is an option of features_only=True, got {output_fmt!r}")
        feature_cls = feature_cfg["feature_cls"]
        # timm's hook and fx nets return the stage outputs as they run (NHWC): they record output_fmt, permute nothing
        if feature_cls in (SwinFeatureHooks, FeatureGraphNet) and output_fmt != "NHWC":
            shown = "hook" if feature_cls is SwinFeatureHooks else "fx"
            raise ValueError(
                f"output_fmt={output_fmt!r} with feature_cls={shown!r}: timm's {shown} feature net returns the stage "
                "outputs as they run, NHWC (output_fmt='NHWC' or none); feature_cls='getter' (the default) gives NCHW"
            )
        feature_cfg["output_fmt"] = output_fmt
    strict = kwargs.pop("pretrained_strict", True)
    # what the feature wrapper prunes (the final norm, the classifier, the stages after the last level) need not be in
    # a pretrained file: timm loads it into the whole model before wrapping
    last = max(i % num_stages for i in levels) if isinstance(levels, list) else num_stages - 1
    later = (f"layers.{i}." for i in range(last + 1, num_stages))
    pruned = ("norm.", "head.fc.", *later) if kwargs.get("features_only", False) else ()
    if pretrained:
        kwargs.update(hub_kwargs(variant, kwargs))  # one quick reachability check, or the cached file
        check_weights_source(variant, kwargs)  # a file cut short or mistyped, named before timm reads it
    try:
        model = build_model_with_cfg(
            SwinTransformer,
            variant,
            pretrained,
            pretrained_filter_fn=functools.partial(
                convert_pretrained, strict=bool(strict), pruned=pruned, new_classifier="num_classes" in kwargs
            ),
            pretrained_strict=False,  # convert_pretrained checks: with strict, only head.fc / out_norms start fresh
            feature_cfg=feature_cfg,
            **kwargs,
        )
    except (LocalEntryNotFoundError, URLError) as e:  # not cached, and offline or no network
        raise unavailable_error(variant, kwargs, e) from e
    model = accelerate(model) if fast else model
    overlay = kwargs.get("pretrained_cfg_overlay")
    if pretrained and isinstance(overlay, dict) and overlay.get("file") is not None:
        _warn_unkept(model, overlay["file"])
        _take_preprocessing(model, overlay)
    return model


def _swin_in(model: nn.Module) -> nn.Module:
    """The Swin of ``model``: itself, or the one timm's features_only wrapper holds."""
    return next((m for m in model.modules() if isinstance(m, SwinTransformer)), model)


def _warn_unkept(model: nn.Module, source: str) -> None:
    """The settings that the swinlite file ``source`` (``pretrained_cfg_overlay``'s) records for its Swin and ``model``
    was built without, where they change what it computes (a V2's windows, which its weights do not hold): warned of,
    as :func:`swinlite.load_checkpoint` warns (:func:`~swinlite.weights.warn_ignored_settings`)."""
    from ..weights import warn_ignored_settings  # here: swinlite.weights imports this package

    warn_ignored_settings(_swin_in(model), source)


def _take_preprocessing(model: nn.Module, overlay: dict[str, Any]) -> None:
    """The data config that the swinlite file ``overlay["file"]`` records (a classification run's preprocessing, the
    mean and std of another task's run or of a backbone converted from one:
    :func:`~swinlite.metadata.recorded_preprocessing`), and a classifier's class names (``label_names``, with
    ``num_classes``) where ``model``'s classifier has as many outputs, in the ``pretrained_cfg`` of ``model`` (and of
    the Swin a features_only wrapper holds, less the class names: neither has a classifier), as
    :func:`swinlite.load_model` gives them, but for the keys ``overlay`` sets itself:
    ``timm.data.resolve_model_data_config(model)`` gives the transform the weights were trained and evaluated with,
    not the variant's."""
    from ..weights import set_preprocessing  # here: swinlite.weights imports this package

    source = overlay["file"]
    metadata = read_metadata(source)
    recorded = recorded_preprocessing(metadata, source)
    kept = {key: value for key, value in recorded.items() if key not in overlay}
    info = info_in(metadata, source) if metadata.get("task") in (None, "classification") else None
    classes = info.classes if info is not None else []
    for net in {model, _swin_in(model)}:  # the model itself once where it is the Swin
        # a classifier of the file's classes gets their names; a features_only wrapper and its Swin have no classifier
        # (timm's pretrained_cfg_for_features drops num_classes)
        named = bool(classes) and getattr(net, "num_classes", None) == len(classes)
        labels = {"label_names": classes, "num_classes": len(classes)} if named else {}
        set_preprocessing(net, kept, **{key: value for key, value in labels.items() if key not in overlay})


def _cfg(input_size: int = 224, pool: int = 7, **kwargs: Any) -> dict[str, Any]:
    return {
        "url": "",
        "num_classes": 1000,
        "input_size": (3, input_size, input_size),
        "pool_size": (pool, pool),
        "crop_pct": 0.9 if input_size == 224 else 1.0,
        "interpolation": "bicubic",
        "fixed_input_size": False,
        "mean": IMAGENET_DEFAULT_MEAN,
        "std": IMAGENET_DEFAULT_STD,
        "first_conv": "patch_embed.proj",
        "classifier": "head.fc",
        "license": "mit",
        **kwargs,
    }


# Variants with a timm counterpart get its pretrained tags (timm's default tag first).
_TIMM_COUNTERPARTS = (
    "swin_tiny_patch4_window7_224",
    "swin_small_patch4_window7_224",
    "swin_base_patch4_window7_224",
    "swin_large_patch4_window7_224",
    "swin_base_patch4_window12_384",
    "swin_large_patch4_window12_384",
    # Swin-V2 (Microsoft's weights): swinv2_X -> swinlite_v2_X
    "swinv2_tiny_window8_256",
    "swinv2_tiny_window16_256",
    "swinv2_small_window8_256",
    "swinv2_small_window16_256",
    "swinv2_base_window8_256",
    "swinv2_base_window16_256",
    "swinv2_base_window12_192",
    "swinv2_base_window12to16_192to256",
    "swinv2_base_window12to24_192to384",
    "swinv2_large_window12_192",
    "swinv2_large_window12to16_192to256",
    "swinv2_large_window12to24_192to384",
)

default_cfgs = generate_default_cfgs(
    {
        **{name: cfg for arch in _TIMM_COUNTERPARTS for name, cfg in timm_tags(arch).items()},
        # Swin-T with the Swin-V2 continuous position bias (no pretrained weights)
        "swinlite_tiny_cpb_patch4_window7_224": _cfg(),
        # small models for CPU work on small images (demo, tests)
        "swinlite_nano_patch2_window4_64": _cfg(64, 4, num_classes=10, crop_pct=1.0),
        "swinlite_pico_patch2_window4_32": _cfg(32, 2, num_classes=10, crop_pct=1.0),
        "swinlite_v2_nano_patch2_window4_64": _cfg(64, 4, num_classes=10, crop_pct=1.0),
        "swinlite_v2_pico_patch2_window4_32": _cfg(32, 2, num_classes=10, crop_pct=1.0),
    }
)


@register_model
def swinlite_tiny_patch4_window7_224(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-T: 96 channels, depths 2-2-6-2, 28.3M parameters."""
    args = dict(embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24), window_size=7, drop_path_rate=0.2)
    return _create("swinlite_tiny_patch4_window7_224", pretrained, **dict(args, **kwargs))


@register_model
def swinlite_small_patch4_window7_224(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-S: 96 channels, depths 2-2-18-2."""
    args = dict(embed_dim=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24), window_size=7, drop_path_rate=0.3)
    return _create("swinlite_small_patch4_window7_224", pretrained, **dict(args, **kwargs))


@register_model
def swinlite_base_patch4_window7_224(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-B: 128 channels, depths 2-2-18-2."""
    args = dict(embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32), window_size=7, drop_path_rate=0.5)
    return _create("swinlite_base_patch4_window7_224", pretrained, **dict(args, **kwargs))


@register_model
def swinlite_large_patch4_window7_224(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-L: 192 channels, depths 2-2-18-2."""
    args = dict(embed_dim=192, depths=(2, 2, 18, 2), num_heads=(6, 12, 24, 48), window_size=7)
    return _create("swinlite_large_patch4_window7_224", pretrained, **dict(args, **kwargs))


@register_model
def swinlite_base_patch4_window12_384(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-B at 384x384 with 12x12 windows."""
    args = dict(img_size=384, embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32), window_size=12)
    return _create("swinlite_base_patch4_window12_384", pretrained, **dict(args, **kwargs))


@register_model
def swinlite_large_patch4_window12_384(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-L at 384x384 with 12x12 windows."""
    args = dict(img_size=384, embed_dim=192, depths=(2, 2, 18, 2), num_heads=(6, 12, 24, 48), window_size=12)
    return _create("swinlite_large_patch4_window12_384", pretrained, **dict(args, **kwargs))


@register_model
def swinlite_tiny_cpb_patch4_window7_224(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-T with the Swin-V2 continuous position bias (an MLP of log-spaced offsets) instead of bias tables."""
    args = dict(
        embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24), window_size=7, drop_path_rate=0.2, rel_pos="cpb"
    )
    return _create("swinlite_tiny_cpb_patch4_window7_224", pretrained, **dict(args, **kwargs))


@register_model
def swinlite_nano_patch2_window4_64(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """A small Swin for 64x64 images on CPU: 48 channels, depths 2-2-2-2, patch 2, window 4."""
    args = dict(
        img_size=64,
        patch_size=2,
        embed_dim=48,
        depths=(2, 2, 2, 2),
        num_heads=(2, 4, 8, 16),
        window_size=4,
        drop_path_rate=0.1,
    )
    return _create("swinlite_nano_patch2_window4_64", pretrained, **dict(args, **kwargs))


@register_model
def swinlite_pico_patch2_window4_32(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """A tiny Swin for 32x32 images on CPU: 32 channels, depths 1-1-2-1, patch 2, window 4."""
    args = dict(
        img_size=32,
        patch_size=2,
        embed_dim=32,
        depths=(1, 1, 2, 1),
        num_heads=(1, 2, 4, 8),
        window_size=4,
        drop_path_rate=0.0,
    )
    return _create("swinlite_pico_patch2_window4_32", pretrained, **dict(args, **kwargs))


# --- Swin-V2 ---------------------------------------------------------------------------------------------------
# Widths and depths of the V1 sizes; windows no larger than each stage's map at img_size (swin.stage_windows);
# the 12toN tags were pre-trained at 192 with 12x12 windows (6x6 in the last stage): their position bias
# coordinates are normalised by those windows (pretrained_window_sizes).

_V2_T = dict(block="v2", embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24), drop_path_rate=0.2)
_V2_S = dict(block="v2", embed_dim=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24), drop_path_rate=0.3)
_V2_B = dict(block="v2", embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32))
_V2_L = dict(block="v2", embed_dim=192, depths=(2, 2, 18, 2), num_heads=(6, 12, 24, 48))
_FROM_192 = dict(pretrained_window_sizes=(12, 12, 12, 6))


def _create_v2(variant: str, pretrained: bool, kwargs: dict[str, Any], **args: Any) -> SwinTransformer:
    return _create(variant, pretrained, **dict(args, **kwargs))


@register_model
def swinlite_v2_tiny_window8_256(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-T at 256x256, 8x8 windows."""
    return _create_v2("swinlite_v2_tiny_window8_256", pretrained, kwargs, img_size=256, window_size=8, **_V2_T)


@register_model
def swinlite_v2_tiny_window16_256(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-T at 256x256, 16x16 windows."""
    return _create_v2("swinlite_v2_tiny_window16_256", pretrained, kwargs, img_size=256, window_size=16, **_V2_T)


@register_model
def swinlite_v2_small_window8_256(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-S at 256x256, 8x8 windows."""
    return _create_v2("swinlite_v2_small_window8_256", pretrained, kwargs, img_size=256, window_size=8, **_V2_S)


@register_model
def swinlite_v2_small_window16_256(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-S at 256x256, 16x16 windows."""
    return _create_v2("swinlite_v2_small_window16_256", pretrained, kwargs, img_size=256, window_size=16, **_V2_S)


@register_model
def swinlite_v2_base_window8_256(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-B at 256x256, 8x8 windows."""
    return _create_v2("swinlite_v2_base_window8_256", pretrained, kwargs, img_size=256, window_size=8, **_V2_B)


@register_model
def swinlite_v2_base_window16_256(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-B at 256x256, 16x16 windows."""
    return _create_v2("swinlite_v2_base_window16_256", pretrained, kwargs, img_size=256, window_size=16, **_V2_B)


@register_model
def swinlite_v2_base_window12_192(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-B at 192x192, 12x12 windows (ImageNet-22k pre-training)."""
    return _create_v2("swinlite_v2_base_window12_192", pretrained, kwargs, img_size=192, window_size=12, **_V2_B)


@register_model
def swinlite_v2_base_window12to16_192to256(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-B at 256x256, 16x16 windows, fine-tuned from 192x192 with 12x12 windows."""
    args = dict(img_size=256, window_size=16, **_FROM_192, **_V2_B)
    return _create_v2("swinlite_v2_base_window12to16_192to256", pretrained, kwargs, **args)


@register_model
def swinlite_v2_base_window12to24_192to384(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-B at 384x384, 24x24 windows, fine-tuned from 192x192 with 12x12 windows."""
    args = dict(img_size=384, window_size=24, **_FROM_192, **_V2_B)
    return _create_v2("swinlite_v2_base_window12to24_192to384", pretrained, kwargs, **args)


@register_model
def swinlite_v2_large_window12_192(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-L at 192x192, 12x12 windows (ImageNet-22k pre-training)."""
    return _create_v2("swinlite_v2_large_window12_192", pretrained, kwargs, img_size=192, window_size=12, **_V2_L)


@register_model
def swinlite_v2_large_window12to16_192to256(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-L at 256x256, 16x16 windows, fine-tuned from 192x192 with 12x12 windows."""
    args = dict(img_size=256, window_size=16, **_FROM_192, **_V2_L)
    return _create_v2("swinlite_v2_large_window12to16_192to256", pretrained, kwargs, **args)


@register_model
def swinlite_v2_large_window12to24_192to384(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2-L at 384x384, 24x24 windows, fine-tuned from 192x192 with 12x12 windows."""
    args = dict(img_size=384, window_size=24, **_FROM_192, **_V2_L)
    return _create_v2("swinlite_v2_large_window12to24_192to384", pretrained, kwargs, **args)


@register_model
def swinlite_v2_nano_patch2_window4_64(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2 of swinlite_nano_patch2_window4_64's size, for CPU work on 64x64 images."""
    args = dict(img_size=64, patch_size=2, embed_dim=48, depths=(2, 2, 2, 2), num_heads=(2, 4, 8, 16))
    args.update(block="v2", window_size=4, drop_path_rate=0.1)
    return _create_v2("swinlite_v2_nano_patch2_window4_64", pretrained, kwargs, **args)


@register_model
def swinlite_v2_pico_patch2_window4_32(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-V2 of swinlite_pico_patch2_window4_32's size, for the tests (the last stage's window is 2x2)."""
    args = dict(img_size=32, patch_size=2, embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8))
    args.update(block="v2", window_size=4, drop_path_rate=0.0)
    return _create_v2("swinlite_v2_pico_patch2_window4_32", pretrained, kwargs, **args)
