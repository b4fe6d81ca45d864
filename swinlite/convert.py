"""Convert Swin checkpoints from the layouts users hold to swinlite's.

Supported layouts, detected from the keys:

- ``swinlite``: this package's own (returned as is).
- ``timm``: timm's ``swin_transformer`` (downsample at the start of a stage, ``head.fc.*``).
- ``microsoft``: the official release (``{"model": ...}``, downsample at the *end* of a stage,
  ``head.*``, persistent ``relative_position_index`` / ``attn_mask`` buffers).
- ``torchvision``: ``swin_t/s/b`` (``features.N...``).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Mapping

import torch
from torch import nn

from .layers.rel_pos_bias import resize_rel_pos_bias_table

StateDict = dict[str, torch.Tensor]

# Buffers some layouts save that swinlite rebuilds itself.
_DROPPED = ("relative_position_index", "attn_mask")


def unwrap_checkpoint(checkpoint: Mapping[str, object]) -> StateDict:
    """Take the state dict out of a training checkpoint (``{"model": ...}``, ``{"state_dict": ...}``)."""
    for key in ("model", "state_dict", "model_ema", "module"):
        inner = checkpoint.get(key)
        if isinstance(inner, Mapping) and any(isinstance(v, torch.Tensor) for v in inner.values()):
            return dict(inner)
    return {k: v for k, v in checkpoint.items() if isinstance(v, torch.Tensor)}


def detect_layout(state_dict: Mapping[str, torch.Tensor]) -> str:
    """Name the layout of a Swin state dict; ValueError listing sample keys when it is none we know."""
    keys = list(state_dict)
    if any(k.startswith("features.0.0.") for k in keys):
        return "torchvision"
    if any(".attn.rel_pos." in k for k in keys):
        return "swinlite"
    if any(k.startswith("layers.") and k.endswith("relative_position_bias_table") for k in keys):
        # the official release downsamples at the end of stage 0; timm has no layers.0.downsample
        if any(k.startswith("layers.0.downsample.") for k in keys) or "head.weight" in state_dict:
            return "microsoft"
        return "timm"
    sample = ", ".join(keys[:12]) + (", ..." if len(keys) > 12 else "")
    raise ValueError(
        "unknown checkpoint layout: expected a swinlite, timm, Microsoft or torchvision Swin state dict; "
        f"got keys: {sample}"
    )


def _from_timm(key: str) -> str:
    return key.replace("attn.relative_position_bias_table", "attn.rel_pos.table")


def _from_microsoft(key: str) -> str:
    key = re.sub(r"^layers\.(\d+)\.downsample", lambda m: f"layers.{int(m.group(1)) + 1}.downsample", key)
    key = re.sub(r"^head\.(weight|bias)$", r"head.fc.\1", key)
    return _from_timm(key)


def _from_torchvision(key: str) -> str:
    key = key.replace("features.0.0.", "patch_embed.proj.").replace("features.0.2.", "patch_embed.norm.")
    m = re.match(r"^features\.(\d+)\.(.*)$", key)
    if m:
        index, rest = int(m.group(1)), m.group(2)
        if index % 2 == 1:  # odd entries are the stages' blocks
            rest = re.sub(r"^(\d+)\.mlp\.0\.", r"\1.mlp.fc1.", rest)
            rest = re.sub(r"^(\d+)\.mlp\.3\.", r"\1.mlp.fc2.", rest)
            key = f"layers.{index // 2}.blocks.{rest}"
        else:  # even entries (from 2 on) are patch merging into stage index // 2
            key = f"layers.{index // 2}.downsample.{rest}"
    key = re.sub(r"^head\.(weight|bias)$", r"head.fc.\1", key)
    return _from_timm(key)


_RENAMES: dict[str, Callable[[str], str]] = {
    "swinlite": lambda k: k,
    "timm": _from_timm,
    "microsoft": _from_microsoft,
    "torchvision": _from_torchvision,
}


def convert_state_dict(checkpoint: Mapping[str, object], model: nn.Module | None = None) -> StateDict:
    """Return ``checkpoint`` in swinlite's layout, whatever Swin layout it is in.

    Also usable as timm's ``pretrained_filter_fn`` (called with the model). With ``model``, bias
    tables are resized bicubically to the model's window, a classifier of another size is dropped
    with a warning, and keys the model does not have raise a ValueError that lists them.

    Args:
        checkpoint: a state dict, or a training checkpoint holding one under ``model``/``state_dict``.
        model: the swinlite model the result will be loaded into.

    Returns:
        A new state dict (tensors are shared, not copied).
    """
    state_dict = unwrap_checkpoint(checkpoint)
    rename = _RENAMES[detect_layout(state_dict)]
    out = {rename(k): v for k, v in state_dict.items() if not k.endswith(_DROPPED)}
    if model is not None:
        out = _fit_to_model(out, model)
    return out


def _fit_to_model(state_dict: StateDict, model: nn.Module) -> StateDict:
    target = model.state_dict()
    unmapped = sorted(k for k in state_dict if k not in target)
    if unmapped:
        raise ValueError(
            f"{len(unmapped)} checkpoint keys did not map onto {type(model).__name__}: "
            + ", ".join(unmapped[:20])
            + (", ..." if len(unmapped) > 20 else "")
        )
    out = {}
    for key, value in state_dict.items():
        want = target[key].shape
        if value.shape != want and key.endswith("rel_pos.table"):
            value = resize_rel_pos_bias_table(value, _square_window(value.shape[0]), _square_window(want[0]))
        elif value.shape != want and key.startswith("head.fc."):
            warnings.warn(
                f"dropping classifier {key} of shape {tuple(value.shape)}: the model's is {tuple(want)}", stacklevel=2
            )
            continue
        out[key] = value
    return out


def _square_window(num_offsets: int) -> tuple[int, int]:
    side = math.isqrt(num_offsets)
    if side * side != num_offsets or side % 2 == 0:
        raise ValueError(f"bias table of {num_offsets} rows is not (2w-1)^2 for a square window")
    return (side + 1) // 2, (side + 1) // 2
