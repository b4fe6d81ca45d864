"""Self-describing weights: what a weights file records about its model, and the strict rebuild from it.

Every weights file ``scripts/train.py`` writes is a safetensors file whose metadata (each value a JSON
string) holds:

=================  ==========================================================================================
key                value
=================  ==========================================================================================
``format``         1 (this schema's version)
``task``           ``"classification"``
``model``          timm model name, e.g. ``"swinlite_tiny_patch4_window7_224"``
``model_args``     constructor arguments that differ from the variant's defaults, e.g. ``{"num_classes": 2}``
``classes``        class names in output order
``preprocessing``  timm data config of the evaluation transform: ``input_size`` [3, H, W], ``interpolation``,
                   ``mean``, ``std``, ``crop_pct``, ``crop_mode``;
                   ``timm.data.create_transform(**preprocessing)`` is the run's val transform
``weights``        ``"raw"`` (the trained weights) or ``"ema"`` (their exponential moving average)
``swinlite``       the swinlite version that wrote the file
``epoch``          epochs done when written
``val_top1``       the run's val top-1 (%) of these weights at that epoch
=================  ==========================================================================================

:func:`load_model` rebuilds exactly that model from the file alone, strictly: every weight of the
model comes from the file and every tensor of the file goes into the model, or it is a ValueError.
Files in other layouts (official Microsoft, timm, torchvision, ... see :mod:`swinlite.convert`) load
the same way when the model name is given.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import timm
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from timm.models import get_pretrained_cfg_value
from torch import nn

from .convert import convert_state_dict, unwrap_checkpoint
from .models.swin import SwinTransformer

FORMAT = 1
KINDS = ("raw", "ema")
PREPROCESSING_KEYS = ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")


@dataclass(frozen=True)
class WeightsInfo:
    """The metadata of a self-describing weights file (see the module docstring)."""

    model: str
    model_args: dict[str, Any]
    classes: list[str]
    preprocessing: dict[str, Any]
    weights: str = "raw"
    task: str = "classification"
    extra: dict[str, Any] = field(default_factory=dict)  # epoch, val_top1, swinlite version, ...


def weights_metadata(
    model: str,
    model_args: Mapping[str, Any],
    classes: list[str],
    preprocessing: Mapping[str, Any],
    weights: str = "raw",
    **extra: Any,
) -> dict[str, Any]:
    """The metadata dict to save beside the tensors (``swinlite.io.save_safetensors`` JSON-encodes each value)."""
    from . import __version__

    if weights not in KINDS:
        raise ValueError(f"weights must be one of {KINDS}, got {weights!r}")
    missing = [k for k in PREPROCESSING_KEYS if k not in preprocessing]
    if missing:
        raise ValueError(f"preprocessing lacks {', '.join(missing)}")
    return {
        "format": FORMAT,
        "task": "classification",
        "model": model,
        "model_args": dict(model_args),
        "classes": list(classes),
        "preprocessing": {k: preprocessing[k] for k in PREPROCESSING_KEYS},
        "weights": weights,
        "swinlite": __version__,
        **extra,
    }


def _is_safetensors(path: Path) -> bool:
    """safetensors files start with an 8-byte header length, then the JSON header."""
    with path.open("rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


def _check_file(path: Path) -> None:
    if not path.exists():
        raise ValueError(f"checkpoint {str(path)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"checkpoint {str(path)!r} is not a file")
    if path.stat().st_size == 0:
        raise ValueError(f"checkpoint {str(path)!r} is empty (0 bytes)")


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors or torch (``weights_only=True``) file; ValueError naming the file otherwise."""
    path = Path(path)
    _check_file(path)
    try:
        if _is_safetensors(path):
            state = load_file(path)
        else:
            state = unwrap_checkpoint(torch.load(path, map_location="cpu", weights_only=True))
    except Exception as e:  # safetensors, pickle and zip readers raise many types for a file that is not theirs
        raise ValueError(
            f"{str(path)!r} is not a weights file (expected safetensors or a torch checkpoint): {type(e).__name__}: {e}"
        ) from None
    if not state:
        raise ValueError(f"{str(path)!r} holds no tensors")
    return state


