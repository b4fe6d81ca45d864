"""Training-set order and augmentation randomness that survive a restart anywhere inside an epoch.

``EpochSampler`` yields ``(epoch, index, copy)`` keys in ``DistributedSampler``'s shuffled order and can start
mid-epoch. ``SeededDataset`` turns such a key into the seed of that sample's augmentation (``sample_seed``), so
a sample is augmented the same way whichever loader worker loads it, whether workers persist across epochs,
and whether the run was resumed: the only randomness left in the training process is its own (drop path,
mixup, a detector's sampling), which the resume file restores.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, DistributedSampler, get_worker_info


class EpochSampler(DistributedSampler):
    """``DistributedSampler`` (this process's shard, reshuffled per epoch) that yields ``(epoch, index, copy)``.

    ``set_epoch(epoch, start)`` selects the epoch and skips the first ``start`` indices of this process's
    shard (a resume inside the epoch); the next ``set_epoch`` starts from the beginning again.

    A split whose size the processes do not divide is padded with its first shuffled indices, so that each process
    gets as many: ``copy`` counts the times an index came before in the padded order (0 but for those repeats), which
    ``SeededDataset`` seeds apart, as plain torch draws a repeat's augmentation afresh.
    """

    start: int = 0

    @property
    def order(self) -> list[int]:
        """What each epoch's order is shuffled from besides the epoch and the processes: ``[seed, samples]``."""
        return [self.seed, len(self.dataset)]

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        super().set_epoch(epoch)
        self.start = start

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        shard, samples = list(super().__iter__()), len(self.dataset)
        # the k-th index of this shard is at position rank + k * num_replicas of the padded order, which holds the
        # shuffled indices over and over: its copy is the round it is in
        positions = range(self.rank, self.total_size, self.num_replicas)
        keys = [(self.epoch, i, position // samples) for i, position in zip(shard, positions, strict=True)]
        return iter(keys[self.start :])

    def __len__(self) -> int:
        return super().__len__() - self.start


def sample_seed(seed: int, epoch: int, index: int, copy: int = 0) -> int:
    """A 32-bit seed for image ``index`` in ``epoch`` of a run seeded with ``seed``, its ``copy``-th repeat in the
    epoch's padded order (a hash: about a microsecond; a first occurrence's is that of ``(seed, epoch, index)``)."""
    key = f"{seed},{epoch},{index}" + (f",{copy}" if copy else "")
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest(), "little")


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed Python's, NumPy's and torch's global generators (timm and torchvision transforms draw from all
    three) for the block. In the training process itself (``data.num_workers=0``) their previous states are put
    back afterwards, so its own random stream is untouched; a loader worker's generators serve nothing else,
    and restoring them (NumPy's state alone costs tens of microseconds) is skipped there."""
    cpu = torch.default_generator  # not torch.manual_seed, which also seeds every accelerator (~1 ms)
    restore = get_worker_info() is None
    states = (random.getstate(), np.random.get_state(), cpu.get_state()) if restore else None
    random.seed(seed)
    np.random.seed(seed)
    cpu.manual_seed(seed)
    try:
        yield
    finally:
        if states is not None:
            random.setstate(states[0])
            np.random.set_state(states[1])
            cpu.set_state(states[2])


class SeededDataset(Dataset):
    """A dataset served by ``(epoch, index, copy)`` keys (``EpochSampler``): item ``index`` drawn with the global
    generators seeded by ``sample_seed(seed, epoch, index, copy)``.

    Args:
        dataset: any map-style dataset whose transforms draw from Python's, NumPy's or torch's global generators.
        seed: the run's seed.
    """

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int, int]) -> object:
        epoch, index, copy = key
        with seeded(sample_seed(self.seed, epoch, index, copy)):
            return self.dataset[index]
