"""Under ``torchrun``, before the processes join their process group: each tells the others, through the launch's
rendezvous store, whether its startup checks passed, and with which settings it runs.

Joining waits in C++ (gloo's connection of every pair) for every process: one that failed its checks and ended left
the others there, deaf to ``torchrun``'s SIGTERM, for ``train.dist_timeout``; processes started with different
settings joined and then waited in their first collective that did not match. The store is polled from Python here,
so a signal still ends the wait, and every process leaves with the same verdict: the first failure, said once per
machine, or the first setting that differs between the processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from .distributed import (
    DistInfo,
    SharedError,
    StalledRankError,
    all_gather_object,
    bounded,
    init_distributed,
    launched,
    run_keys,
)

_POLL = 0.05  # seconds between two looks at the store
_LINGER = 10.0  # seconds a failed rank 0, which may host the store, waits for the others to have read it
_posted: str | None = None  # the key of the startup report this process posted last (its run's: ``_prefix``)


def launch_store(info: DistInfo, timeout: float) -> dist.Store:
    """The rendezvous store ``torchrun`` describes in the environment (``MASTER_ADDR``, ``MASTER_PORT``), as
    ``init_process_group`` builds it: a client of the agent's store under ``torchrun``, else hosted by rank 0."""
    store, _, _ = next(dist.rendezvous("env://", info.rank, info.world_size, timeout=timedelta(seconds=timeout)))
    return store


def _prefix() -> str:
    """Keys of this launch attempt and run (:func:`~swinlite.engine.distributed.run_keys`): a restart by ``torchrun
    --max-restarts``, or a sweep's next ``run``, finds none of the last one's."""
    return f"swinlite/startup/{os.environ.get('TORCHELASTIC_RUN_ID', 'none')}/{run_keys()}"


def _post(store: dist.Store, info: DistInfo, report: dict[str, Any]) -> None:
    """Post this process's startup ``report`` for the others, and remember it did (:func:`refuse_before_checks`)."""
    global _posted
    key = f"{_prefix()}/{info.rank}"
    store.set(key, json.dumps(report, default=str))
    _posted = key