def decode_metadata(raw: dict[str, str]) -> dict[str, Any]:
    """safetensors metadata (strings) -> values: each JSON-decoded where it parses, else kept as the string."""
    meta = {}
    for key, value in raw.items():
        try:
            meta[key] = json.loads(value)
        except json.JSONDecodeError:
            meta[key] = value
    return meta


def read_info(path: str | os.PathLike) -> WeightsInfo | None:
    """The recorded metadata, or None for a file that does not describe its model (torch files, converted ones)."""
    path = Path(path)
    _check_file(path)
    if not _is_safetensors(path):
        return None
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = f.metadata() or {}
    except Exception as e:
        raise ValueError(f"{str(path)!r} is not a readable safetensors file: {type(e).__name__}: {e}") from None
    meta = decode_metadata(raw)
    if "model" not in meta or "classes" not in meta:
        return None
    return _parse(meta)


def _parse(meta: dict[str, Any]) -> WeightsInfo:
    known = {"format", "task", "model", "model_args", "classes", "preprocessing", "weights"}
    classes = list(meta["classes"])
    if "preprocessing" in meta:
        preprocessing = dict(meta["preprocessing"])
    else:  # files written before format 1: flat keys
        size = meta.get("img_size", 224)
        flat = ("crop_pct", "interpolation", "mean", "std")
        preprocessing = {"input_size": [3, size, size], "crop_mode": "center"} | {k: meta[k] for k in flat if k in meta}
        known |= {"img_size", *flat}
    return WeightsInfo(
        model=meta["model"],
        model_args=dict(meta.get("model_args", {"num_classes": len(classes)})),
        classes=classes,
        preprocessing=preprocessing,
        weights=meta.get("weights", "raw"),
        task=meta.get("task", "classification"),
        extra={k: v for k, v in meta.items() if k not in known},
    )


def ema_counterpart(path: str | os.PathLike) -> Path:
    """The EMA weights of the same run and point as ``path``: the file itself when it holds EMA weights, else
    ``<stem>_ema.safetensors`` beside it (``ema.safetensors`` for ``last.safetensors``)."""
    path = Path(path)
    info = read_info(path)
    if info is not None and info.weights == "ema":
        return path
    names = [f"{path.stem}_ema.safetensors"] + (["ema.safetensors"] if path.stem == "last" else [])
    for name in names:
        candidate = path.with_name(name)
        if candidate.is_file():
            return candidate
    others = sorted(p.name for p in path.parent.glob("*.safetensors") if _records(p, "ema"))
    hint = f"; EMA files there: {', '.join(others)}" if others else " (trained without train.ema_decay?)"
    raise ValueError(f"--ema: {path} holds raw weights and there is no {' or '.join(names)} beside it{hint}")


def _records(path: Path, kind: str) -> bool:
    try:
        info = read_info(path)
    except ValueError:
        return False
    return info is not None and info.weights == kind


