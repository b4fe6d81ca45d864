"""A full training run: data, model, epochs, metrics and checkpoints in ``train.output_dir``.

Files in the output folder (written by rank 0, each atomically):
``config.yaml`` (resolved config), ``metrics.csv``, ``curves.png``, ``last.safetensors``,
``best.safetensors`` (best val top-1, of the weights ``train.best_of`` names), ``resume.pt`` (everything
``--resume`` needs; every ``train.save_every_steps`` steps too), ``scan.json.gz`` (the data scan), and
with ``train.ema_decay`` ``ema.safetensors`` and ``best_ema.safetensors``. The folder is locked
(``.lock``) for the whole run.
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
from ..weights import weights_metadata
from . import builders
from .checkpoint import load_resume, rng_state, save_resume, save_weights, set_rng_state
from .config import Config, apply_overrides, config_diff, flatten, to_dict
from .data import Split, build_datasets, build_loaders
from .demo_data import build_digits
from .distributed import (
    DistInfo,
    StalledRankError,
    all_gather_object,
    barrier,
    broadcast_object,
    cleanup,
    init_distributed,
    is_timeout,
    resolve_device,
    stalled_ranks,
)
from .engine import EpochPosition, StepSettings, current_lr, evaluate, train_one_epoch
from .lock import OutputLock
from .metrics import TensorBoardLog, plot_curves, write_csv
from .preflight import check_pretrained_available, check_training_options, class_warnings
from .scan_cache import CACHE_FILE, cached_scan

RESUME_FILE = "resume.pt"
_AMP = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class RunState:
    """What changes from epoch to epoch and goes into the resume file."""

    epoch: int = 0  # epoch in progress (0-based), or the next one to run
    step: int = 0  # optimizer steps taken
    batch: int = 0  # micro-batches of ``epoch`` done (non-zero after a step checkpoint inside the epoch)
    loss_sum: float = 0.0  # this process's summed training loss so far in ``epoch``
    count: int = 0  # this process's training images so far in ``epoch``
    best_top1: float = -1.0  # val top-1 of best.safetensors
    best_ema_top1: float = -1.0  # val top-1 of best_ema.safetensors
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


def prepare_output(cfg: Config, resume: bool, overwrite: bool, dist: DistInfo) -> tuple[Path, OutputLock | None]:
    """Lock the output folder (rank 0), check it against ``--resume``/``--overwrite``, warn about changed settings.

    Returns:
        The folder, and rank 0's lock on it (None on other ranks), to release when the run ends.
    """
    out = Path(cfg.train.output_dir)
    lock, problem = None, None
    if dist.is_main:
        lock = OutputLock(out)
        try:
            lock.acquire()
        except ValueError as e:
            problem = str(e)
    problem = broadcast_object(problem, dist)
    if problem is not None:
        raise ValueError(problem)
    try:
        if lock is not None and lock.stale:
            log(dist, f"note: {lock.path} was left by a run that ended without releasing it ({lock.stale}); taken over")
        _check_existing_run(out, cfg, resume, overwrite, dist)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    if dist.is_main:
        for stale in out.glob(".*.tmp*"):  # temp files of saves a kill interrupted; the real files are intact
            stale.unlink()
    return out, lock


def _check_existing_run(out: Path, cfg: Config, resume: bool, overwrite: bool, dist: DistInfo) -> None:
    if resume:
        if not (out / RESUME_FILE).is_file():
            raise ValueError(f"--resume: {out / RESUME_FILE} does not exist; nothing to resume")
        old = apply_overrides(type(cfg)(), flatten(yaml.safe_load((out / "config.yaml").read_text())))
        for change in config_diff(old, cfg):
            log(dist, f"warning: resuming with a changed setting {change}")
    elif (out / RESUME_FILE).is_file() and not overwrite:
        raise ValueError(
            f"{out} already holds a run; pass --resume to continue it, --overwrite to replace it, "
            "or --output-dir for a new one"
        )


def _prepare_data(cfg: Config, dist: DistInfo, out: Path) -> tuple[Any, Any, list[str], int]:
    """Rank 0 builds the demo data if asked and scans the folders once (or reads the scan it cached in ``out``);
    the other ranks get its result."""
    found: tuple[Split, Split] | str | None = None
    if dist.is_main:
        try:
            if cfg.data.dataset == "digits":
                build_digits(cfg.data.data_dir, size=cfg.data.img_size)
            found, from_cache = cached_scan(cfg.data, out)
            if from_cache:
                log(dist, f"data: scan read from {out / CACHE_FILE} (the class folders are unchanged)")
            for warning in class_warnings(found[0]):
                log(dist, f"warning: {warning}")
        except ValueError as e:
            found = str(e)
    found = broadcast_object(found, dist)
    if isinstance(found, str):
        raise ValueError(found)
    return build_datasets(cfg.data, found, cfg.train.seed)


def _weights_metadata(cfg: Config, classes: list[str], epoch: int, top1: float) -> dict[str, Any]:
    """Metadata of the raw weights (schema: ``swinlite.weights``); EMA files set ``"weights": "ema"``."""
    model_args: dict[str, Any] = {"num_classes": len(classes)}
    if cfg.model.drop_path_rate is not None:
        model_args["drop_path_rate"] = cfg.model.drop_path_rate
    size = cfg.data.img_size
    preprocessing = {
        "input_size": [3, size, size],
        "interpolation": cfg.data.interpolation,
        "mean": list(cfg.data.mean),
        "std": list(cfg.data.std),
        "crop_pct": cfg.data.crop_pct,
        "crop_mode": "center",  # build_transforms' eval transform
    }
    return weights_metadata(cfg.model.name, model_args, classes, preprocessing, "raw", epoch=epoch, val_top1=top1)


@dataclass
class Trainer:
    """The pieces of one run, built from a config by ``Trainer.build``."""

    cfg: Config
    dist: DistInfo
    out: Path
    model: nn.Module  # unwrapped: its state dict is what the weights files hold
    train_model: nn.Module  # ``model`` DDP-wrapped when multi-process, compiled with train.compile
    classes: list[str]
    loaders: tuple[Any, Any]
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    settings: StepSettings
    loss_fn: nn.Module
    mixup: Any
    ema: Any
    tensorboard: TensorBoardLog | None = None
    state: RunState = field(default_factory=RunState)

    @classmethod
    def build(cls, cfg: Config, dist: DistInfo, device: torch.device, out: Path) -> Trainer:
        train_ds, val_ds, classes, skipped = _prepare_data(cfg, dist, out)
        log(dist, f"data: {len(train_ds)} train / {len(val_ds)} val images, {len(classes)} classes, {skipped} skipped")
        loaders = build_loaders(train_ds, val_ds, cfg.data, cfg.train.seed, dist.rank, dist.world_size)
        model = builders.build_model(cfg.model, len(classes)).to(device)
        if cfg.train.channels_last:
            model = model.to(memory_format=torch.channels_last)
        train_model = nn.parallel.DistributedDataParallel(model) if dist.enabled else model
        if cfg.train.compile:
            train_model = torch.compile(train_model)
        global_batch = cfg.data.batch_size * dist.world_size * cfg.optim.accum_steps
        optimizer = builders.build_optimizer(model, cfg, global_batch)
        steps_per_epoch = -(-len(loaders[0]) // cfg.optim.accum_steps)
        mixup = builders.build_mixup(cfg.data, cfg.train.label_smoothing, len(classes))
        amp = _AMP[cfg.train.amp]
        if amp is torch.float16 and device.type != "cuda":
            raise ValueError("train.amp=fp16 needs CUDA; use train.amp=bf16 on CPU")
        settings = StepSettings(
            device, amp, cfg.optim.accum_steps, cfg.optim.clip_grad, cfg.train.log_interval, cfg.train.channels_last
        )
        return cls(
            cfg=cfg,
            dist=dist,
            out=out,
            model=model,
            train_model=train_model,
            classes=classes,
            loaders=loaders,
            optimizer=optimizer,
            scheduler=builders.build_scheduler(optimizer, cfg, steps_per_epoch),
            scaler=torch.amp.GradScaler(device.type, enabled=amp is torch.float16),
            settings=settings,
            loss_fn=builders.build_loss(mixup, cfg.train.label_smoothing),
            mixup=mixup,
            ema=builders.build_ema(model, cfg.train.ema_decay),
        )

    def resume_state(self, per_process: list[dict[str, Any]]) -> dict[str, Any]:
        """What ``--resume`` needs; ``per_process`` holds every process's RNG state and loss sums."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "ema": None if self.ema is None else self.ema.state_dict(),
            "epoch": self.state.epoch,
            "step": self.state.step,
            "batch": self.state.batch,
            "best_top1": self.state.best_top1,
            "best_ema_top1": self.state.best_ema_top1,
            "history": self.state.history,
            "rng": [p["rng"] for p in per_process],  # one per process
            "partial": [p["partial"] for p in per_process],  # (loss sum, images) of the epoch in progress
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
        saved_world = len(saved["rng"])
        batch = saved.get("batch", 0)
        if saved_world != self.dist.world_size:
            log(self.dist, f"warning: saved with {saved_world} processes, resuming with {self.dist.world_size}")
            if batch:
                log(self.dist, "warning: the step checkpoint's epoch restarts from its beginning")
                batch = 0
        loss_sum, count = saved["partial"][self.dist.rank] if batch else (0.0, 0)
        self.state = RunState(
            saved["epoch"], saved["step"], batch, loss_sum, count,
            saved["best_top1"], saved.get("best_ema_top1", -1.0), saved["history"],
        )  # fmt: skip
        if self.tensorboard is not None:  # drop the events a killed run wrote after this point
            self.tensorboard.close()
            self.tensorboard = TensorBoardLog(self.out, purge_step=self.state.step)
        set_rng_state(saved["rng"][self.dist.rank % saved_world])  # last: the exact state saved

    def _on_step(self, position: EpochPosition) -> None:
        """After each optimizer step: TensorBoard, and a step checkpoint every ``train.save_every_steps`` steps."""
        state = self.state
        state.step, state.batch, state.loss_sum, state.count = (
            position.step, position.batch, position.loss_sum, position.count
        )  # fmt: skip
        if self.tensorboard is not None and position.step % self.cfg.train.log_interval == 0:
            self.tensorboard.step(position.step, position.loss_sum / position.count, current_lr(self.optimizer))
        every = self.cfg.train.save_every_steps
        batches = self.loaders[0].sampler.num_samples // self.cfg.data.batch_size  # micro-batches per epoch
        if every and position.step % every == 0 and position.batch < batches:  # the epoch's end saves anyway
            per_process = all_gather_object({"rng": rng_state(), "partial": (state.loss_sum, state.count)}, self.dist)
            if self.dist.is_main:
                save_resume(self.out / RESUME_FILE, self.resume_state(per_process))

    def run_epoch(self) -> dict[str, float]:
        """Train (from the step checkpoint's position, if any) and evaluate one epoch; return its metrics row."""
        state, start = self.state, time.perf_counter()
        train_loader, val_loader = self.loaders
        train_loader.sampler.set_epoch(state.epoch, start=state.batch * self.cfg.data.batch_size)
        position = EpochPosition(state.batch, state.step, state.loss_sum, state.count)
        desc = f"epoch {state.epoch + 1}/{self.cfg.train.epochs}"
        train_loss, rate = train_one_epoch(
            self.train_model, train_loader, self.loss_fn, self.optimizer, self.scheduler, position, self.settings,
            scaler=self.scaler, mixup=self.mixup, ema=self.ema, dist=self.dist, desc=desc, on_step=self._on_step,
        )  # fmt: skip
        state.step = position.step
        result = evaluate(self.train_model, val_loader, len(self.classes), self.settings, self.dist)
        topk = f"val_top{result.k}"
        row = {"epoch": state.epoch + 1, "train_loss": train_loss, "val_loss": result.loss, "val_top1": result.top1}
        row |= {topk: result.top5} if result.k > 1 else {}
        row |= {"lr": current_lr(self.optimizer)}
        row |= {"epoch_time": time.perf_counter() - start, "train_img_s": rate * self.dist.world_size}
        if self.ema is not None:
            ema = evaluate(self.ema.module, val_loader, len(self.classes), self.settings, self.dist)
            row |= {"val_loss_ema": ema.loss, "val_top1_ema": ema.top1}
            row |= {f"{topk}_ema": ema.top5} if result.k > 1 else {}
        return row

    def _best_candidate(self, row: dict[str, float]) -> tuple[str, float] | None:
        """The weights best.safetensors should now hold, by ``train.best_of``, or None when it stays.

        ``raw``: the trained weights by their val top-1; ``ema``: the EMA weights by theirs; ``both``: whichever
        of the two has the higher val top-1 (raw on a tie). The file changes when that top-1 beats its own.
        """
        best_of = self.cfg.train.best_of if self.ema is not None else "raw"
        candidates = []
        if best_of in ("raw", "both"):
            candidates.append(("raw", row["val_top1"]))
        if best_of in ("ema", "both"):
            candidates.append(("ema", row["val_top1_ema"]))
        kind, top1 = max(candidates, key=lambda c: c[1])  # max keeps the first (raw) on a tie
        return (kind, top1) if top1 > self.state.best_top1 else None

    def save(self, row: dict[str, float], best: tuple[str, float] | None, per_process: list[dict[str, Any]]) -> None:
        """Metrics, curves, weights, then the resume file (written last: it marks the epoch done)."""
        write_csv(self.state.history, self.out / "metrics.csv")
        plot_curves(self.state.history, self.out / "curves.png")
        epoch = int(row["epoch"])
        weights = {"raw": (self.model.state_dict(), _weights_metadata(self.cfg, self.classes, epoch, row["val_top1"]))}
        if self.ema is not None:
            ema_meta = _weights_metadata(self.cfg, self.classes, epoch, row["val_top1_ema"])
            weights["ema"] = (self.ema.module.state_dict(), {**ema_meta, "weights": "ema"})
        save_weights(self.out / "last.safetensors", *weights["raw"])
        if self.ema is not None:
            save_weights(self.out / "ema.safetensors", *weights["ema"])
            if row["val_top1_ema"] > self.state.best_ema_top1:
                self.state.best_ema_top1 = row["val_top1_ema"]
                save_weights(self.out / "best_ema.safetensors", *weights["ema"])
        if best is not None:
            save_weights(self.out / "best.safetensors", *weights[best[0]])
        save_resume(self.out / RESUME_FILE, self.resume_state(per_process))

    def fit(self) -> None:
        while self.state.epoch < self.cfg.train.epochs:
            row = self.run_epoch()
            self.state.history.append(row)
            self.state.epoch += 1
            self.state.batch, self.state.loss_sum, self.state.count = 0, 0.0, 0
            best = self._best_candidate(row)
            if best is not None:
                self.state.best_top1 = best[1]
            per_process = all_gather_object({"rng": rng_state(), "partial": (0.0, 0)}, self.dist)
            if self.dist.is_main:
                self.save(row, best, per_process)
                if self.tensorboard is not None:
                    self.tensorboard.epoch(row)
            log(self.dist, _summary(row, self.cfg.train.epochs))
            barrier(self.dist)


