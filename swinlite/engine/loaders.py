"""The training and validation loaders of every task: resumable order, seeded samples, one shard per process."""

from __future__ import annotations

import atexit
import ctypes
import functools
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from .distributed import DistInfo, SharedError
from .sampling import EpochSampler, SeededDataset
from .sections import DataConfig


def build_loaders(
    train_ds: Dataset,
    val_ds: Dataset,
    cfg: DataConfig,
    seed: int,
    dist: DistInfo,
    collate: Callable | None = None,
    drop_last: bool = True,
) -> tuple[DataLoader, DataLoader]:
    """Train loader (shuffled per epoch via ``loader.sampler.set_epoch(epoch, start)``) and val loader.

    Each process sees its own shard; val shards do not overlap or pad, so summed metrics are exact. Each training
    sample's augmentation is seeded by (seed, epoch, index) (``SeededDataset``). Workers persist across epochs
    (``cfg.persistent_workers``) and prefetch ``cfg.prefetch_factor`` batches each; the loaders draw their worker
    seeds from their own generator, never from the training process's. A worker leaves a SIGTERM to the training
    process (:func:`leave_sigterm_to_the_run`).

    Raises:
        ValueError: fewer training samples than one batch per process (``drop_last``) or than processes; fewer
            validation samples than processes.
    """
    need = cfg.batch_size * dist.world_size if drop_last else dist.world_size
    if len(train_ds) < need:  # every process builds the same datasets: rank 0 alone says it
        raise SharedError(
            f"the training split has {len(train_ds)} samples, fewer than "
            + (f"one batch (data.batch_size={cfg.batch_size} x {dist.world_size} processes)" if drop_last else
               f"{dist.world_size} processes")
        )  # fmt: skip
    if len(val_ds) < dist.world_size:  # a process without a val sample would evaluate nothing
        raise SharedError(
            f"the validation split has {len(val_ds)} samples, fewer than {dist.world_size} processes (each evaluates "
            "its own share of it): add validation samples, or run fewer processes"
        )
    sampler = EpochSampler(train_ds, num_replicas=dist.world_size, rank=dist.rank, shuffle=True, seed=seed)
    workers = cfg.num_workers > 0
    loader_args = dict(
        batch_size=cfg.batch_size,
        num_workers=cfg.num_workers,
        collate_fn=collate,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=workers and cfg.persistent_workers,
        prefetch_factor=cfg.prefetch_factor if workers else None,
        generator=torch.Generator().manual_seed(seed),
        worker_init_fn=functools.partial(leave_sigterm_to_the_run, exiting=_exit_flag()),
    )
    train = DataLoader(SeededDataset(train_ds, seed), sampler=sampler, drop_last=drop_last, **loader_args)
    val = DataLoader(Subset(val_ds, range(dist.rank, len(val_ds), dist.world_size)), shuffle=False, **loader_args)
    return train, val


def leave_sigterm_to_the_run(worker_id: int, exiting: ctypes.c_byte) -> None:
    """A loader worker's start: the first SIGTERM it gets is left to the training process, which shuts its workers
    down as it unwinds (``swinlite.engine.cli``); a second one ends the worker, as by default (the loader's own
    ``terminate`` of a worker that does not stop). Once the training process exits (``exiting``, set at its exit by
    :func:`_exit_flag`), the first SIGTERM ends the worker. A batch's handover the unwinding process breaks off is
    not reported (:func:`_unless_broken_off`).

    A SIGTERM sent to the whole process group (Slurm's ``scancel``, ``kill -- -PGID``) ended the workers at once,
    and the unwinding training process's loader then printed "Exception ignored in
    _MultiProcessingDataLoaderIter.__del__ ... DataLoader worker (pid N) is killed by signal: Terminated" after the
    run's own ``terminated`` line. A worker whose training process is gone stops by torch's own watchdog.
    """
    signal.signal(signal.SIGTERM, functools.partial(_first_sigterm, exiting))
    sys.excepthook = functools.partial(_unless_broken_off, sys.excepthook)


def _first_sigterm(exiting: ctypes.c_byte, signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the worker
    if exiting.value:  # multiprocessing's exit handler: one SIGTERM, then a join without a time limit
        os._exit(0)  # (an exit code, not death by the signal, which the loader's SIGCHLD handler reports)


@functools.cache
def _exit_flag() -> ctypes.c_byte:
    """A flag the loader workers share with this process, set when it exits.

    At exit ``multiprocessing`` ends the daemonic processes still running, persistent loader workers among them
    (a loader that is still referenced: a global, or a frame of the traceback of the error that ends the
    script), with one SIGTERM each, then waits for them without a time limit: a worker that left that SIGTERM to
    the run kept the process from exiting. Registered after ``multiprocessing``'s own exit handler, this one runs
    first (``atexit`` runs the last registered first)."""
    flag = multiprocessing.RawValue(ctypes.c_byte, 0)
    atexit.register(lambda: setattr(flag, "value", 1))
    return flag


def _unless_broken_off(report: Callable, kind: type[BaseException], error: BaseException, trace: object) -> None:
    """A loader worker's ``sys.excepthook``: ``report`` all but a ConnectionError. The worker's ``multiprocessing``
    resource sharer thread hands each batch's shared memory (its file descriptor) to the training process and
    reports a failed handover through ``sys.excepthook``; a training process that unwinds (a SIGTERM, Ctrl-C) breaks
    off the handover it was in ("ConnectionResetError: [Errno 104] Connection reset by peer"), and one that fails to
    receive a batch says so itself."""
    if not issubclass(kind, ConnectionError):
        report(kind, error, trace)


def batches_per_epoch(loader: DataLoader, max_steps: int | None, accum_steps: int) -> int:
    """Micro-batches of one epoch of ``loader`` (its sampler at the epoch's start), capped at ``max_steps``
    optimizer steps of ``accum_steps`` micro-batches each."""
    samples, size = loader.sampler.num_samples, loader.batch_size
    batches = samples // size if loader.drop_last else -(-samples // size)
    return batches if max_steps is None else min(batches, max_steps * accum_steps)
