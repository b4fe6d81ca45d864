"""A full training run: data, model, epochs, metrics and checkpoints in ``train.output_dir``.

Files in the output folder (written by rank 0, each atomically):
``config.yaml`` (resolved config), ``metrics.csv``, ``curves.png``, ``last.safetensors``,
``best.safetensors`` (best val top-1) and ``resume.pt`` (everything ``--resume`` needs).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch import nn

from ..io import atomic_write
from . import builders
from .checkpoint import load_resume, rng_state, save_resume, save_weights, set_rng_state
from .config import Config, apply_overrides, config_diff, flatten, to_dict
from .data import Split, build_datasets, build_loaders, scan_data_dir
from .demo_data import build_digits
from .distributed import (
    DistInfo,
    all_gather_object,
    barrier,
    broadcast_object,
    cleanup,
    init_distributed,
    resolve_device,
)
from .engine import StepSettings, current_lr, evaluate, train_one_epoch
from .metrics import plot_curves, write_csv

RESUME_FILE = "resume.pt"
_AMP = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class RunState:
    """What changes from epoch to epoch and goes into the resume file."""

    epoch: int = 0  # next epoch to run
    step: int = 0  # optimizer steps taken
    best_top1: float = -1.0
    history: list[dict[str, float]] = field(default_factory=list)


def log(dist: DistInfo, message: str) -> None:
    if dist.is_main:
        print(message, flush=True)


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


def prepare_output(cfg: Config, resume: bool, overwrite: bool, dist: DistInfo) -> Path:
    """Check the output folder against ``--resume``/``--overwrite`` and warn about changed settings."""
    out = Path(cfg.train.output_dir)
    saved = out / "config.yaml"
    if resume:
        if not (out / RESUME_FILE).is_file():
            raise ValueError(f"--resume: {out / RESUME_FILE} does not exist; nothing to resume")
        old = apply_overrides(type(cfg)(), flatten(yaml.safe_load(saved.read_text())))
        for change in config_diff(old, cfg):
            log(dist, f"warning: resuming with a changed setting {change}")
    elif (out / RESUME_FILE).is_file() and not overwrite:
        raise ValueError(
            f"{out} already holds a run; pass --resume to continue it, --overwrite to replace it, "
            "or --output-dir for a new one"
        )
    if dist.is_main and out.is_dir():
        for stale in out.glob(".*.tmp*"):  # temp files of saves a kill interrupted; the real files are intact
            stale.unlink()
    return out


def _prepare_data(cfg: Config, dist: DistInfo) -> tuple[Any, Any, list[str], int]:
    """Rank 0 builds the demo data if asked and scans the folders once; the other ranks get its result."""
    found: tuple[Split, Split] | str | None = None
    if dist.is_main:
        try:
            if cfg.data.dataset == "digits":
                build_digits(cfg.data.data_dir, size=cfg.data.img_size)
            found = scan_data_dir(cfg.data)
        except ValueError as e:
            found = str(e)
    found = broadcast_object(found, dist)
    if isinstance(found, str):
        raise ValueError(found)
    return build_datasets(cfg.data, found)


def _weights_metadata(cfg: Config, classes: list[str], epoch: int, top1: float) -> dict[str, Any]:
    return {
        "model": cfg.model.name,
        "classes": classes,
        "img_size": cfg.data.img_size,
        "crop_pct": cfg.data.crop_pct,
        "interpolation": cfg.data.interpolation,
        "mean": list(cfg.data.mean),
        "std": list(cfg.data.std),
        "epoch": epoch,
        "val_top1": top1,
    }


@dataclass
class Trainer:
    """The pieces of one run, built from a config by ``Trainer.build``."""

    cfg: Config
    dist: DistInfo
    out: Path
    model: nn.Module  # unwrapped
    ddp_model: nn.Module  # DDP-wrapped when multi-process, else ``model``
    classes: list[str]
    loaders: tuple[Any, Any]
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    settings: StepSettings
    loss_fn: nn.Module
    mixup: Any
    ema: Any
    state: RunState = field(default_factory=RunState)

    @classmethod
    def build(cls, cfg: Config, dist: DistInfo, device: torch.device, out: Path) -> Trainer:
        train_ds, val_ds, classes, skipped = _prepare_data(cfg, dist)
        log(dist, f"data: {len(train_ds)} train / {len(val_ds)} val images, {len(classes)} classes, {skipped} skipped")
        loaders = build_loaders(train_ds, val_ds, cfg.data, cfg.train.seed, dist.rank, dist.world_size)
        model = builders.build_model(cfg.model, len(classes)).to(device)
        ddp_model = nn.parallel.DistributedDataParallel(model) if dist.enabled else model
        global_batch = cfg.data.batch_size * dist.world_size * cfg.optim.accum_steps
        optimizer = builders.build_optimizer(model, cfg, global_batch)
        steps_per_epoch = -(-len(loaders[0]) // cfg.optim.accum_steps)
        mixup = builders.build_mixup(cfg.data, cfg.train.label_smoothing, len(classes))
        amp = _AMP[cfg.train.amp]
        if amp is torch.float16 and device.type != "cuda":
            raise ValueError("train.amp=fp16 needs CUDA; use train.amp=bf16 on CPU")
        return cls(
            cfg=cfg,
            dist=dist,
            out=out,
            model=model,
            ddp_model=ddp_model,
            classes=classes,
            loaders=loaders,
            optimizer=optimizer,
            scheduler=builders.build_scheduler(optimizer, cfg, steps_per_epoch),
            scaler=torch.amp.GradScaler(device.type, enabled=amp is torch.float16),
            settings=StepSettings(device, amp, cfg.optim.accum_steps, cfg.optim.clip_grad, cfg.train.log_interval),
            loss_fn=builders.build_loss(mixup, cfg.train.label_smoothing),
            mixup=mixup,
            ema=builders.build_ema(model, cfg.train.ema_decay),
        )

    def resume_state(self, rngs: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "ema": None if self.ema is None else self.ema.state_dict(),
            "epoch": self.state.epoch,
            "step": self.state.step,
            "best_top1": self.state.best_top1,
            "history": self.state.history,
            "rng": rngs,  # one per process
        }

    def load_resume(self, path: Path) -> None:
        saved = load_resume(path)
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        schedule_keys = ("t_initial", "warmup_t", "lr_min", "warmup_lr_init", "base_values")
        if all(saved["scheduler"].get(k) == getattr(self.scheduler, k) for k in schedule_keys):
            self.scheduler.load_state_dict(saved["scheduler"])
        else:  # e.g. train.epochs was raised: follow the new settings, not the saved schedule
            log(self.dist, "warning: the lr schedule changed with the settings; continuing on the new one")
        self.scaler.load_state_dict(saved["scaler"])
        if self.ema is not None and saved["ema"] is not None:
            self.ema.load_state_dict(saved["ema"])
        self.state = RunState(saved["epoch"], saved["step"], saved["best_top1"], saved["history"])
        if len(saved["rng"]) != self.dist.world_size:
            log(self.dist, f"warning: saved with {len(saved['rng'])} processes, resuming with {self.dist.world_size}")
        set_rng_state(saved["rng"][self.dist.rank % len(saved["rng"])])  # last: the exact state saved

    def run_epoch(self) -> dict[str, float]:
        """Train and evaluate one epoch; return its metrics row."""
        epoch, start = self.state.epoch, time.perf_counter()
        train_loader, val_loader = self.loaders
        train_loader.sampler.set_epoch(epoch)
        desc = f"epoch {epoch + 1}/{self.cfg.train.epochs}"
        train_loss, self.state.step, rate = train_one_epoch(
            self.ddp_model, train_loader, self.loss_fn, self.optimizer, self.scheduler, self.state.step,
            self.settings, scaler=self.scaler, mixup=self.mixup, ema=self.ema, dist=self.dist, desc=desc,
        )  # fmt: skip
        result = evaluate(self.ddp_model, val_loader, len(self.classes), self.settings, self.dist)
        row = {"epoch": epoch + 1, "train_loss": train_loss, "val_loss": result.loss, "val_top1": result.top1}
        row |= {"val_top5": result.top5, "lr": current_lr(self.optimizer)}
        row |= {"epoch_time": time.perf_counter() - start, "train_img_s": rate * self.dist.world_size}
        if self.ema is not None:
            ema_result = evaluate(self.ema.module, val_loader, len(self.classes), self.settings, self.dist)
            row |= {"ema_val_loss": ema_result.loss, "ema_val_top1": ema_result.top1, "ema_val_top5": ema_result.top5}
        return row

    def save(self, row: dict[str, float], is_best: bool, rngs: list[dict[str, torch.Tensor]]) -> None:
        """Metrics, curves, weights, then the resume file (written last: it marks the epoch done)."""
        write_csv(self.state.history, self.out / "metrics.csv")
        plot_curves(self.state.history, self.out / "curves.png")
        meta = _weights_metadata(self.cfg, self.classes, int(row["epoch"]), row["val_top1"])
        save_weights(self.out / "last.safetensors", self.model.state_dict(), meta)
        if is_best:
            save_weights(self.out / "best.safetensors", self.model.state_dict(), meta)
        save_resume(self.out / RESUME_FILE, self.resume_state(rngs))

    def fit(self) -> None:
        while self.state.epoch < self.cfg.train.epochs:
            row = self.run_epoch()
            self.state.history.append(row)
            self.state.epoch += 1
            is_best = row["val_top1"] > self.state.best_top1
            self.state.best_top1 = max(self.state.best_top1, row["val_top1"])
            rngs = all_gather_object(rng_state(), self.dist)
            if self.dist.is_main:
                self.save(row, is_best, rngs)
            log(self.dist, _summary(row, self.cfg.train.epochs))
            barrier(self.dist)


def _summary(row: dict[str, float], epochs: int) -> str:
    text = (
        f"epoch {int(row['epoch'])}/{epochs}: train loss {row['train_loss']:.4f}, val loss {row['val_loss']:.4f}, "
        f"top-1 {row['val_top1']:.2f}%, top-5 {row['val_top5']:.2f}%, lr {row['lr']:.2e}, "
        f"{row['epoch_time']:.1f} s ({row['train_img_s']:.0f} img/s)"
    )
    if "ema_val_top1" in row:
        text += f", EMA top-1 {row['ema_val_top1']:.2f}%"
    return text


def train(cfg: Config, resume: bool = False, overwrite: bool = False) -> Path:
    """Run (or continue) training as ``cfg`` describes; returns the output folder."""
    builders.check_config(cfg)
    device = resolve_device(cfg.train.device, int(os.environ.get("LOCAL_RANK", "0")))
    dist = init_distributed(device)
    try:
        out = prepare_output(cfg, resume, overwrite, dist)
        seed_everything(cfg.train.seed + dist.rank, cfg.train.deterministic)
        trainer = Trainer.build(cfg, dist, device, out)
        if dist.is_main:
            out.mkdir(parents=True, exist_ok=True)
            atomic_write(out / "config.yaml", lambda f: f.write(yaml.safe_dump(to_dict(cfg), sort_keys=False).encode()))
        if resume:
            trainer.load_resume(out / RESUME_FILE)
            log(dist, f"resumed from {out / RESUME_FILE} at epoch {trainer.state.epoch}")
        trainer.fit()
        _report(trainer, dist)
    finally:
        cleanup(dist)
    return out


def _report(trainer: Trainer, dist: DistInfo) -> None:
    out, state = trainer.out, trainer.state
    log(dist, f"done: best val top-1 {state.best_top1:.2f}%")
    for name, what in (
        ("metrics.csv", "metrics"),
        ("curves.png", "curves"),
        ("best.safetensors", "best weights"),
        ("last.safetensors", "last weights"),
        (RESUME_FILE, "resume file"),
        ("config.yaml", "resolved config"),
    ):
        log(dist, f"  {what + ':':<16} {out / name}")
