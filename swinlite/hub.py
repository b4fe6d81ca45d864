"""Pretrained weights on the Hugging Face hub: where timm would load them from, decided in about a second.

Without network access (and without ``HF_HUB_OFFLINE=1``), ``huggingface_hub`` retries each download
with back-off before giving up, and timm tries two file names: about a minute of retry lines before
any error. :func:`pretrained_kwargs` asks the hub once, with a short timeout and no retries, and then
either lets timm download as usual, points timm at the cached file, or raises one line that says how
to proceed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import huggingface_hub
from huggingface_hub import constants, try_to_load_from_cache
from timm.models import PretrainedCfg, resolve_pretrained_cfg, split_model_name_tag

HUB_FILES = ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin")  # what timm looks for
TIMEOUT = 3.0  # seconds the reachability check waits


def hub_repo(name: str) -> str | None:
    """The Hugging Face hub repo timm loads ``name``'s pretrained weights from (None: a file, a URL, or none)."""
    hub_id = _hub_id(name)
    return None if hub_id is None else hub_id.partition("@")[0]


def _hub_id(name: str) -> str | None:
    """``name``'s hub id as timm reads it, ``repo`` or ``repo@revision`` (None: a file, a URL, or none)."""
    cfg = _pretrained_cfg(name)
    if cfg is None or not cfg.hf_hub_id or cfg.file:
        return None
    return cfg.hf_hub_id


def has_weights(name: str) -> bool:
    """Whether timm publishes pretrained weights for ``name`` (an architecture: its default tag's; or ``arch.tag``)."""
    cfg = _pretrained_cfg(name)
    return cfg is not None and bool(cfg.has_weights)


def _pretrained_cfg(name: str) -> PretrainedCfg | None:
    """timm's pretrained config of ``name``: an architecture's default tag's, or ``arch.tag``'s (None: none)."""
    arch, tag = split_model_name_tag(name)
    return resolve_pretrained_cfg(arch, pretrained_cfg=tag or None)


def cached_weights(name: str) -> Path | None:
    """The file of ``name``'s pretrained weights in the local Hugging Face cache (of the revision its hub id names,
    ``repo@revision``, as timm reads it; else the default branch's), or None."""
    repo_id, _, revision = (_hub_id(name) or "").partition("@")  # timm's hf_split: no "@", the default branch
    for filename in HUB_FILES if repo_id else ():
        found = try_to_load_from_cache(repo_id, filename, revision=revision or None)
        if isinstance(found, str):
            return Path(found)
    return None


def hub_unreachable(timeout: float = TIMEOUT) -> str | None:
    """None when the hub endpoint answers one HEAD request within ``timeout`` seconds, else why it did not.

    Any HTTP answer counts as reachable (the download then reports its own errors); proxies and the
    ``HF_ENDPOINT`` setting apply as for a download.
    """
    url = constants.ENDPOINT
    try:
        huggingface_hub.get_session().head(url, timeout=timeout)
    except Exception as e:  # the HTTP client raises its own connection / timeout error types
        return f"{url} did not answer within {timeout:g} s ({type(e).__name__})"
    return None


def pretrained_kwargs(name: str, hint: str = "") -> dict[str, Any]:
    """Keyword arguments that make ``timm.create_model(name, pretrained=True, **kwargs)`` load without a long wait.

    - ``{}`` when the weights come from elsewhere than the hub (a file, a release URL), when ``HF_HUB_OFFLINE``
      is set and they are cached, or when the hub answers: timm then loads as usual;
    - ``{"pretrained_cfg_overlay": {"file": <cached file>}}`` when the hub does not answer but the weights are
      in the local cache;
    - a ValueError otherwise.

    Args:
        name: a timm model name with or without a pretrained tag.
        hint: how the caller's user can get weights otherwise (its own options), appended to the error.

    Raises:
        ValueError: one line naming the hub repo and how to proceed, when the weights are neither cached nor
            downloadable.
    """
    repo_id = hub_repo(name)
    if repo_id is None:
        return {}
    cached = cached_weights(name)
    offline = constants.HF_HUB_OFFLINE
    why = "HF_HUB_OFFLINE is set" if offline else hub_unreachable()
    if why is None or (offline and cached is not None):
        return {}
    if cached is not None:
        return {"pretrained_cfg_overlay": {"file": str(cached)}}
    ways = "run once with network access to cache them (then HF_HUB_OFFLINE=1 works offline)"
    if not offline:
        ways = "check the network or set HF_ENDPOINT to a mirror, or " + ways
    raise ValueError(
        f"the pretrained weights of {name} (Hugging Face hub repo {repo_id}) are not in the local cache "
        f"({constants.HF_HUB_CACHE}) and cannot be downloaded: {why}; {ways}" + (f"; {hint}" if hint else "")
    )