def _summary(row: dict[str, float], epochs: int) -> str:
    topk = next((key for key in row if key.startswith("val_top") and key[7:].isdigit() and key != "val_top1"), None)
    text = f"epoch {int(row['epoch'])}/{epochs}: train loss {row['train_loss']:.4f}, val loss {row['val_loss']:.4f}, "
    text += f"top-1 {row['val_top1']:.2f}%, " + (f"top-{topk[7:]} {row[topk]:.2f}%, " if topk else "")
    text += f"lr {row['lr']:.2e}, {row['epoch_time']:.1f} s ({row['train_img_s']:.0f} img/s)"
    if "val_top1_ema" in row:
        text += f", EMA top-1 {row['val_top1_ema']:.2f}%"
    return text


def train(cfg: Config, resume: bool = False, overwrite: bool = False) -> Path:
    """Run (or continue) training as ``cfg`` describes; returns the output folder.

    Raises:
        ValueError: a setting, the data or the output folder cannot work (before training starts).
        StalledRankError: multi-process: a collective waited ``train.dist_timeout`` s for a process that stalled.
    """
    builders.check_config(cfg)
    check_training_options(cfg)
    check_pretrained_available(cfg.model)
    device = resolve_device(cfg.train.device, int(os.environ.get("LOCAL_RANK", "0")))
    dist = init_distributed(device, cfg.train.dist_timeout)
    lock, trainer = None, None
    try:
        out, lock = prepare_output(cfg, resume, overwrite, dist)
        seed_everything(cfg.train.seed + dist.rank, cfg.train.deterministic)
        trainer = Trainer.build(cfg, dist, device, out)
        if dist.is_main:
            if cfg.train.tensorboard:
                trainer.tensorboard = TensorBoardLog(out)
            atomic_write(out / "config.yaml", lambda f: f.write(yaml.safe_dump(to_dict(cfg), sort_keys=False).encode()))
        if resume:
            trainer.load_resume(out / RESUME_FILE)
            where = f"epoch {trainer.state.epoch}" + (f", step {trainer.state.step}" if trainer.state.batch else "")
            log(dist, f"resumed from {out / RESUME_FILE} at {where}")
        trainer.fit()
        _report(trainer, dist)
    except RuntimeError as e:
        if dist.enabled and is_timeout(e):
            raise _stall_error(dist, cfg.train.dist_timeout) from e
        raise
    finally:
        if trainer is not None and trainer.tensorboard is not None:
            trainer.tensorboard.close()
        if lock is not None:
            lock.release()
        cleanup(dist)
    return out


