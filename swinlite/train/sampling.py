"""Training-set order and augmentation randomness that survive a restart anywhere inside an epoch.

``EpochSampler`` yields ``(epoch, index)`` keys in ``DistributedSampler``'s shuffled order and can start
mid-epoch. ``sample_seed`` turns such a key into the seed of that image's augmentation, so an image is
augmented the same way whichever loader worker loads it, whether workers persist across epochs, and
whether the run was resumed: the only randomness left in the training process is its own (drop path,
mixup), which the resume file restores.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DistributedSampler


class EpochSampler(DistributedSampler):
    """``DistributedSampler`` (this process's shard, reshuffled per epoch) that yields ``(epoch, index)``.

    ``set_epoch(epoch, start)`` selects the epoch and skips the first ``start`` indices of this process's
    shard (a resume inside the epoch); the next ``set_epoch`` starts from the beginning again.
    """

    start: int = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        super().set_epoch(epoch)
        self.start = start

    def __iter__(self) -> Iterator[tuple[int, int]]:
        indices = list(super().__iter__())[self.start :]
        return iter([(self.epoch, i) for i in indices])

    def __len__(self) -> int:
        return super().__len__() - self.start


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 32-bit seed for image ``index`` in ``epoch`` of a run seeded with ``seed``."""
    return int(np.random.SeedSequence((seed, epoch, index)).generate_state(1)[0])


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed Python's, NumPy's and torch's global generators (timm and torchvision transforms draw from all
    three) for the block, then put back their previous states: the caller's own random stream is untouched."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
