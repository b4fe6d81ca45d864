"""A full detection training run: COCO data, detector, epochs, COCO mAP and checkpoints in ``train.output_dir``.

Files in the output folder, as for classification (written by rank 0, each atomically): ``config.yaml``,
``metrics.csv``, ``curves.png``, ``last.safetensors``, ``best.safetensors`` (best val box AP; both record the
detector's config and class names) and ``resume.pt`` (everything ``--resume`` needs).
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, Subset

from ..io import atomic_write
from ..train.checkpoint import load_resume, rng_state, save_resume, save_weights, set_rng_state
from ..train.config import to_dict
from ..train.distributed import DistInfo, all_gather_object, barrier, cleanup, init_distributed, resolve_device
from ..train.engine import StepSettings, current_lr
from ..train.runner import RESUME_FILE, log, prepare_output, seed_everything
from .config import DetConfig, check_det_config
from .data import Categories, CocoDetection, CocoSplit, categories_of, collate, load_split, split_paths
from .demo_data import build_digit_scenes
from .engine import predict, train_one_epoch
from .evaluation import coco_ap, ignore_empty_boxes
from .metrics import plot_curves, write_metrics
from .models import build_detector
from .optim import build_optimizer, build_scheduler
from .transforms import build_eval_transform, build_train_transform

_AMP = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class RunState:
    """What changes from epoch to epoch and goes into the resume file."""

    epoch: int = 0  # next epoch to run
    step: int = 0  # optimizer steps taken
    best_map: float = -1.0
    history: list[dict[str, float]] = field(default_factory=list)


def load_splits(cfg: DetConfig, dist: DistInfo) -> tuple[CocoSplit, CocoSplit, Categories]:
    """Rank 0 builds the demo data if asked; every rank then reads and checks both annotation files."""
    if cfg.data.dataset == "digits" and dist.is_main:
        build_digit_scenes(cfg.data.data_dir)
    barrier(dist)
    train_split = load_split(*split_paths(cfg.data, "train"), verify=cfg.data.verify_images)
    val_split = load_split(*split_paths(cfg.data, "val"), verify=cfg.data.verify_images)
    ignored = ignore_empty_boxes(val_split.coco)
    if ignored:
        warnings.warn(
            f"val: {len(ignored)} objects with an empty box are ignored in evaluation: ids {ignored[:10]}", stacklevel=2
        )
    categories = categories_of(train_split)
    unknown = sorted(set(val_split.coco.cats) - set(categories.ids))
    if unknown:
        raise ValueError(f"the val annotations have category ids the training annotations lack: {unknown}")
    return train_split, val_split, categories


def build_loaders(cfg: DetConfig, dist: DistInfo) -> tuple[DataLoader, DataLoader, CocoSplit, Categories]:
    """Train loader (shuffled per epoch via ``loader.sampler.set_epoch``) and val loader, each process a shard."""
    with warnings.catch_warnings():
        if not dist.is_main:
            warnings.simplefilter("ignore")  # every process reads the files; rank 0 reports their problems once
        train_split, val_split, categories = load_splits(cfg, dist)
        masks = cfg.model.detector == "maskrcnn"
        train_ds = CocoDetection(train_split, categories, build_train_transform(cfg.data), masks=masks)
        val_ds = CocoDetection(val_split, categories, build_eval_transform())
    if not any(train_ds.objects):
        raise ValueError(f"the training annotations ({split_paths(cfg.data, 'train')[0]}) hold no usable object")
    sampler = DistributedSampler(train_ds, num_replicas=dist.world_size, rank=dist.rank, seed=cfg.train.seed)
    args = dict(batch_size=cfg.data.batch_size, num_workers=cfg.data.num_workers, collate_fn=collate)
    args["pin_memory"] = torch.cuda.is_available()
    val_shard = Subset(val_ds, range(dist.rank, len(val_ds), dist.world_size))
    return DataLoader(train_ds, sampler=sampler, **args), DataLoader(val_shard, **args), val_split, categories


def weights_metadata(cfg: DetConfig, categories: Categories, epoch: int, val_map: float) -> dict[str, Any]:
    """What ``detect.py`` and ``evaluate_detection.py`` need to rebuild the detector from a weights file."""
    model = dataclasses.asdict(cfg.model) | {"pretrained": None, "grad_checkpointing": False}
    data = {k: getattr(cfg.data, k) for k in ("test_size", "max_size", "mean", "std")}
    return {"task": "detection", "detector": model, "data": data, "classes": categories.names,
            "category_ids": categories.ids, "epoch": epoch, "val_map": val_map}  # fmt: skip


@dataclass
class DetTrainer:
    """The pieces of one run, built from a config by ``DetTrainer.build``."""

    cfg: DetConfig
    dist: DistInfo
    out: Path
    model: nn.Module  # unwrapped
    ddp_model: nn.Module  # DDP-wrapped when multi-process, else ``model``
    loaders: tuple[DataLoader, DataLoader]
    val_split: CocoSplit
    categories: Categories
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    settings: StepSettings
    state: RunState = field(default_factory=RunState)

    @classmethod
    def build(cls, cfg: DetConfig, dist: DistInfo, device: torch.device, out: Path) -> DetTrainer:
        train_loader, val_loader, val_split, categories = build_loaders(cfg, dist)
        log(dist, f"data: {len(train_loader.dataset)} train / {len(val_split.image_ids)} val images, "
                  f"{len(categories.ids)} classes: {', '.join(categories.names)}")  # fmt: skip
        model = build_detector(
            cfg.model, len(categories.ids), cfg.data.test_size, cfg.data.max_size, cfg.data.mean, cfg.data.std
        ).to(device)
        ddp_model = nn.parallel.DistributedDataParallel(model) if dist.enabled else model
        optimizer = build_optimizer(model, cfg)
        steps = len(train_loader) if cfg.train.max_iters is None else min(cfg.train.max_iters, len(train_loader))
        amp = _AMP[cfg.train.amp]
        if amp is torch.float16 and device.type != "cuda":
            raise ValueError("train.amp=fp16 needs CUDA; use train.amp=bf16 on CPU")
        return cls(
            cfg=cfg,
            dist=dist,
            out=out,
            model=model,
            ddp_model=ddp_model,
            loaders=(train_loader, val_loader),
            val_split=val_split,
            categories=categories,
            optimizer=optimizer,
            scheduler=build_scheduler(optimizer, cfg, steps),
            scaler=torch.amp.GradScaler(device.type, enabled=amp is torch.float16),
            settings=StepSettings(device, amp, clip_grad=cfg.optim.clip_grad, log_interval=cfg.train.log_interval),
        )

    def resume_state(self, rngs: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "epoch": self.state.epoch,
            "step": self.state.step,
            "best_map": self.state.best_map,
            "history": self.state.history,
            "rng": rngs,  # one per process
        }

    def load_resume(self, path: Path) -> None:
        saved = load_resume(path)
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        self.scaler.load_state_dict(saved["scaler"])
        self.state = RunState(saved["epoch"], saved["step"], saved["best_map"], saved["history"])
        if len(saved["rng"]) != self.dist.world_size:
            log(self.dist, f"warning: saved with {len(saved['rng'])} processes, resuming with {self.dist.world_size}")
        set_rng_state(saved["rng"][self.dist.rank % len(saved["rng"])])  # last: the exact state saved

    def evaluate(self) -> dict[str, float]:
        """COCO AP of the current weights on the val split (``val_map``, ..., plus ``val_mask_*`` for masks)."""
        results = predict(self.model, self.loaders[1], self.categories, self.settings, self.dist)
        coco, ids = self.val_split.coco, self.val_split.image_ids
        row = {f"val_{k}": v for k, v in coco_ap(coco, results, ids).ap.items()}
        if self.cfg.model.detector == "maskrcnn":
            row |= {f"val_mask_{k}": v for k, v in coco_ap(coco, results, ids, "segm").ap.items()}
        return row

    def run_epoch(self) -> tuple[dict[str, float], float]:
        """Train and evaluate one epoch; return its metrics row and the training images/s."""
        epoch, start = self.state.epoch, time.perf_counter()
        train_loader = self.loaders[0]
        train_loader.sampler.set_epoch(epoch)
        desc = f"epoch {epoch + 1}/{self.cfg.train.epochs}"
        losses, self.state.step, rate = train_one_epoch(
            self.ddp_model, train_loader, self.optimizer, self.scheduler, self.state.step, self.settings,
            scaler=self.scaler, dist=self.dist, desc=desc, max_iters=self.cfg.train.max_iters,
        )  # fmt: skip
        row = {"epoch": epoch + 1, **losses, **self.evaluate(), "lr": current_lr(self.optimizer)}
        return row | {"epoch_time": time.perf_counter() - start}, rate * self.dist.world_size

    def save(self, row: dict[str, float], is_best: bool, rngs: list[dict[str, torch.Tensor]]) -> None:
        """Metrics, curves, weights, then the resume file (written last: it marks the epoch done)."""
        write_metrics(self.state.history, self.out / "metrics.csv")
        plot_curves(self.state.history, self.out / "curves.png")
        meta = weights_metadata(self.cfg, self.categories, int(row["epoch"]), row["val_map"])
        save_weights(self.out / "last.safetensors", self.model.state_dict(), meta)
        if is_best:
            save_weights(self.out / "best.safetensors", self.model.state_dict(), meta)
        save_resume(self.out / RESUME_FILE, self.resume_state(rngs))

    def fit(self) -> None:
        while self.state.epoch < self.cfg.train.epochs:
            row, rate = self.run_epoch()
            self.state.history.append(row)
            self.state.epoch += 1
            is_best = row["val_map"] > self.state.best_map or self.state.best_map < 0
            self.state.best_map = max(self.state.best_map, row["val_map"])
            rngs = all_gather_object(rng_state(), self.dist)
            if self.dist.is_main:
                self.save(row, is_best, rngs)
            log(self.dist, _summary(row, self.cfg.train.epochs, rate))
            barrier(self.dist)


def _summary(row: dict[str, float], epochs: int, rate: float) -> str:
    return (
        f"epoch {int(row['epoch'])}/{epochs}: train loss {row['train_loss']:.4f}, val AP {row['val_map']:.2f}, "
        f"AP50 {row['val_map50']:.2f}, AP75 {row['val_map75']:.2f}, lr {row['lr']:.2e}, "
        f"{row['epoch_time']:.1f} s ({rate:.1f} img/s)"
    )


def train_detector(cfg: DetConfig, resume: bool = False, overwrite: bool = False) -> Path:
    """Run (or continue) detection training as ``cfg`` describes; returns the output folder."""
    check_det_config(cfg)
    device = resolve_device(cfg.train.device, int(os.environ.get("LOCAL_RANK", "0")))
    dist = init_distributed(device)
    lock = None
    try:
        out, lock = prepare_output(cfg, resume, overwrite, dist)  # the folder stays locked for the run
        seed_everything(cfg.train.seed + dist.rank, cfg.train.deterministic)
        trainer = DetTrainer.build(cfg, dist, device, out)
        if dist.is_main:
            atomic_write(out / "config.yaml", lambda f: f.write(yaml.safe_dump(to_dict(cfg), sort_keys=False).encode()))
        if resume:
            trainer.load_resume(out / RESUME_FILE)
            log(dist, f"resumed from {out / RESUME_FILE} at epoch {trainer.state.epoch}")
        trainer.fit()
        _report(trainer, dist)
    finally:
        if lock is not None:
            lock.release()
        cleanup(dist)
    return out


def _report(trainer: DetTrainer, dist: DistInfo) -> None:
    out, state = trainer.out, trainer.state
    best = max(state.history, key=lambda r: r["val_map"])
    log(dist, f"done: best val AP {best['val_map']:.2f} (AP50 {best['val_map50']:.2f}) at epoch {int(best['epoch'])}")
    for name, what in (
        ("metrics.csv", "metrics"),
        ("curves.png", "curves"),
        ("best.safetensors", "best weights"),
        ("last.safetensors", "last weights"),
        (RESUME_FILE, "resume file"),
        ("config.yaml", "resolved config"),
    ):
        log(dist, f"  {what + ':':<16} {out / name}")
