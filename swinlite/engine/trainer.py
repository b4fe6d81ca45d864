"""One run of a task: the pieces built from its config, the epochs, best-of raw/EMA, the files, resuming.

Files in the output folder (written by rank 0, each atomically): ``config.yaml`` (resolved config),
``metrics.csv``, ``curves.png``, ``last.safetensors``, ``best.safetensors`` (best of the task's metric, of the
weights ``train.best_of`` names), ``resume.pt`` (everything ``--resume`` needs; every ``train.save_every_steps``
steps too), with ``train.ema_decay`` ``ema.safetensors`` and ``best_ema.safetensors``, with
``train.tensorboard`` the event files, and the task's own (``Task.output_files``). The best weights files follow the
resume file's history: new ones wait under a pending name until it is written (``checkpoint.pending``), and the
TensorBoard events of an epoch are written before it, so that a kill at any moment loses nothing of what it records;
what a kill left written past it is brought back to it on resume. An evaluate script's results beside weights a save
replaces are removed before it (``checkpoint.clear_evaluation``): they describe the weights that go.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import numbers
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from timm.scheduler.scheduler import Scheduler
from timm.utils import ModelEmaV3
from torch import nn
from tqdm import tqdm

from .. import __version__
from ..convert import first_keys
from ..device import autocast_dtype, load_compiler_quietly
from ..inference import eval_mode
from ..io import read_metadata
from ..metadata import FORMAT, with_normalization
from ..weights import state_dict_mismatch
from ..wording import counted
from .checkpoint import (
    OUTPUT_DIR,
    RESUME_FILE,
    clear_evaluation,
    complete_pending,
    epoch_end,
    keep_linked,
    load_resume,
    non_finite,
    pending,
    resume_rng,
    rng_state,
    save_resume,
    save_weights,
    writing,
)
from .config import apply_overrides, flatten, read_yaml, to_dict
from .distributed import (
    DistInfo,
    SharedError,
    all_answer,
    all_gather_object,
    barrier,
    broadcast_object,
    evaluate_in_step,
    is_timeout,
    peer_gone,
    refused_alike,
    share_buffers,
)
from .handshake import check_same_data
from .loaders import batches_per_epoch, build_loaders
from .loop import (
    EpochPosition,
    StepSettings,
    TrainingDiverged,
    current_lr,
    diverged_alike,
    epoch_steps,
    running_loss,
    train_one_epoch,
)
from .metrics import ENGINE_COLUMNS, TensorBoardLog, plot_curves, write_csv
from .model import with_grad_checkpointing
from .optim import (
    build_optimizer,
    build_scheduler,
    check_loss_scaling,
    group_names,
    lr_scale,
    regrouped,
    regrouped_by_name,
    warn_long_accumulation,
    warn_short_batch,
)
from .progress import is_logged
from .task import RunContext, Task
from .val_content import as_python, content_change, fingerprint

WEIGHTS_FILES = ("last.safetensors", "best.safetensors", "ema.safetensors", "best_ema.safetensors")
LAST_FILES = {"raw": "last.safetensors", "ema": "ema.safetensors"}  # each epoch's weights, of either kind
BEST_FILES = ("best.safetensors", "best_ema.safetensors")  # written through a pending name (``checkpoint.pending``)
# what a parameter group holds that is not the config's: its parameters, the lr the scheduler sets before each step,
# and the step counters some optimizers keep per group (timm's Adan and Lamb, Lookahead)
GROUP_STATE = ("params", "lr", "step", "lookahead_step")
ADVICE = "try a lower optim.lr, or optim.clip_grad"
# the settings the lr schedule is laid out from (its length in steps, warm-up, lrs and decay), and what a schedule that
# differs from the saved one without any of them changed comes from
SCHEDULE_SETTINGS = ("train.epochs", "train.max_iters", "data.batch_size", "optim.accum_steps", "optim.lr", "schedule.")
PER_GROUP = ("base_values", "warmup_steps")  # what a timm scheduler's state holds one value of per parameter group
STEPS_SETTINGS = ("train.max_iters", "data.batch_size", "optim.accum_steps")  # those of them the steps per epoch follow
SCHEDULE_UNKNOWN_CAUSE = (
    "changed settings, or the run was saved by a swinlite that did not scale schedule.warmup_lr / min_lr with "
    "optim.lr_base_batch"
)
VAL_SET_KEYS = ("data.data_dir", "data.dataset")  # with each "data.val_*" key a task has: what picks its val set
VAL_PREFIX = "data.val_"  # a task's val set paths (data.val_ann, data.val_images, ...); None: under data.data_dir
PATH_KEYS = ("data.data_dir", "train.output_dir", "model.pretrained")  # settings that name a path (when text), with
PATH_PREFIXES = ("data.train_", VAL_PREFIX)  # a task's own data paths (a tuple there, data.train_sizes, is no path)


# seconds a process whose evaluation failed waits for the others' to fail too (all failed: the trained epoch is saved);
# past it, it failed alone and ends, which ends the others (their evaluation's collective fails as it exits)
# (a diverged process waits as long for the others' divergence: said once, else by its rank)
EVALUATED_ALIKE_WAIT = 30.0


class EvaluationFailed(ValueError):
    """Evaluation raised after an epoch was trained; the trained epoch is in resume.pt."""


class SharedEvaluationFailure(EvaluationFailed, SharedError):
    """Every process's evaluation failed after the same trained epoch, which rank 0 saved: rank 0 alone says it, every
    process exits with code 2."""


def _misfit(path: Path, what: str, reason: str) -> ValueError:
    """The error of a resume file whose ``what`` (model, optimizer) does not load into this run's."""
    return ValueError(
        f"{path} does not fit this run's {what} ({reason}); resume with the run's own settings, or start over with "
        "--overwrite"
    )


def score_text(score: float, task: Task) -> str:
    """A best score as the log lines print it: in the task's :attr:`~swinlite.engine.task.Task.metric_format`."""
    return format(score, task.metric_format)


def check_metadata(task: Task) -> None:
    """ValueError naming the value of ``task.weights_metadata()`` that JSON cannot hold (a NumPy float), which the
    weights files' metadata is stored as: said before the first epoch, rather than by a TypeError at its save."""
    for key, value in task.weights_metadata().items():
        try:
            json.dumps(value)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"{type(task).__name__}.weights_metadata() returned {key}={value!r} ({type(value).__name__}), which "
                f"a weights file's metadata (JSON) cannot hold ({e}); return Python numbers, text, lists and dicts"
            ) from None


def as_score(key: str, value: Any, evaluate: str) -> float:
    """The score ``key`` a task's evaluate returned (``evaluate``: its name, ``BrightnessTask.evaluate()``) as a float:
    a Python or NumPy real number, or a 0-d tensor of one (a tensor failed the first save: the weights' metadata is
    JSON).

    Raises:
        ValueError: any other value, or a key that is one of the engine's columns (:data:`ENGINE_COLUMNS`, ``loss_*``),
            which it would replace in the metrics.
    """
    if key in ENGINE_COLUMNS or key.startswith("loss_"):
        raise ValueError(
            f"{evaluate} returned {key!r}, a column of the engine's metrics ({', '.join(ENGINE_COLUMNS)}, and the "
            "training loss's parts loss_*): name its metrics val_*"
        )
    number = as_python(value)
    if not isinstance(number, numbers.Real):
        raise ValueError(
            f"{evaluate} returned {key}={value!r} ({type(value).__name__}): expected a real number (a Python or NumPy "
            "number, or a 0-d tensor)"
        )
    return float(number)


