"""The startup handshake of a torchrun launch (``swinlite.engine.handshake``), on an in-process store standing in
for the launch's: what each process raises from the others' reports, and a process that never reports."""

import json

import pytest
import torch.distributed as dist

from swinlite.engine import handshake
from swinlite.engine.distributed import DistInfo, SharedError, StalledRankError

SETTINGS = {"train.epochs": 1, "data.data_dir": "data"}


def _posted(store: dist.Store, rank: int, report: dict) -> None:
    store.set(f"{handshake._prefix()}/{rank}", json.dumps(report))


@pytest.mark.parametrize(
    ("rank", "local_rank", "raised"), [(0, 0, ValueError), (2, 0, ValueError), (3, 1, SharedError)]
)
def test_a_process_that_alone_failed_is_named_by_rank(rank, local_rank, raised, monkeypatch):
    monkeypatch.setattr(handshake, "_LINGER", 0.2)  # rank 0 waits for the others to read the reports: none will here
    store = dist.HashStore()
    for other in range(4):
        problem = "--data-dir data does not exist" if other == 1 else None
        if other != rank:
            _posted(store, other, {"problem": problem, "settings": SETTINGS})
    with pytest.raises(raised, match=r"^rank 1 failed its startup checks: --data-dir data does not exist$"):
        handshake.agree_to_start(DistInfo(rank, 4, local_rank), store, SETTINGS, timeout=5)


@pytest.mark.parametrize(("local_rank", "raised"), [(0, FileNotFoundError), (1, SharedError)])
def test_a_failed_process_says_its_own_error_once_per_machine(local_rank, raised, monkeypatch):
    store = dist.HashStore()
    monkeypatch.setattr(handshake, "launch_store", lambda info, timeout: store)
    _posted(store, 0, {"problem": None, "settings": SETTINGS})
    with pytest.raises(raised, match="no such file"):
        handshake.refuse_with_peers(DistInfo(1, 2, local_rank), FileNotFoundError("no such file"), timeout=5)


def test_different_settings_name_the_first_that_differs_and_the_ranks():
    store = dist.HashStore()
    _posted(store, 0, {"problem": None, "settings": SETTINGS})
    with pytest.raises(ValueError, match=r"data.data_dir is 'data' on rank 0 and 'other' on rank 1; start every"):
        handshake.agree_to_start(DistInfo(1, 2, 0), store, SETTINGS | {"data.data_dir": "other"}, timeout=5)


def test_a_process_that_never_reports_is_named_after_the_timeout():
    with pytest.raises(StalledRankError, match=r"rank 1 did not finish its startup checks within train.dist_timeout"):
        handshake.agree_to_start(DistInfo(0, 2, 0), dist.HashStore(), SETTINGS, timeout=0.2)


def test_processes_alike_start():
    store = dist.HashStore()
    _posted(store, 1, {"problem": None, "settings": SETTINGS})
    handshake.agree_to_start(DistInfo(0, 2, 0), store, SETTINGS, timeout=5)  # no error


@pytest.mark.parametrize(("sizes", "refused"), [([(24, 8), (24, 8)], False), ([(24, 8), (20, 8)], True)])
def test_processes_that_read_different_data_are_refused(sizes, refused, monkeypatch):
    """The same settings naming other files on another machine: each process stepped its own schedule and shard."""
    monkeypatch.setattr(handshake, "all_gather_object", lambda obj, info: sizes)
    if not refused:
        handshake.check_same_data(*sizes[1], DistInfo(1, 2, 1))
        return
    with pytest.raises(SharedError, match=r"rank 0 24 train / 8 val samples, rank 1 20 train / 8 val; give every"):
        handshake.check_same_data(*sizes[1], DistInfo(1, 2, 1))
