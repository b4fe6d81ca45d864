"""Pretrained tags: swinlite models load the released Swin weights by name, as timm's ``swin_*`` models do.

The tags, hub repos, release URLs and metadata are read from timm's own registered cfgs for the
matching ``swin_*`` model, so they cannot drift from timm. Loading goes through timm: the file
(``timm/swin_tiny_patch4_window7_224.ms_in1k`` on the Hugging Face hub, or the release URL) is
converted by ``swinlite.convert_state_dict`` as timm's ``pretrained_filter_fn``.
"""

from __future__ import annotations

from typing import Any

from timm.models import get_arch_pretrained_cfgs, resolve_pretrained_cfg, split_model_name_tag


class WeightsUnavailableError(FileNotFoundError):
    """Pretrained weights are neither in the local cache nor downloadable (offline, no network)."""


def timm_tags(swin_arch: str) -> dict[str, dict[str, Any]]:
    """Cfgs ``swinlite_<x>.<tag>`` for every pretrained tag timm registers for ``swin_<x>``, timm's default first.

    Everything but the input-size policy is timm's: swinlite takes any input size (it pads), so
    ``fixed_input_size`` is False.

    Args:
        swin_arch: a timm Swin architecture, e.g. ``"swin_tiny_patch4_window7_224"``.

    Returns:
        ``{"swinlite_tiny_patch4_window7_224.ms_in1k": {...}, ...}`` for ``generate_default_cfgs``.
    """
    cfgs = get_arch_pretrained_cfgs(swin_arch)
    if not cfgs:
        raise ValueError(f"timm registers no pretrained cfgs for {swin_arch!r}")
    out = {}
    for name, cfg in cfgs.items():
        _, tag = split_model_name_tag(name)
        fields = {k: v for k, v in cfg.to_dict().items() if k not in ("architecture", "tag")}
        out[f"swinlite_{swin_arch.removeprefix('swin_')}.{tag}"] = {**fields, "fixed_input_size": False}
    return out


def unavailable_error(variant: str, kwargs: dict[str, Any], cause: Exception) -> WeightsUnavailableError:
    """The error for weights that cannot be fetched: names the hub repo, the release URL and the local-file way."""
    cfg = resolve_pretrained_cfg(
        variant,
        pretrained_cfg=kwargs.get("pretrained_cfg"),
        pretrained_cfg_overlay=kwargs.get("pretrained_cfg_overlay"),
    )
    name = f"{variant}.{cfg.tag}" if cfg.tag else variant
    where = f"Hugging Face hub repo {cfg.hf_hub_id}" if cfg.hf_hub_id else "no hub repo"
    return WeightsUnavailableError(
        f"pretrained weights for {name} are not in the local cache and cannot be downloaded "
        f"(offline, HF_HUB_OFFLINE=1, or no network): {where}, release URL {cfg.url or 'none'}. "
        f"Download the file elsewhere and load it with timm.create_model({name!r}, pretrained=True, "
        "pretrained_cfg_overlay=dict(file='path/to/file')), or convert it with scripts/convert_checkpoint.py "
        f"({type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else 'no detail'})"
    )