def _stall_error(dist: DistInfo, timeout: float) -> StalledRankError:
    """Name the stalled process(es) after a collective timed out on this one."""
    stalled = stalled_ranks(dist, wait=min(30.0, timeout))
    waited = f"a collective waited train.dist_timeout={timeout:g} s"
    if stalled is None:
        return StalledRankError(f"rank {dist.rank}: {waited}; rank 0 names the stalled process, or is it")
    if not stalled:
        return StalledRankError(f"rank {dist.rank}: {waited}, yet every process answers now; see the other ranks")
    names = ", ".join(str(r) for r in stalled)
    return StalledRankError(f"rank {names} stopped progressing ({waited} for it on rank {dist.rank}); stopping")


def _report(trainer: Trainer, dist: DistInfo) -> None:
    out, state = trainer.out, trainer.state
    log(dist, f"done: best val top-1 {state.best_top1:.2f}%")
    files = [("metrics.csv", "metrics"), ("curves.png", "curves"), ("best.safetensors", "best weights")]
    files += [("last.safetensors", "last weights")]
    if trainer.ema is not None:
        files += [("best_ema.safetensors", "best EMA weights"), ("ema.safetensors", "last EMA weights")]
    files += [(RESUME_FILE, "resume file"), ("config.yaml", "resolved config")]
    for name, what in files:
        log(dist, f"  {what + ':':<18} {out / name}")