def exchange_reports(store: dist.Store, info: DistInfo, report: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
    """Post this process's ``report`` and wait until every process has posted its own; all of them, by rank.

    Raises:
        StalledRankError: a process did not post within ``timeout`` seconds.
    """
    prefix = _prefix()
    _post(store, info, report)
    keys = [f"{prefix}/{rank}" for rank in range(info.world_size)]
    deadline = time.monotonic() + timeout
    while not store.check(keys):
        if time.monotonic() > deadline:
            missing = ", ".join(str(r) for r, key in enumerate(keys) if not store.check([key]))
            raise StalledRankError(
                f"rank {info.rank}: rank {missing} did not finish its startup checks within train.dist_timeout="
                f"{timeout:g} s; is it still checking its data, or did it end?"
            )
        time.sleep(_POLL)
    reports = [json.loads(store.get(key)) for key in keys]
    store.add(f"{prefix}/read", 1)
    return reports


def _linger(store: dist.Store, info: DistInfo) -> None:
    """Rank 0 of a run that does not start stays until every process has read the reports (or ``_LINGER`` s): it may
    host the store."""
    deadline = time.monotonic() + _LINGER
    while info.rank == 0 and store.add(f"{_prefix()}/read", 0) < info.world_size and time.monotonic() < deadline:
        time.sleep(_POLL)


def refuse_with_peers(info: DistInfo, problem: BaseException, timeout: float) -> None:
    """This process failed its startup checks with ``problem``: tell the others and raise what this one says, with
    them (:func:`startup_verdict`). A ``problem`` that is no user error (ValueError, OSError) is posted and raised at
    once: its traceback follows."""
    try:
        store = launch_store(info, timeout)
    except (RuntimeError, ValueError):  # no store to reach: each machine's first process says its own error
        _say_own(info, problem)
    report = {"problem": str(problem)}
    if not isinstance(problem, (ValueError, OSError)):
        _post(store, info, report)
        raise problem
    try:
        reports = exchange_reports(store, info, report, timeout)
    except StalledRankError:  # a process did not come to tell: each machine's first process says its own error
        _say_own(info, problem)
    _linger(store, info)
    startup_verdict(info, reports, problem)


def refuse_before_checks(message: str, wait: float) -> None:
    """This process of a launch ends on ``message`` before its startup checks (a command line argparse refused, a
    user error of the script before the engine's): tell the others as :func:`refuse_with_peers` does, so that they end
    at once saying ``rank N failed its startup checks: message`` instead of waiting ``train.dist_timeout`` for it.
    Each step (reaching the store, the others' reports) waits ``wait`` seconds at most, all of it a bounded time: a
    store that does not answer leaves it as before. Nothing where this process posted its report already (the
    handshake told them), or the environment describes no launch; what it would raise, the caller says its own way."""
    try:
        info = launched()
    except ValueError:  # the environment's error: no launch to tell
        return
    if not info.enabled or _posted == f"{_prefix()}/{info.rank}":
        return
    with contextlib.suppress(Exception):  # this process's own error or the verdict, or no store within the wait
        bounded(lambda: refuse_with_peers(info, ValueError(message), wait), 2 * wait + _LINGER)


def agree_to_start(info: DistInfo, store: dist.Store, settings: dict[str, Any], timeout: float) -> None:
    """This process passed its startup checks, with ``settings``: return once every other one has too, with the
    same settings; else raise the verdict (:func:`startup_verdict`)."""
    reports = exchange_reports(store, info, {"problem": None, "settings": settings}, timeout)
    try:
        startup_verdict(info, reports)
    except ValueError:  # SharedError too
        _linger(store, info)
        raise


def startup_verdict(info: DistInfo, reports: list[dict[str, Any]], own: BaseException | None = None) -> None:
    """Raise what every process's ``reports`` (by rank) decide: nothing where all passed with the same settings.

    The first process of each machine (local rank 0) raises its own error (``own``), else a ValueError naming the
    first failed rank and its message, or the first setting that differs; every other process a :class:`SharedError`
    it does not say. The first process of each machine exits with code 2; the others, under torchrun, wait for
    torchrun to end them (SIGTERM) once it did (``swinlite.script.said_elsewhere``), so that its line is printed and
    torchrun's summary names it as the first failure; started by hand, they exit with code 2 at once.
    """
    if own is not None:
        _say_own(info, own)
    failed = [(rank, report["problem"]) for rank, report in enumerate(reports) if report["problem"] is not None]
    if failed:
        message = "rank {} failed its startup checks: {}".format(*failed[0])
    else:
        message = _settings_differ(reports)
        if message is None:
            return
    if info.local_rank == 0:
        raise ValueError(message)
    raise SharedError(message)


def _say_own(info: DistInfo, problem: BaseException) -> NoReturn:
    """This process's own startup error: raised as it is by the machine's first process, which says it; a
    :class:`SharedError` that is not said by the others."""
    if info.local_rank == 0:
        raise problem
    raise SharedError(str(problem)) from problem


def _settings_differ(reports: list[dict[str, Any]]) -> str | None:
    """The first setting whose value differs between the processes (against rank 0's), as a sentence; else None."""
    first = reports[0]["settings"]
    for rank, report in enumerate(reports[1:], start=1):
        settings = report["settings"]
        for key in sorted(first.keys() | settings.keys()):
            if first.get(key) != settings.get(key):
                return (
                    f"the processes were started with different settings: {key} is {first.get(key)!r} on rank 0 and "
                    f"{settings.get(key)!r} on rank {rank}; start every process with the same config, overrides and "
                    "command line"
                )
    return None


@contextlib.contextmanager
def checked_alike(info: DistInfo, timeout: float = 1800.0) -> Iterator[None]:
    """Around the checks every process makes before the process group is joined (the settings, the files and devices
    of its machine): a ValueError or OSError raised in the block is told to the other processes, which wait for it at
    most ``timeout`` seconds, and said once per machine, by its local rank 0 (:func:`startup_verdict`): as raised
    where that process failed, else as ``rank N failed its startup checks: ...``. Every process exits with code 2.
    Each machine's first process, not rank 0 alone: a machine whose process alone lacks a file says so.
    (``info``: :func:`~swinlite.engine.distributed.launched`'s.)"""
    try:
        yield
    except Exception as e:
        if not info.enabled:
            raise
        refuse_with_peers(info, e, timeout)


def join(device: torch.device, timeout: float, settings: dict[str, Any]) -> DistInfo:
    """Join the process group ``torchrun`` describes (:func:`~swinlite.engine.distributed.init_distributed`) once
    every process has passed its startup checks with the same ``settings`` (:func:`agree_to_start`); a single process
    joins nothing."""
    info = launched()
    if not info.enabled:
        return info
    store = launch_store(info, timeout)
    agree_to_start(info, store, settings, timeout)
    return init_distributed(device, timeout, store)


def check_same_data(train: int, val: int, info: DistInfo) -> None:
    """After the join, once each process has read its data (``train`` and ``val`` samples): a :class:`SharedError`
    (rank 0 says it) where the processes read different data, the same settings naming other files on another machine;
    each would step its own schedule and shard, and wait in collectives the others never make. A collective."""
    sizes = all_gather_object((train, val), info)
    for rank, (other_train, other_val) in enumerate(sizes[1:], start=1):
        if (other_train, other_val) != sizes[0]:
            raise SharedError(
                f"the processes read different data: rank 0 {sizes[0][0]} train / {sizes[0][1]} val samples, rank "
                f"{rank} {other_train} train / {other_val} val; give every process (every machine) the same data"
            )