def check_model_name(name: str, pattern: str = "*") -> None:
    """ValueError with a "did you mean" when ``name`` is not a timm model matching ``pattern``.

    A name with a pretrained tag (``arch.tag``) must be one timm lists with weights.
    """
    tagged = "." in name
    if fnmatch.fnmatch(name, pattern) and (
        name in timm.list_models(name, pretrained=True) if tagged else timm.is_model(name)
    ):
        return
    names = timm.list_models(pattern, pretrained=tagged)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else f" (see timm.list_models({pattern!r}))"
    what = "timm model" if pattern == "*" else f"model (expected {pattern})"
    raise ValueError(f"unknown {what} {name!r}{hint}")


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def pretrained_model(name: str) -> nn.Module:
    """timm's model ``name`` with its published pretrained weights (from the Hugging Face cache or the hub)."""
    check_model_name(name)
    try:
        model = timm.create_model(name, pretrained=True)
    except Exception as e:  # hub, network and missing-weights errors come in many types
        raise ValueError(
            f"the pretrained weights of {name} could not be loaded (offline, or none published?): "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    return model.eval()


def load_model(
    path: str | os.PathLike, model: str | None = None, num_classes: int | None = None, **model_kwargs: Any
) -> nn.Module:
    """Rebuild the model a weights file holds and load every weight strictly; returns it in eval mode.

    For a self-describing file (see the module docstring) the file alone decides the model: ``model``
    and ``num_classes`` may be given but must agree with it. For other files (any layout
    :func:`swinlite.convert_state_dict` reads, or a plain state dict of any timm model) ``model`` is
    required and ``num_classes`` defaults to the file's classifier (0, no classifier, when it has none).

    The model's ``pretrained_cfg`` carries the file's preprocessing and class names (``label_names``),
    so ``timm.data.resolve_model_data_config(model)`` gives its evaluation transform.

    Args:
        path: the weights file.
        model: timm model name.
        num_classes: classifier outputs.
        **model_kwargs: further constructor arguments (e.g. ``out_norm=True``); they must not contradict the file.

    Raises:
        ValueError: unreadable file, unknown or contradicting model, or a weight that does not load.
    """
    info = read_info(path)
    state = read_state_dict(path)
    if info is None:
        if model is None:
            raise ValueError(
                f"{path} does not record its model; pass --model, e.g. swinlite_tiny_patch4_window7_224 "
                "(only files written by scripts/train.py record it)"
            )
        check_model_name(model)
        if num_classes is None:
            try:
                num_classes = _classifier_size(model, state)
            except ValueError as e:
                raise ValueError(f"{path}: {e}") from None
        net = timm.create_model(model, num_classes=num_classes, **model_kwargs)
    else:
        _check_agrees(path, info, model, num_classes, model_kwargs)
        check_model_name(info.model)
        net = timm.create_model(info.model, **(info.model_args | model_kwargs))
        preprocessing = {k: tuple(v) if isinstance(v, list) else v for k, v in info.preprocessing.items()}
        cfg = {**net.pretrained_cfg, **preprocessing, "label_names": info.classes, "num_classes": len(info.classes)}
        net.pretrained_cfg = net.default_cfg = cfg  # timm keeps default_cfg as an alias
    _load_strict(net, state, path)
    return net.eval()


def _check_agrees(
    path: str | os.PathLike, info: WeightsInfo, model: str | None, num_classes: int | None, kwargs: dict
) -> None:
    """A flag that contradicts the file is an error, never a silently different model."""
    if model is not None and model.split(".")[0] != info.model.split(".")[0]:
        raise ValueError(f"--model {model} contradicts {path}, which holds a {info.model}; drop --model")
    stored = info.model_args.get("num_classes", len(info.classes))
    if num_classes is not None and num_classes != stored:
        raise ValueError(f"--num-classes {num_classes} contradicts {path}, which has {stored} classes")
    clash = [k for k in kwargs if k in info.model_args and kwargs[k] != info.model_args[k]]
    if clash:
        raise ValueError(f"{', '.join(clash)} contradict {path}: it records {info.model_args}")


def _is_swinlite(name: str) -> bool:
    return name.startswith("swinlite_")


def _classifier_size(model: str, state: dict[str, torch.Tensor]) -> int:
    """Outputs of the file's classifier (0 when it has none), so a raw file never gets a random head."""
    if _is_swinlite(model):
        state = convert_state_dict(state)  # ValueError for a layout it does not know
    classifier = get_pretrained_cfg_value(model, "classifier") or "head.fc"
    weight = state.get(f"{classifier}.weight")
    return 0 if weight is None else int(weight.shape[0])


def _load_strict(net: nn.Module, state: dict[str, torch.Tensor], path: str | os.PathLike) -> None:
    """Every model weight from ``state``, every tensor of ``state`` into the model; ValueError naming the keys."""
    target = net.state_dict()
    if isinstance(net, SwinTransformer) and not set(state) <= set(target):
        try:  # other layouts; bias tables resized to the model's window
            state = convert_state_dict(state, net)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    problems = {
        "missing from the file": [k for k in target if k not in state],
        "not in the model": [k for k in state if k not in target],
        "shape (file vs model)": [
            f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
            for k, v in target.items()
            if k in state and state[k].shape != v.shape
        ],
    }
    if any(problems.values()):
        parts = [
            f"{what}: {', '.join(keys[:8])}{', ...' if len(keys) > 8 else ''}"
            for what, keys in problems.items()
            if keys
        ]
        raise ValueError(f"{path} does not fit {type(net).__name__} exactly; " + "; ".join(parts))
    net.load_state_dict(state, strict=True)
