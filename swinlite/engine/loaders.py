"""The training and validation loaders of every task: resumable order, seeded samples, one shard per process."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from ..sigterm import loader_worker_init
from .distributed import DistInfo, SharedError
from .sampling import EpochSampler, SeededDataset
from .sections import DataConfig


def build_loaders(
    train_ds: Dataset,
    val_ds: Dataset,
    cfg: DataConfig,
    seed: int,
    dist: DistInfo,
    device: torch.device,
    collate: Callable | None = None,
    drop_last: bool = True,
) -> tuple[DataLoader, DataLoader]:
    """Train loader (shuffled per epoch via ``loader.sampler.set_epoch(epoch, start)``) and val loader.

    Each process sees its own shard; val shards do not overlap or pad, so summed metrics are exact. Each training
    sample's augmentation is seeded by (seed, epoch, index), and a repeat that pads the shards by its copy number
    too (``SeededDataset``). Workers persist across epochs (``cfg.persistent_workers``) and prefetch
    ``cfg.prefetch_factor`` batches each; the loaders draw their worker seeds from their own generator, never from
    the training process's. Batches are pinned for a CUDA ``device`` alone (the run's: a CPU run on a GPU machine
    makes no CUDA context). A worker leaves a SIGTERM to the training process
    (:func:`swinlite.sigterm.loader_worker_init`).

    Raises:
        ValueError: fewer training samples than one batch per process (``drop_last``) or than processes; fewer
            validation samples than processes.
    """
    shard = math.ceil(len(train_ds) / dist.world_size)  # a process's samples, the sampler's padding repeats included
    if len(train_ds) < dist.world_size or (drop_last and shard < cfg.batch_size):  # rank 0 alone says it
        raise SharedError(
            f"the training split has {len(train_ds)} samples, fewer than "
            + (f"one batch a process (data.batch_size={cfg.batch_size}; each of {dist.world_size} processes gets "
               f"{shard})" if drop_last else f"{dist.world_size} processes")
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
        pin_memory=device.type == "cuda",
        persistent_workers=workers and cfg.persistent_workers,
        prefetch_factor=cfg.prefetch_factor if workers else None,
        generator=torch.Generator().manual_seed(seed),
        worker_init_fn=loader_worker_init(),
    )
    train = DataLoader(SeededDataset(train_ds, seed), sampler=sampler, drop_last=drop_last, **loader_args)
    val = DataLoader(Subset(val_ds, range(dist.rank, len(val_ds), dist.world_size)), shuffle=False, **loader_args)
    return train, val


def batches_per_epoch(loader: DataLoader, max_steps: int | None, accum_steps: int) -> int:
    """Micro-batches of one epoch of ``loader`` (its sampler at the epoch's start), capped at ``max_steps``
    optimizer steps of ``accum_steps`` micro-batches each."""
    samples, size = loader.sampler.num_samples, loader.batch_size
    batches = samples // size if loader.drop_last else -(-samples // size)
    return batches if max_steps is None else min(batches, max_steps * accum_steps)
