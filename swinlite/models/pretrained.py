"""Pretrained tags: swinlite models load the released Swin and Swin-V2 weights by name, as timm's models do.

The tags, hub repos, release URLs and metadata are read from timm's own registered cfgs for the matching timm
model, so they cannot drift from timm. One naming rule maps a timm architecture to swinlite's: ``swin_X`` ->
``swinlite_X`` and ``swinv2_X`` -> ``swinlite_v2_X`` (:func:`lite_name`). Loading goes through timm: the file
(``timm/swin_tiny_patch4_window7_224.ms_in1k`` on the Hugging Face hub, or the release URL) is converted by
``swinlite.convert.convert_pretrained`` as timm's ``pretrained_filter_fn``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from timm.models import get_arch_pretrained_cfgs, resolve_pretrained_cfg, split_model_name_tag

from ..hub import cached_weights, pretrained_kwargs
from ..io import check_weights_file

# timm architecture prefix -> swinlite's
_PREFIXES = (("swinv2_", "swinlite_v2_"), ("swin_", "swinlite_"))


class WeightsUnavailableError(FileNotFoundError):
    """Pretrained weights are neither in the local cache nor downloadable (offline, no network)."""


def lite_name(timm_arch: str) -> str:
    """swinlite's name for a timm Swin architecture: ``swin_X`` -> ``swinlite_X``, ``swinv2_X`` -> ``swinlite_v2_X``."""
    for prefix, lite in _PREFIXES:
        if timm_arch.startswith(prefix):
            return lite + timm_arch.removeprefix(prefix)
    raise ValueError(f"not a timm Swin architecture (swin_* or swinv2_*): {timm_arch!r}")


def timm_tags(timm_arch: str) -> dict[str, dict[str, Any]]:
    """Cfgs ``<lite name>.<tag>`` for every pretrained tag timm registers for ``timm_arch``, timm's default first.

    Everything but the input-size policy is timm's: swinlite takes any input size (it pads), so
    ``fixed_input_size`` is False.

    Args:
        timm_arch: a timm Swin architecture, e.g. ``"swin_tiny_patch4_window7_224"`` or ``"swinv2_tiny_window8_256"``.

    Returns:
        ``{"swinlite_tiny_patch4_window7_224.ms_in1k": {...}, ...}`` for ``generate_default_cfgs``.
    """
    cfgs = get_arch_pretrained_cfgs(timm_arch)
    if not cfgs:
        raise ValueError(f"timm registers no pretrained cfgs for {timm_arch!r}")
    out = {}
    for name, cfg in cfgs.items():
        _, tag = split_model_name_tag(name)
        fields = {k: v for k, v in cfg.to_dict().items() if k not in ("architecture", "tag")}
        out[f"{lite_name(timm_arch)}.{tag}"] = {**fields, "fixed_input_size": False}
    return out


def hub_kwargs(variant: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """What ``pretrained=True`` needs to load the tag's weights from the hub without a long wait.

    The library's one reachability check (:func:`swinlite.hub.pretrained_kwargs`): asked once, quickly; nothing
    when the weights come from elsewhere (``pretrained_cfg_overlay``, a cfg object, a ``cache_dir``).

    Args:
        variant: the registered model, without tag.
        kwargs: the keyword arguments of the model function (``pretrained_cfg`` holds the tag).

    Raises:
        WeightsUnavailableError: one line naming the hub repo, the release URL and the local-file way.
    """
    tag = kwargs.get("pretrained_cfg")
    if kwargs.get("pretrained_cfg_overlay") or kwargs.get("cache_dir") or not (tag is None or isinstance(tag, str)):
        return {}
    name = f"{variant}.{tag}" if tag else variant
    try:
        return pretrained_kwargs(name, hint=_local_ways(variant, kwargs))
    except ValueError as e:
        raise WeightsUnavailableError(str(e)) from None


def check_weights_source(variant: str, kwargs: dict[str, Any]) -> None:
    """ValueError naming a pretrained weights file that cannot be read whole (:func:`swinlite.io.check_weights_file`,
    a legacy torch file passing unread): ``pretrained_cfg_overlay``'s ``file`` (a typo gave timm's FileNotFoundError
    with no message, a text file "KeyError: 101"), or, where the weights come from the tag's hub repo in the default
    cache (as :func:`hub_kwargs` decides), the tag's cached file (a truncated download gave the safetensors reader's
    "incomplete metadata", naming no file), with what to do."""
    overlay, tag = kwargs.get("pretrained_cfg_overlay"), kwargs.get("pretrained_cfg")
    # the tag's file in the default cache (a cfg object names no tag); hub_kwargs may have made it the overlay's file
    cached = cached_weights(f"{variant}.{tag}" if tag else variant) if isinstance(tag, str | None) else None
    if overlay:  # another source (a file, a repo, a URL): only a file is known here
        source = overlay.get("file") if isinstance(overlay, dict) else None
    else:  # another cache (cache_dir) is timm's to read
        source = None if kwargs.get("cache_dir") else cached
    if source is None:
        return
    try:
        check_weights_file(source, read_legacy=False)
    except ValueError as e:
        again = "; delete it to download it again" if cached is not None and Path(source) == cached else ""
        raise ValueError(f"the pretrained weights of {variant}: {e}{again}") from None


def unavailable_error(variant: str, kwargs: dict[str, Any], cause: Exception) -> WeightsUnavailableError:
    """The error for weights that timm could not fetch: names the hub repo, the release URL and the local-file way."""
    cfg = resolve_pretrained_cfg(
        variant,
        pretrained_cfg=kwargs.get("pretrained_cfg"),
        pretrained_cfg_overlay=kwargs.get("pretrained_cfg_overlay"),
    )
    name = f"{variant}.{cfg.tag}" if cfg.tag else variant
    where = f"Hugging Face hub repo {cfg.hf_hub_id}" if cfg.hf_hub_id else "no hub repo"
    return WeightsUnavailableError(
        f"pretrained weights for {name} are not in the local cache and cannot be downloaded "
        f"(offline, HF_HUB_OFFLINE=1, or no network): {where}; {_local_ways(variant, kwargs)} "
        f"({type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else 'no detail'})"
    )


def _local_ways(variant: str, kwargs: dict[str, Any]) -> str:
    """How to load the tag's weights without the hub: its release URL, a local file, the converter script."""
    cfg = resolve_pretrained_cfg(
        variant,
        pretrained_cfg=kwargs.get("pretrained_cfg"),
        pretrained_cfg_overlay=kwargs.get("pretrained_cfg_overlay"),
    )
    name = f"{variant}.{cfg.tag}" if cfg.tag else variant
    return (
        f"or download the release file ({cfg.url or 'no release URL'}) elsewhere and load it with "
        f"timm.create_model({name!r}, pretrained=True, pretrained_cfg_overlay=dict(file='path/to/file')), "
        "or convert it with scripts/convert_checkpoint.py"
    )
