"""Checks a run makes before it trains: training options, pretrained weights by name, the class balance."""

from __future__ import annotations

import os
from collections import Counter

import timm

from .builders import pretrained_source
from .config import Config, ModelConfig
from .data import Split

BEST_OF = ("raw", "ema", "both")


def check_training_options(cfg: Config) -> None:
    """ValueError for a ``train.*`` / ``data.*`` loader option that cannot work."""
    if cfg.train.best_of not in BEST_OF:
        raise ValueError(f"train.best_of must be raw, ema or both, got {cfg.train.best_of!r}")
    if cfg.train.best_of == "ema" and cfg.train.ema_decay is None:
        raise ValueError("train.best_of=ema needs train.ema_decay (e.g. train.ema_decay=0.9998)")
    if cfg.train.save_every_steps < 0:
        raise ValueError(f"train.save_every_steps must be 0 (off) or positive, got {cfg.train.save_every_steps}")
    if cfg.train.dist_timeout <= 0:
        raise ValueError(f"train.dist_timeout must be positive (seconds), got {cfg.train.dist_timeout}")
    if cfg.data.num_workers < 0 or cfg.data.prefetch_factor < 1:
        raise ValueError("data.num_workers must be 0 or more and data.prefetch_factor at least 1")


def check_pretrained_available(cfg: ModelConfig) -> None:
    """ValueError before any data is read when ``model.pretrained=true`` cannot be served: the Hugging Face hub
    is offline and the file is not in the local cache (a name without weights is a config error already)."""
    if pretrained_source(cfg.pretrained) is not True:
        return
    how = (
        "pass model.pretrained=PATH for a local weights file, model.pretrained=none to train from scratch, "
        "or --config configs/demo.yaml for the digits demo"
    )
    pretrained_cfg = timm.models.get_pretrained_cfg(cfg.name)
    source = pretrained_cfg.hf_hub_id
    if source and os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        from huggingface_hub import try_to_load_from_cache

        names = ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin")
        if not any(isinstance(try_to_load_from_cache(source, n), str) for n in names):
            raise ValueError(
                f"model.pretrained=true: the weights of {cfg.name} (hub repo {source}"
                + (f", release {pretrained_cfg.url}" if pretrained_cfg.url else "")
                + ") are not in the local "
                f"Hugging Face cache and HF_HUB_OFFLINE is set; download them once with network access, or {how}"
            )


def class_warnings(split: Split) -> list[str]:
    """Warnings about the training split's classes: a single class, or over 10x imbalance."""
    if len(split.classes) == 1:
        return [
            f"the training split has 1 class ({split.classes[0]}): every prediction will be that class, so "
            "val top-1 is 100% whatever the model learns; add a folder per class"
        ]
    counts = Counter(label for _, label in split.samples)
    (most, high), (least, low) = counts.most_common()[0], counts.most_common()[-1]
    if high > 10 * low:
        return [
            f"class imbalance over 10x: '{split.classes[most]}' has {high} training images, "
            f"'{split.classes[least]}' {low} ({high / low:.1f}x); top-1 favours the large classes, "
            "look at the per-class accuracy (scripts/evaluate.py)"
        ]
    return []