def check_reduced(per_process: list[dict[str, float]], evaluate: str) -> None:
    """ValueError naming each process's value of the first score that differs between them (``per_process``: each
    one's scores, by rank): ``evaluate`` scored its own shard of the val set, and the run kept rank 0's. Compared
    exactly: a value all-reduced is the same on every process (NaN equals NaN)."""

    def same(a: float | None, b: float | None) -> bool:
        return a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b))

    for key in dict.fromkeys(key for scores in per_process for key in scores):  # (None: a process returned none)
        values = [scores.get(key) for scores in per_process]
        if not all(same(v, values[0]) for v in values):
            each = ", ".join(f"{v!r} on rank {rank}" for rank, v in enumerate(values))
            raise ValueError(
                f"{evaluate} must reduce its metrics over processes: {key} is {each}; combine each process's sums "
                "before returning (swinlite.engine.distributed.all_reduce_sum)"
            )


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode (no dropout nor drop-path, BatchNorm's running statistics) and no autograd, for a task's
    ``evaluate``; each of its modules in its own mode as it was after (:func:`~swinlite.inference.eval_mode`)."""
    with eval_mode(model), torch.no_grad():
        yield


def best_candidate(scores: dict[str, float], best: float) -> tuple[str, float] | None:
    """(weights, score) of the highest of ``scores`` (e.g. ``{"raw": 71.5, "ema": 72.0}``) when it beats ``best``,
    else None; the first listed wins a tie. A NaN (an evaluation that scored nothing) never wins: not over the
    other weights' number, not over an earlier epoch's."""
    scored = [(kind, score) for kind, score in scores.items() if not math.isnan(score)]
    if not scored:
        return None
    kind, score = max(scored, key=lambda c: c[1])  # max keeps the first on a tie
    return (kind, score) if score > best else None


def val_set(cfg: Any) -> dict[str, Any]:
    """The settings that pick the validation set the best scores are of, by key, its paths resolved: ``data.dataset``
    in every task, a task's ``data.val_*`` paths (detection's annotations and images, segmentation's images and
    masks), and ``data.data_dir`` where the set lies under it (a task without such paths: classification's DIR/val;
    one of them left None). Scores on two sets do not compare; one folder named two ways (``cls/``, ``./cls``, its
    absolute path) is one set, and a relative path given from another working directory another."""
    chosen = {k: v for k, v in flatten(to_dict(cfg)).items() if k in VAL_SET_KEYS or k.startswith(VAL_PREFIX)}
    paths = [v for k, v in chosen.items() if k.startswith(VAL_PREFIX)]
    if paths and None not in paths:  # the explicit paths are the whole set: data.data_dir picks none of it
        del chosen["data.data_dir"]
    return {k: as_compared(k, v) for k, v in chosen.items()}


def as_compared(key: str, value: Any) -> Any:
    """A setting's ``value`` as a resume compares it with the run's: a path (the text of a :data:`PATH_KEYS` key or
    of a task's data path, :data:`PATH_PREFIXES`) absolute, without ``~``, ``..`` or links, so that ``data/``,
    ``./data`` and its absolute path are one folder; any other value as it is."""
    return str(Path(value).expanduser().resolve()) if names_path(key, value) else value


def names_path(key: str, value: Any) -> bool:
    """Whether setting ``key``'s ``value`` names a path (the text of a :data:`PATH_KEYS` or :data:`PATH_PREFIXES`
    key)."""
    return isinstance(value, str) and (key in PATH_KEYS or key.startswith(PATH_PREFIXES))


def home_expanded(cfg: Any) -> Any:
    """``cfg`` with a leading ``~`` of each path setting (:func:`names_path`) expanded, as a shell expands it in an
    argument of its own: ``train.output_dir=~/runs`` reaches the script unexpanded (bash expands ``~`` after ``=``
    only where the key is a shell name), and made a folder named ``~`` in the working directory."""
    home = {k: os.path.expanduser(v) for k, v in flatten(to_dict(cfg)).items() if names_path(k, v) and v[:1] == "~"}
    return apply_overrides(cfg, home) if home else cfg


def rooted(settings: dict[str, Any], cwd: str | None) -> dict[str, Any]:
    """Flattened ``settings`` with each relative path (a :func:`as_compared` key's text) joined to ``cwd``, the working
    directory the run was given them in; ``cwd`` None (a resume file from before it was saved): as they are, to be
    resolved against this directory."""
    if cwd is None:
        return settings
    return {k: str(Path(cwd) / Path(v).expanduser()) if names_path(k, v) else v for k, v in settings.items()}


def recorded_config(out: Path, cwd: str | None, defaults: Any) -> Any:
    """``defaults`` with the settings ``out/config.yaml`` records, each relative path joined to ``cwd``
    (:func:`rooted`).

    Raises:
        ValueError: the file cannot be read, or holds a setting this config does not take.
    """
    return apply_overrides(defaults, rooted(flatten(read_yaml(out / "config.yaml")), cwd))


def saved_config(saved: dict[str, Any], out: Path, defaults: Any) -> Any:
    """``defaults`` with the settings the resume file's state ``saved`` was trained with, each relative path joined to
    the working directory it was saved in: those it records (not ``config.yaml``'s, which a resume killed or diverged
    before its first save rewrote with settings the state was never trained with); of a file from before it recorded
    them, those of ``out/config.yaml`` (:func:`recorded_config`). A resumed run's state records
    ``model.pretrained=false`` (:func:`~swinlite.engine.run.built_from_resume`).

    Raises:
        ValueError: ``config.yaml`` cannot be read, or a setting is one this config does not take.
    """
    if "config" not in saved:
        return recorded_config(out, saved.get("cwd"), defaults)
    return apply_overrides(defaults, rooted(saved["config"], saved.get("cwd")))


def val_set_changes(saved: dict[str, Any], cfg: Any) -> list[str]:
    """``key: old -> new`` of each :func:`val_set` setting of ``cfg`` that differs from ``saved`` (a resume file's
    record of it; a file from before paths were resolved records them as given, resolved here)."""
    old = {k: as_compared(k, v) for k, v in saved.items()}
    return [f"{k}: {old.get(k)} -> {v}" for k, v in val_set(cfg).items() if old.get(k) != v]


def scored_epoch(history: list[dict[str, float]], keys: tuple[str, ...], best: float) -> tuple[int, str] | None:
    """(epoch, key) of the first row of ``history`` whose score under one of ``keys`` is ``best``, or None."""
    return next(((int(r["epoch"]), k) for r in history for k in keys if r.get(k) == best), None)


def schedule_of(state: dict[str, Any]) -> dict[str, Any]:
    """A timm scheduler's ``state_dict()`` as the schedule it lays out, whatever the number of parameter groups it
    sets: its lists of one value per group (:data:`PER_GROUP`) cut to their distinct values (every group starts from
    ``optim.lr``; layer decay scales a group's lr by its ``lr_scale`` as the scheduler sets it). Compared whole, the
    groups that ``optim.layer_decay`` turned on or off at ``--resume`` read as a changed schedule."""
    return {k: list(dict.fromkeys(v)) if k in PER_GROUP else v for k, v in state.items()}


def scheduled_lr(scheduler: Scheduler, state: dict[str, Any], step: int) -> float | None:
    """The largest lr (over parameter groups) that ``scheduler``'s kind laid out as ``state`` (a ``state_dict()``)
    sets for optimizer step ``step`` (0-based, as ``step_update`` counts); None for the state of another kind, or a
    timm whose schedulers no longer have ``_get_lr`` (private: a warning's figure must not stop a resume)."""
    if state.keys() != scheduler.state_dict().keys() or not hasattr(scheduler, "_get_lr"):
        return None
    laid_out = copy.copy(scheduler)
    laid_out.__dict__.update(state)
    return max(laid_out._get_lr(step))


def epoch_line(row: dict[str, float | None], epochs: int, summary: str) -> str:
    """The line logged at an epoch's end of its metrics ``row`` (``summary``: the task's scores): its rate, or that it
    was trained before the resume (``train_img_s`` None)."""
    rate = row["train_img_s"]
    speed = "trained before the resume" if rate is None else f"{rate:.1f} img/s"
    return (
        f"epoch {int(row['epoch'])}/{epochs}: train loss {row['train_loss']:.4f}, {summary}, lr {row['lr']:.2e}, "
        f"{row['epoch_time']:.1f} s ({speed})"
    )


def build_ema(model: nn.Module, decay: float | None, warmup: bool) -> ModelEmaV3 | None:
    """timm's EMA of ``model`` at ``decay`` (None: no EMA). ``warmup``: timm's warm-up, the decay at optimizer step
    ``n`` of the run (``loop.train_one_epoch`` passes the run's count, a resume's included) ``1 - n ** (-2/3)`` up to
    ``decay``: without it 0.9998 keeps ~80 % of the initial weights after 1200 steps (0.9998 ** 1200 ≈ 0.79)."""
    return None if decay is None else ModelEmaV3(model, decay=decay, use_warmup=warmup)


@dataclass
class RunState:
    """What changes from epoch to epoch and goes into the resume file."""

    epoch: int = 0  # epoch in progress (0-based), or the next one to run
    step: int = 0  # optimizer steps taken
    batch: int = 0  # micro-batches of ``epoch`` done (non-zero after a step checkpoint inside the epoch)
    sums: dict[str, float] = field(default_factory=dict)  # this process's summed training losses so far in ``epoch``
    count: int = 0  # this process's training samples so far in ``epoch``
    seconds: float = 0.0  # wall time spent on ``epoch`` before this process took it up (a killed run's, resumed)
    best: float = -math.inf  # the task's metric of best.safetensors
    best_ema: float = -math.inf  # the task's metric of best_ema.safetensors
    history: list[dict[str, float]] = field(default_factory=list)
    # the epoch whose weights best.safetensors holds (None: none yet, or none since the val set changed): a score
    # equal to ``best`` in an earlier row may be of the old val set
    best_epoch: int | None = None


class Trainer:
    """The pieces of one run of ``task`` as ``cfg`` describes it; ``fit`` runs the epochs."""

    def __init__(self, task: type[Task], cfg: Any, dist: DistInfo, device: torch.device, out: Path) -> None:
        amp = autocast_dtype(cfg.train.amp, device, option="train.amp")
        check_loss_scaling(cfg.optim, amp)
        self.cfg, self.dist, self.out, self.state = cfg, dist, out, RunState()
        self.settings = StepSettings(
            device, amp, cfg.optim.accum_steps, cfg.optim.clip_grad, cfg.train.log_interval, cfg.train.channels_last
        )
        self.task = task(RunContext(cfg, device, dist, out, self.settings))
        with refused_alike(dist):  # every process checks the data it read alike: its refusal is said once
            train_ds, val_ds = self.task.build_datasets()
        check_same_data(len(train_ds), len(val_ds), dist)  # before the loaders: their checks depend on the sizes
        with refused_alike(dist):  # what the val set holds (rank 0's, so that every process restarts the best alike)
            content = fingerprint(self.task.val_samples(val_ds)) if dist.is_main else None
        self.val_content = broadcast_object(content, dist)
        self.loaders = build_loaders(
            train_ds, val_ds, cfg.data, cfg.train.seed, dist, device, self.task.collate, self.task.drop_last
        )
        self.batches = batches_per_epoch(self.loaders[0], cfg.train.max_iters, cfg.optim.accum_steps)
        warn_long_accumulation(cfg.optim, self.batches)
        warn_short_batch(cfg.optim, cfg.data.batch_size, math.ceil(len(train_ds) / dist.world_size))
        model = self.task.build_model().to(device)
        if cfg.model.grad_checkpointing:
            with refused_alike(dist):  # every process built the same model: its refusal is said once
                with_grad_checkpointing(model)
        self.model = model.to(memory_format=torch.channels_last) if cfg.train.channels_last else model
        self.train_model = nn.parallel.DistributedDataParallel(self.model) if dist.enabled else self.model
        if cfg.train.compile:
            load_compiler_quietly()
            self.train_model = torch.compile(self.train_model)
        global_batch = cfg.data.batch_size * dist.world_size * cfg.optim.accum_steps
        self.optimizer = build_optimizer(self.model, cfg.optim, global_batch)
        self.steps_per_epoch = epoch_steps(self.batches, cfg.optim.accum_steps)
        scale = lr_scale(cfg.optim, global_batch)
        self.scheduler = build_scheduler(self.optimizer, cfg.schedule, cfg.train.epochs, self.steps_per_epoch, scale)
        self.scaler = torch.amp.GradScaler(device.type, enabled=amp is torch.float16)
        self.ema = build_ema(self.model, cfg.train.ema_decay, cfg.train.ema_warmup)
        self.tensorboard = TensorBoardLog(out) if cfg.train.tensorboard and dist.is_main else None
        self.epoch_start = time.perf_counter()  # when the epoch in progress began, less ``state.seconds``
        self.compile_pending = cfg.train.compile  # until the first step's time, which compiles the model, is said
        self.compile_start = 0.0  # when this process's first epoch began
        # the step of the epoch in progress that resume.pt holds a step checkpoint of (None: it holds an epoch's end,
        # or nothing), and whether the last epoch's end is kept beside it (``checkpoint.epoch_end``)
        self.checkpoint_step: int | None = None
        self.epoch_end_kept = False

    def log(self, message: str) -> None:
        self.task.ctx.log(message)

    def resume_state(self, per_process: list[dict[str, Any]]) -> dict[str, Any]:
        """What ``--resume`` needs; ``per_process`` holds every process's RNG state and loss sums."""
        return {
            "task": self.task.name,
            "task_state": self.task.state(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "param_names": group_names(self.model, self.optimizer),  # what --resume regroups the optimizer's state by
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "ema": None if self.ema is None else self.ema.state_dict(),
            "epoch": self.state.epoch,
            "step": self.state.step,
            "batch": self.state.batch,
            # the time spent on the epoch in progress: a resumed epoch's epoch_time counts it, as Lightning's Timer
            # counts the time before a kill (not the time between it and the resume)
            "seconds": time.perf_counter() - self.epoch_start if self.state.batch else 0.0,
            "micro_batch": [self.cfg.data.batch_size, self.cfg.optim.accum_steps],  # what ``batch`` counts
            "order": self.loaders[0].sampler.order,  # what the order ``batch`` is in is shuffled from
            "best": self.state.best,
            "best_ema": self.state.best_ema,
            "best_epoch": self.state.best_epoch,
            "val_set": val_set(self.cfg),  # what the best scores are of
            "val_content": self.val_content,  # and what it held: its samples' files and labels (val_content)
            "cwd": str(Path.cwd()),  # what the relative paths of config.yaml are relative to
            # what the schedule was laid out from (config.yaml is rewritten by a resume before it saves anything)
            "config": flatten(to_dict(self.cfg)),
            "steps_per_epoch": self.steps_per_epoch,
            "history": self.state.history,
            "rng": [p["rng"] for p in per_process],  # one per process
            "partial": [p["partial"] for p in per_process],  # (loss sums, samples) of the epoch in progress
        }

    def load_resume(self, path: Path) -> None:
        """Continue from ``path``; ValueError naming it when it does not fit this run (another task, model, data, a
        position past the end of this run's epochs), under torchrun a SharedError that rank 0 alone says (every
        process reads the same file into the same model: each said it)."""
        with refused_alike(self.dist):
            saved = load_resume(path, self.task.name)
            self.task.check_resumed(saved.get("task_state", {}), path)
            batch = self._resumed_batch(saved, path)
            self._load_states(saved, path)
        sums, count = saved["partial"][self.dist.rank] if batch else ({}, 0)
        if saved["batch"]:  # a step checkpoint (of its own micro-batches), even where this run restarts its epoch
            saved_accum = saved.get("micro_batch", [0, self.cfg.optim.accum_steps])[1]
            self.checkpoint_step = epoch_steps(saved["batch"], saved_accum)
            self.epoch_end_kept = epoch_end(path).is_file()
        seconds = saved.get("seconds", 0.0) if batch else 0.0  # (a file from before "seconds" was saved: none)
        # the step this run's schedule counts at the position (another world size or max_iters counts other steps
        # per epoch: the saved step would put the lr elsewhere, past the schedule's end when larger)
        step = saved["epoch"] * self.steps_per_epoch + epoch_steps(batch, self.cfg.optim.accum_steps)
        self.state = RunState(
            saved["epoch"], step, batch, dict(sums), count, seconds, saved["best"], saved["best_ema"], saved["history"]
        )
        self.state.best_epoch = saved["best_epoch"] if "best_epoch" in saved else self._first_best_epoch()
        # e.g. a raised train.epochs (not the parameter groups alone)
        if schedule_of(saved["scheduler"]) != schedule_of(self.scheduler.state_dict()):
            self.log(self._schedule_change(saved))
        if self.state.epoch < self.cfg.train.epochs:  # only where an evaluation follows (nothing is scored else)
            # (a file from before they were saved: this run's settings, its content not compared)
            self._restart_best(saved.get("val_set", val_set(self.cfg)), saved.get("val_content"))
        if self.tensorboard is not None:  # drop the events a killed run wrote after this point: those of later steps;
            # of an epoch saved trained but not evaluated, its row too, logged at its last step (whose scalars return)
            evaluated = batch < self.batches
            with self._saving_in_epoch():
                self.tensorboard.open(purge_step=step + 1 if evaluated else step)  # a full disk: as a save's
            if not evaluated:
                self._log_step()
        if self.dist.is_main:
            self._restore_files()
        # last: the exact state saved
        resume_rng(saved["rng"], self.dist.rank, self.cfg.train.seed, saved["step"], self.settings.device)

    def _restart_best(self, saved: dict[str, Any], content: dict[str, Any] | None) -> None:
        """Restart the best scores when this run validates on another set than the one they are of (``saved``, the
        resume file's :func:`val_set`; ``content``, its fingerprint of the files, :mod:`.val_content`): a score of the
        new set is no better or worse than one of the old, yet it replaced best.safetensors when higher, and was passed
        over when lower. The next evaluation's weights become the best, said in a note naming the old scores."""
        changed = val_set_changes(saved, self.cfg)
        files = content_change(content, self.val_content)
        if files and not changed:  # (another folder's files differ anyway: its settings say why)
            changed = [files]
        if not changed:
            return
        metric, state = self.task.metric, self.state
        old = {"best.safetensors": (metric, state.best), "best_ema.safetensors": (f"{metric}_ema", state.best_ema)}
        scored = {
            name: f"{key} {score_text(score, self.task)}" for name, (key, score) in old.items() if score > -math.inf
        }
        if scored:
            self.log(f"note: the best so far ({', '.join(scored.values())}) was scored on another validation set "
                     f"({', '.join(changed)}), which does not compare with this one: the best restarts, the next "
                     f"evaluation's weights replace {' and '.join(scored)}")  # fmt: skip
        state.best = state.best_ema = -math.inf
        state.best_epoch = None

    def _first_best_epoch(self) -> int | None:
        """The epoch of best.safetensors as a resume file from before "best_epoch" was saved tells it: the first whose
        score is its best (after a restart of the best, an epoch of the old val set may score the same: such a file
        cannot tell them apart)."""
        metric = self.task.metric
        found = scored_epoch(self.state.history, (metric, f"{metric}_ema"), self.state.best)
        return None if found is None else found[0]

    def _restore_files(self) -> None:
        """Bring the files back to the resume file's point, as TensorBoard's events are: a save that a kill cut short
        (after the weights, before the resume file) left a later epoch's last weights and metrics row, reported
        beside the resumed run's best. metrics.csv and curves.png are written from the resume file's history; last
        (and EMA) weights of a later epoch from its weights where it was saved at an epoch's end, else removed (that
        epoch's end writes them again)."""
        history = self.state.history
        self._write_metrics()
        ahead = [
            name for name in LAST_FILES.values()
            if (self.out / name).is_file() and read_metadata(self.out / name)["epoch"] > len(history)
        ]  # fmt: skip
        if not ahead:
            return
        clear_evaluation(self.out, ahead, self.task.evaluation_files)
        at_end = bool(history) and not self.state.batch  # the resumed weights are those of the last epoch's end
        weights = self._last_weights(history[-1]) if at_end else {}
        for name in ahead:
            if name in weights:
                save_weights(self.out / name, *weights[name])
            else:  # within an epoch, or EMA weights this run has none of (turned off, or on since that epoch)
                (self.out / name).unlink()

    def _resumed_batch(self, saved: dict[str, Any], path: Path) -> int:
        """Where in its epoch the run goes on: the micro-batches of the saved position, or 0 (with a warning) where
        this run counts them otherwise; ValueError for a position past the end of this run's epochs."""
        saved_world, batch = len(saved["rng"]), saved["batch"]
        if saved_world != self.dist.world_size:
            was, now = (counted(n, "process", "processes") for n in (saved_world, self.dist.world_size))
            self.log(f"warning: saved with {was}, resuming with {now}")
            if batch:
                self.log("warning: the step checkpoint's epoch restarts from its beginning")
                batch = 0
        # the epoch restarts, as with another number of processes: its first images are trained on twice, but each
        # one at least once, and the schedule's step is this run's count
        moved = self._moved_position(saved) if batch else None
        if moved is not None:
            self.log(f"warning: the step checkpoint's epoch restarts from its beginning ({moved})")
            batch = 0
        if batch > self.batches:  # a lowered train.max_iters (or fewer images) ends the epoch before the position
            accum, limit = self.cfg.optim.accum_steps, self.cfg.train.max_iters
            by = f"train.max_iters={limit}" if self.batches == (limit or 0) * accum else "its data"
            raise ValueError(
                f"--resume: {path} was saved after step {epoch_steps(batch, accum)} of epoch {saved['epoch'] + 1}, but "
                f"this run's epochs end after step {self.steps_per_epoch} ({by}); resume with settings that reach the "
                "saved step, or start over with --overwrite"
            )
        return batch

    def _moved_position(self, saved: dict[str, Any]) -> str | None:
        """Why a step checkpoint's position is not the same one in this run's epoch, None where it is. It counts
        micro-batches of its data.batch_size, grouped by its optim.accum_steps into steps: another size would skip
        other images, another grouping shift the steps. It counts them in the order its train.seed shuffled its
        training split into: another seed or split size shuffles another order, of which it would skip other images
        (and train some twice). A file from before "order" was saved (an older swinlite's, "micro_batch" missing
        too where older still) records no order: its epoch restarts, the split may have changed."""
        micro_batch = [self.cfg.data.batch_size, self.cfg.optim.accum_steps]
        if saved.get("micro_batch", micro_batch) != micro_batch:
            size, accum = saved["micro_batch"]
            return (f"its position counts batches of data.batch_size={size} with optim.accum_steps={accum}, this "
                    f"run's {micro_batch[0]} with {micro_batch[1]}")  # fmt: skip
        if "order" not in saved:
            return "the file, from an older swinlite, does not record the order of the training split it counts in"
        order = self.loaders[0].sampler.order
        if saved["order"] != order:
            (seed, samples), (now_seed, now_samples) = saved["order"], order
            return (f"its position is in an order of {samples} training samples shuffled by train.seed={seed}, this "
                    f"run's of {now_samples} by train.seed={now_seed}")  # fmt: skip
        return None

    def _load_states(self, saved: dict[str, Any], path: Path) -> None:
        """Load the saved model, optimizer, EMA and scaler states; ValueError naming ``path`` for those that do not
        fit this run's."""
        mismatch = state_dict_mismatch(self.model.state_dict(), saved["model"], limit=3)
        if mismatch is not None:  # torch's own message names no key on its first line
            raise _misfit(path, "model", mismatch)
        optimizer = self._saved_optimizer(saved, path)
        # the optimizer's state (moments) is the saved one, its hyperparameters the config's: load_state_dict takes the
        # saved groups' weight decay, betas, layer decay's lr_scale ... (the config may have changed them, or dropped
        # them: a group of layer decay resumed without it kept its lr_scale, which timm's scheduler multiplies lr by)
        configured = [dict(g) for g in self.optimizer.param_groups]  # (load_state_dict replaces the groups)
        try:
            self.model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(optimizer)
            for group, built in zip(self.optimizer.param_groups, configured, strict=True):
                resumed = built | {k: group[k] for k in GROUP_STATE if k in group}  # nothing else of the saved group
                group.clear()
                group.update(resumed)
            if self.ema is not None and saved["ema"] is not None:
                self.ema.load_state_dict(saved["ema"])
            if saved["scaler"]:  # (a disabled scaler, train.amp other than fp16, ignores it)
                self.scaler.load_state_dict(saved["scaler"])
        except (RuntimeError, ValueError, KeyError) as e:
            raise _misfit(path, "model or optimizer", str(e).strip().splitlines()[0][:300]) from None
        if self.ema is not None and saved["ema"] is None:  # EMA turned on at --resume: it was built from the
            self.ema.set(self.model)  # initial weights, an average of nothing trained; it starts from the resumed ones
            self.log("note: train.ema_decay is new to this run; the EMA starts from the resumed weights")
        if self.scaler.is_enabled() and not saved["scaler"]:  # saved by a disabled scaler: train.amp none or bf16
            self.log("note: train.amp=fp16 is new to this run; its loss scale starts afresh")

    def _saved_optimizer(self, saved: dict[str, Any], path: Path) -> dict[str, Any]:
        """The saved optimizer state laid out in this run's parameter groups, by parameter name where the file records
        them (:func:`regrouped_by_name`: the groups may differ), else as it was saved (:func:`regrouped`); ValueError
        naming ``path`` where it trains other parameters, or groups them otherwise without names to regroup by."""
        saved_names = saved.get("param_names")  # None: a file from before they were saved
        if saved_names is not None:
            names = group_names(self.model, self.optimizer)
            self._check_trained(saved_names, names, path)
            return regrouped_by_name(saved["optimizer"], saved_names, self.optimizer, names)
        optimizer = regrouped(saved["optimizer"], self.model, self.optimizer)
        trained = [len(g["params"]) for g in optimizer["param_groups"]]
        trains = [len(g["params"]) for g in self.optimizer.param_groups]
        if sum(trained) != sum(trains):  # torch's own message names no cause
            reason = f"it trains {sum(trained)} parameter tensors in {len(trained)} groups, this run {sum(trains)} in "
            raise _misfit(path, "optimizer", reason + f"{len(trains)}: the set of trained parameters changed, e.g. by "
                          "model.kwargs.frozen_stages")  # fmt: skip
        if trained != trains:  # the same parameters grouped otherwise: no setting of this run's changes it back
            other = " of other sizes" if len(trained) == len(trains) else ""
            raise ValueError(
                f"{path} does not fit this run's optimizer (it groups the {sum(trains)} parameter tensors it trains in "
                f"{len(trained)} groups, this run in {len(trains)}{other}: the code that saved it, its swinlite or "
                "timm version, forms the parameter groups otherwise (with optim.layer_decay they follow the model's "
                "group_matcher), and the file records no parameter names to regroup the saved state by); resume with "
                f"that version, start a new run from its weights (model.pretrained={path}: a fresh optimizer and lr "
                "schedule), or start over with --overwrite"
            )
        return optimizer

    def _check_trained(self, saved_names: list[list[str]], names: list[list[str]], path: Path) -> None:
        """ValueError naming ``path`` and the first parameters that differ where the saved optimizer trains other
        parameters (``saved_names``, its groups') than this run's (``names``)."""
        trained, trains = ({n for group in groups for n in group} for groups in (saved_names, names))
        if trained == trains:
            return
        alone = {"trained by it alone": trained - trains, "by this run alone": trains - trained}
        order = [name for name, _ in self.model.named_parameters()]  # every one of them (the model's weights loaded)
        named = [f"{what}: {first_keys([n for n in order if n in only], 3)}" for what, only in alone.items() if only]
        reason = f"it trains {len(trained)} parameter tensors, this run {len(trains)}: the set of trained parameters "
        raise _misfit(path, "optimizer", reason + f"changed, e.g. by model.kwargs.frozen_stages; {'; '.join(named)}")

    def _schedule_change(self, saved: dict[str, Any]) -> str:
        """What is said of a resumed run's lr schedule that differs from the saved one: recounted for another number
        of processes (their global batch sets the steps per epoch and the lr's scale), else the lr of the first
        resumed step on either schedule, and the cause (:meth:`_schedule_cause`)."""
        saved_world = len(saved["rng"])
        if saved_world != self.dist.world_size:
            now, was = (counted(n, "process", "processes") for n in (self.dist.world_size, saved_world))
            return (
                f"note: the lr schedule was recounted for {now} (saved with {was}): its steps per epoch and lr scale "
                "follow this run's global batch; continuing on it"
            )
        old = self._saved_settings(saved)
        lrs, rises = self._resumed_lr(saved)
        message = f"warning: the lr schedule differs from the saved one ({self._schedule_cause(saved, old)}): {lrs}"
        if old.get("train.epochs", math.inf) < self.cfg.train.epochs and rises:
            message += "; a raised train.epochs re-lays the schedule over the new total (a warm restart: the lr rises)"
        return message + "; continuing on the new one"

    def _resumed_lr(self, saved: dict[str, Any]) -> tuple[str, bool]:
        """The lr of the first resumed step on this run's schedule and on the saved one (where it is of this run's
        kind: ``schedule.kind`` changed, it cannot be computed here), and whether it rises (unknown: True)."""
        step, saved_step = self.state.step, saved["step"]
        lr = scheduled_lr(self.scheduler, self.scheduler.state_dict(), step)
        if lr is None:
            return f"the lr from step {step + 1} follows the new schedule", True
        new = f"the lr at step {step + 1} is {lr:.2e}"
        old = scheduled_lr(self.scheduler, saved["scheduler"], saved_step)
        if old is None:
            return f"{new} on the new schedule", True
        at = "" if saved_step == step else f" (at its step {saved_step + 1})"
        return f"{new} on the new schedule, {old:.2e} on the saved one{at}", lr > old

    def _schedule_cause(self, saved: dict[str, Any], old: dict[str, Any]) -> str:
        """Why the schedule differs from the ``saved`` one: the settings it is laid out from that changed since
        ``old`` (:meth:`_saved_settings`), and the steps per epoch where they changed without such a setting (the
        data: images added or removed); :data:`SCHEDULE_UNKNOWN_CAUSE` where neither is found."""
        now = flatten(to_dict(self.cfg))
        changed = [k for k in now if k.startswith(SCHEDULE_SETTINGS) and k in old and old[k] != now[k]]
        causes = [f"changed {', '.join(f'{k}: {old[k]} -> {now[k]}' for k in changed)}"] if changed else []
        was = saved.get("steps_per_epoch", self.steps_per_epoch)  # (a file from before it was saved: unknown)
        if was != self.steps_per_epoch and not set(changed) & set(STEPS_SETTINGS):
            causes.append(f"the steps per epoch changed: {was} -> {self.steps_per_epoch} (the data changed)")
        return "; ".join(causes) or SCHEDULE_UNKNOWN_CAUSE

    def _saved_settings(self, saved: dict[str, Any]) -> dict[str, Any]:
        """The settings (flattened) the ``saved`` resume file was written with (:func:`saved_config`), {} where they
        cannot be read."""
        try:
            return flatten(to_dict(saved_config(saved, self.out, type(self.cfg)())))
        except ValueError:
            return {}

    def position_note(self) -> str:
        """Where a resumed run goes on, numbered as the log numbers epochs and steps (``epoch 2/30 step 4/8``)."""
        state, epochs = self.state, self.cfg.train.epochs
        if state.epoch >= epochs:
            return f"after its last epoch ({epochs}); nothing to train (raise train.epochs to train on)"
        if not state.batch:
            return f"at the start of epoch {state.epoch + 1}/{epochs}"
        done = epoch_steps(state.batch, self.cfg.optim.accum_steps)
        return f"in epoch {state.epoch + 1}/{epochs}, after step {done}/{self.steps_per_epoch}"

    def save_position(self) -> None:
        """Write resume.pt at the current position inside the epoch (every process's RNG state and loss sums)."""
        state, resume = self.state, self.out / RESUME_FILE
        rng = rng_state(self.settings.device)
        per_process = all_gather_object({"rng": rng, "partial": (dict(state.sums), state.count)}, self.dist)
        keep = self.checkpoint_step is None and state.epoch > 0  # resume.pt holds the last epoch's end: kept
        if self.dist.is_main:
            with self._saving_in_epoch():
                if self.tensorboard is not None:  # the events so far are on disk before the file that marks them done
                    self.tensorboard.flush()
                if keep:
                    keep_linked(resume, epoch_end(resume))
                save_resume(resume, self.resume_state(per_process))
        self.epoch_end_kept |= keep
        self.checkpoint_step = epoch_steps(state.batch, self.cfg.optim.accum_steps)

    def _log_step(self) -> None:
        """TensorBoard's scalars of the step reached, at the steps the progress lines show (``progress.is_logged``:
        every ``train.log_interval`` steps of the epoch, and its last): this process's running loss of the epoch, the
        lr."""
        state = self.state
        done = epoch_steps(state.batch, self.cfg.optim.accum_steps)
        if self.tensorboard is not None and is_logged(done, self.steps_per_epoch, self.cfg.train.log_interval):
            with self._saving_in_epoch():
                self.tensorboard.step(state.step, running_loss(state.sums, state.count), current_lr(self.optimizer))

    def _log_compile_time(self) -> None:
        """train.compile: once, after the run's first step, how long it took: torch.compile compiles the model in it
        (seconds to minutes, without a word before), besides loading the first batch. Above the progress bar."""
        if not self.compile_pending:
            return
        if self.dist.is_main:
            seconds = time.perf_counter() - self.compile_start
            tqdm.write(f"train.compile: the first step took {seconds:.1f} s (torch.compile compiled the model)")
        self.compile_pending = False

    def _on_step(self, position: EpochPosition) -> None:
        """After each optimizer step: TensorBoard, and a step checkpoint every ``train.save_every_steps`` steps."""
        state = self.state
        state.step, state.batch, state.sums, state.count = position.step, position.batch, position.sums, position.count
        self._log_compile_time()
        self._log_step()
        every = self.cfg.train.save_every_steps
        if every and position.step % every == 0 and position.batch < self.batches:  # the epoch's end saves anyway
            self._check_finite(self.state.epoch + 1)  # a step checkpoint of NaN weights could never be resumed
            self.save_position()

    def run_epoch(self) -> dict[str, float]:
        """Train (from the step checkpoint's position, if any) and evaluate one epoch; return its metrics row.

        ``epoch_time`` spans the whole epoch up to its save: training and every evaluation (the raw weights', the
        EMA's); ``train_img_s`` the training alone. Of an epoch resumed from a step checkpoint, ``epoch_time`` is the
        whole epoch's: the time before the kill (saved in the checkpoint) and this run's; ``train_img_s`` the rate of
        the images trained since the resume, absent where the epoch was trained before it (nothing left to train).
        """
        state = self.state
        self.epoch_start = time.perf_counter() - state.seconds
        trained_before = state.batch >= self.batches  # saved trained, not evaluated: the resume evaluates it alone
        train_loader = self.loaders[0]
        train_loader.sampler.set_epoch(state.epoch, start=state.batch * self.cfg.data.batch_size)
        position = EpochPosition(state.batch, state.step, dict(state.sums), state.count)
        desc = f"epoch {state.epoch + 1}/{self.cfg.train.epochs}"
        if self.compile_pending:
            self.compile_start = time.perf_counter()
        try:
            losses, rate = train_one_epoch(
                self.train_model, train_loader, self.task.train_step, self.optimizer, self.scheduler, position,
                self.settings, total=self.batches, scaler=self.scaler, ema=self.ema, dist=self.dist, desc=desc,
                on_step=self._on_step,
            )  # fmt: skip
        except TrainingDiverged as e:
            raise self._diverged(e) from None
        state.step, state.batch, state.sums, state.count = position.step, position.batch, position.sums, position.count
        evaluate_in_step(self.train_model, self.dist)
        scores = self.evaluate(self.train_model, desc)
        ema_scores = {}
        if self.ema is not None:
            share_buffers(self.ema.module, self.dist)
            ema_scores = {f"{k}_ema": v for k, v in self.evaluate(self.ema.module, f"{desc} (EMA weights)").items()}
        row = {"epoch": state.epoch + 1, **losses, **scores, "lr": current_lr(self.optimizer)}
        row |= {"epoch_time": time.perf_counter() - self.epoch_start}
        row |= {"train_img_s": None if trained_before else rate * self.dist.world_size}  # None: not measured
        return row | ema_scores

    def evaluate(self, model: nn.Module, desc: str) -> dict[str, float]:
        """The task's evaluation of ``model`` (the trained weights, or their EMA); when it fails, the trained epoch is
        saved first, unless it failed on one process alone (the others wait inside the evaluation's collectives: a
        save's collective would meet one of theirs). Failed on every process, it is said once, rank 0's
        (:class:`SharedEvaluationFailure`), once rank 0 wrote the save: a process that ended before, torchrun ended
        rank 0 in the middle of writing it."""
        try:
            return self.scores(model, self.loaders[1])
        except Exception as e:
            if self.dist.enabled and (is_timeout(e) or peer_gone(e)):
                raise
            reason = (str(e).strip().splitlines() or [""])[0]
            failed = f"evaluation after training {desc} failed ({type(e).__name__}: {reason})"
            wait = min(EVALUATED_ALIKE_WAIT, self.cfg.train.dist_timeout)
            if not all_answer(self.dist, wait, f"rank {self.dist.rank}: {failed}"):
                raise EvaluationFailed(
                    f"rank {self.dist.rank}: {failed} on this process alone, while the others went on evaluating; "
                    "the trained epoch could not be saved: fix the cause and --resume from the last save"
                ) from e
            self.save_position()
            barrier(self.dist)  # within train.dist_timeout, as every collective
            raise SharedEvaluationFailure(
                f"{failed}; the trained epoch is saved in {self.out / RESUME_FILE}: fix the cause and --resume to "
                "evaluate it"
            ) from e

    def scores(self, model: nn.Module, loader: torch.utils.data.DataLoader) -> dict[str, float]:
        """The task's evaluation of ``model`` (in eval mode, without autograd: :func:`evaluating`), checked to hold
        the task's metric, which picks the best weights, each score as a float (:func:`as_score`), and under torchrun
        the same on every process (:func:`check_reduced`: every process raises alike)."""
        with evaluating(model):
            returned = self.task.evaluate(model, loader)
        evaluate = f"{type(self.task).__name__}.evaluate()"
        if self.task.metric not in returned:
            keys = ", ".join(map(str, returned)) or "nothing"
            raise ValueError(
                f"{evaluate} returned no {self.task.metric!r}, the task's metric (Task.metric); it returned {keys}"
            )
        scores = {key: as_score(key, value, evaluate) for key, value in returned.items()}
        check_reduced(all_gather_object(scores, self.dist), evaluate)  # (within train.dist_timeout, as every one)
        return scores

    def _best_candidate(self, row: dict[str, float]) -> tuple[str, float] | None:
        """The weights best.safetensors should now hold, by ``train.best_of``, or None when it stays.

        ``raw``: the trained weights by their metric; ``ema``: the EMA weights by theirs; ``both``: whichever of
        the two scores higher (raw on a tie).
        """
        metric = self.task.metric
        best_of = self.cfg.train.best_of if self.ema is not None else "raw"
        scores = {}
        if best_of in ("raw", "both"):
            scores["raw"] = row[metric]
        if best_of in ("ema", "both"):
            scores["ema"] = row[f"{metric}_ema"]
        return best_candidate(scores, self.state.best)

    def _check_finite(self, epoch: int) -> None:
        """TrainingDiverged before anything of an epoch whose weights hold NaN or infinity is saved (what the run keeps
        is said by :meth:`_diverged`, once)."""
        models = [("weights", self.model)] + ([("EMA weights", self.ema.module)] if self.ema is not None else [])
        for what, model in models:
            bad = non_finite(model.state_dict())
            if bad:
                raise TrainingDiverged(
                    f"training diverged in epoch {epoch}/{self.cfg.train.epochs}: the {what} hold NaN or infinity "
                    f"({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})"
                )

    def _diverged(self, error: TrainingDiverged) -> TrainingDiverged:
        """``error`` with what the run keeps (:meth:`_kept`, after :meth:`_restore_epoch_end`) and the advice; said
        once where every process diverged alike, else by its rank (:func:`~.loop.diverged_alike`)."""
        self._restore_epoch_end()
        wait = min(EVALUATED_ALIKE_WAIT, self.cfg.train.dist_timeout)
        return diverged_alike(f"{error}; {self._kept()} ({ADVICE})", self.dist, wait)

    def _restore_epoch_end(self) -> None:
        """A step checkpoint of the diverging epoch is dropped where the last epoch's end was kept beside it
        (``checkpoint.epoch_end``): its weights may be ruined while still finite, so resume.pt goes back to the end
        of the last good epoch, which ``--resume`` with a lower lr continues from."""
        if self.checkpoint_step is not None and self.epoch_end_kept and self.dist.is_main:
            resume = self.out / RESUME_FILE
            with writing(resume):
                os.replace(epoch_end(resume), resume)

    def _kept(self) -> str:
        """What a diverged run leaves to resume from: the last good epoch's files, a step checkpoint of the diverging
        epoch (a resume continues from it, and may diverge again), or nothing to resume (no epoch completed; the run's
        files are removed as it ends; a task's data scan stays for the next run); resume.pt back at the last epoch's
        end where :meth:`_restore_epoch_end` put it there."""
        resume, done, epochs = self.out / RESUME_FILE, len(self.state.history), self.cfg.train.epochs
        if self.checkpoint_step is None:
            if done:
                return f"{self.out} keeps the files of the last good epoch, {done}/{epochs}"
            return f"no epoch completed, nothing to resume was saved in {self.out}"
        held = f"step {self.checkpoint_step}/{self.steps_per_epoch} of epoch {self.state.epoch + 1}/{epochs}"
        if self.epoch_end_kept:
            return (
                f"{self.out} keeps the files of the last good epoch, {done}/{epochs}, and {resume} is back at its end "
                f"(the step checkpoint of {held} is dropped: its weights may have been diverging already); --resume "
                "continues from it"
            )
        held = f"{resume} holds {held}, which --resume continues from and may diverge from again"
        if not done:
            return f"no epoch completed; {held}; --overwrite starts over"
        last = self.out / LAST_FILES["raw"]
        return (
            f"{held}; {last} holds the last good epoch's weights ({done}/{epochs}): a run in another {OUTPUT_DIR} "
            f"with model.pretrained={last} starts from them"
        )

    def metadata(self, row: dict[str, float], kind: str) -> dict[str, Any]:
        """The weights files' metadata: the task's (with the run's mean and std where it records neither:
        :func:`~swinlite.metadata.with_normalization`), plus the keys every task's files carry."""
        metric = self.task.metric if kind == "raw" else f"{self.task.metric}_ema"
        common = {"format": FORMAT, "task": self.task.name, "weights": kind, "swinlite": __version__}
        data = self.cfg.data  # its mean and std resolved (preflight.resolve_normalisation)
        task = with_normalization(self.task.weights_metadata(), {"mean": list(data.mean), "std": list(data.std)})
        return task | common | {"epoch": int(row["epoch"]), self.task.metric: row[metric]}

    def save(self, row: dict[str, float], best: tuple[str, float] | None, per_process: list[dict[str, Any]]) -> None:
        """Weights, metrics, curves, the TensorBoard row, then the resume file (it marks the epoch done), and last the
        new best weights, which waited under their pending names: a kill before the resume file leaves the epoch to
        be trained again (its TensorBoard events purged on resume, its best weights not taken), one after it the
        pending weights for the next run to complete (``checkpoint.settle_pending``)."""
        lasts, bests = self._last_weights(row), {}
        if self.ema is not None and row[f"{self.task.metric}_ema"] > self.state.best_ema:
            self.state.best_ema = row[f"{self.task.metric}_ema"]
            bests["best_ema.safetensors"] = lasts[LAST_FILES["ema"]]
        if best is not None:
            bests["best.safetensors"] = lasts[LAST_FILES[best[0]]]
        clear_evaluation(self.out, [*lasts, *bests], self.task.evaluation_files)  # before any of them is replaced
        epoch = f"epoch {int(row['epoch'])}/{self.cfg.train.epochs}"
        with self._saving(self._before_resume(epoch)):
            for name, (state_dict, metadata) in lasts.items():
                save_weights(self.out / name, state_dict, metadata)
            for name, (state_dict, metadata) in bests.items():
                save_weights(pending(self.out / name), state_dict, metadata)
            self._write_metrics()
            if self.tensorboard is not None:
                self.tensorboard.epoch(row, self.state.step)
            save_resume(self.out / RESUME_FILE, self.resume_state(per_process))
        epoch_end(self.out / RESUME_FILE).unlink(missing_ok=True)  # the epoch's step checkpoints are replaced
        with self._saving(
            self._partly_saved(
                f"{RESUME_FILE} marks {epoch} saved: once there is room, --resume completes its best weights"
            )
        ):
            for name in bests:
                complete_pending(self.out / name)

    @contextlib.contextmanager
    def _saving(self, stands: str) -> Iterator[None]:
        """A save's failure (a full disk) as one error that says where the run's files stand and what to run once
        there is room (``stands``)."""
        try:
            yield
        except (OSError, ValueError) as e:  # (checkpoint.writing turns an OSError into a ValueError naming the file)
            raise ValueError(f"{e}; {stands}") from None

    def _saving_in_epoch(self) -> contextlib.AbstractContextManager[None]:
        """:meth:`_saving` of a write within the epoch the run is in (an event, a step checkpoint), before its resume
        file (:meth:`_before_resume`)."""
        return self._saving(self._before_resume(f"epoch {self.state.epoch + 1}/{self.cfg.train.epochs}"))

    def _before_resume(self, epoch: str) -> str:
        """Where the run's files stand when the save of ``epoch`` fails before its resume file: an earlier resume file
        (an epoch's or a step checkpoint's) still ends before it, or, at the run's first save, there is none: what
        the save wrote is removed as the run ends (``run.remove_unsaved``), and ``--resume`` is refused."""
        if (self.out / RESUME_FILE).is_file():
            return self._partly_saved(
                f"{RESUME_FILE} still ends before {epoch}: once there is room, --resume trains it again"
            )
        return (
            f"nothing to resume is saved in {self.out} (what {epoch} wrote there is removed as the run ends): once "
            "there is room, run the same command again, without --resume"
        )

    def _partly_saved(self, resumed: str) -> str:
        """Where the files of a save that failed after the run's first stand: some of the epoch's may be written (each
        whole), and ``resumed`` says what ``--resume`` does from there."""
        return f"{self.out} may hold some of this epoch's files already (each whole), and {resumed}"

    def _last_weights(self, row: dict[str, float]) -> dict[str, tuple[dict[str, torch.Tensor], dict[str, Any]]]:
        """last.safetensors (and with EMA scored in ``row``, ema.safetensors): the weights as they are, with the
        metadata of the epoch ``row`` describes."""
        weights = {LAST_FILES["raw"]: (self.model.state_dict(), self.metadata(row, "raw"))}
        if self.ema is not None and f"{self.task.metric}_ema" in row:
            weights[LAST_FILES["ema"]] = (self.ema.module.state_dict(), self.metadata(row, "ema"))
        return weights

    def _write_metrics(self) -> None:
        """metrics.csv and curves.png of the history (neither while it is empty: before the first epoch's end)."""
        history, table, curves = self.state.history, self.out / "metrics.csv", self.out / "curves.png"
        if not history:
            table.unlink(missing_ok=True)
            curves.unlink(missing_ok=True)
            return
        with writing(table):
            write_csv(history, table)
        with writing(curves):
            plot_curves(history, curves, self.task.curves(history[-1]))

    def fit(self) -> None:
        check_metadata(self.task)  # before any epoch: the first save wrote it
        state = self.state
        while state.epoch < self.cfg.train.epochs:
            row = self.run_epoch()
            try:
                self._check_finite(int(row["epoch"]))
            except TrainingDiverged as e:
                raise self._diverged(e) from None
            state.history.append(row)
            state.epoch += 1
            state.batch, state.sums, state.count, state.seconds = 0, {}, 0, 0.0
            best = self._best_candidate(row)
            if best is not None:
                state.best, state.best_epoch = best[1], state.epoch
            per_process = all_gather_object({"rng": rng_state(self.settings.device), "partial": ({}, 0)}, self.dist)
            if self.dist.is_main:
                self.save(row, best, per_process)
            self.checkpoint_step, self.epoch_end_kept = None, False
            self.log(epoch_line(row, self.cfg.train.epochs, self.task.summary(row)))
            self._warn_unscored(row)
            barrier(self.dist)

    def _warn_unscored(self, row: dict[str, float]) -> None:
        """A metric that is NaN picks no best weights (NaN beats nothing): say so, rather than log 'nan' silently."""
        nan = [key for key in (self.task.metric, f"{self.task.metric}_ema") if math.isnan(row.get(key, 0.0))]
        if nan:
            self.log(f"warning: {' and '.join(nan)} of epoch {int(row['epoch'])} is NaN (did the evaluation score "
                     "nothing?); a NaN score never picks best weights")  # fmt: skip

    def report(self) -> None:
        """The best score and where every file is."""
        metric, state = self.task.metric, self.state
        row = [] if state.best_epoch is None else state.history[state.best_epoch - 1 : state.best_epoch]
        keys = (metric, f"{metric}_ema")  # on a tie the weights best_of chose first: the raw ones but with ema
        keys = keys[::-1] if self.cfg.train.best_of == "ema" and self.ema is not None else keys
        found = scored_epoch(row, keys, state.best)
        if found is not None:  # the EMA weights' score is named as theirs
            self.log(f"done: best {found[1]} {score_text(state.best, self.task)} at epoch {found[0]}")
        files = [("metrics.csv", "metrics"), ("curves.png", "curves"), ("best.safetensors", "best weights")]
        files += [("last.safetensors", "last weights")]
        if self.ema is not None:
            files += [("best_ema.safetensors", "best EMA weights"), ("ema.safetensors", "last EMA weights")]
        files += [(RESUME_FILE, "resume file"), ("config.yaml", "resolved config")]
        for name, what in files:
            if (self.out / name).is_file():  # no best weights when no epoch scored a number
                self.log(f"  {what + ':':<18} {self.out / name}")
