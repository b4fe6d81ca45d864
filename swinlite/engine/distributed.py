"""Multi-process training under ``torchrun``: process group set-up, metric reduction (warnings: ``rank_warnings``).

Every collective waits at most ``train.dist_timeout`` seconds. When one times out because a process stopped
progressing (alive but stuck, or stopped), ``stalled_ranks`` asks every process to answer through the launch's store,
which names the processes that do not answer. One that fails at once because another process ended (its connections
closed) is told apart by ``peer_gone``. Every read and write of that store is bounded (``bounded``): a TCPStore's
client waits for its host's reply without limit, and a stopped host (SIGSTOP) never replies.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


T = TypeVar("T")

STORE_REPLY_WAIT = 10.0  # seconds a store's reads take at most beyond the wait they are given (its replies: ms)

_store: Any = None  # this run's keys in the launch's store (``run_keys``), for ``all_answer`` and ``stalled_ranks``
_answers = 0  # the ``all_answer`` calls this process made
_runs = 0  # the ``run`` calls this process made before its current one: every process of a sweep alike (``run_keys``)
_started = False  # whether this process started a ``run``


class StalledRankError(RuntimeError):
    """A collective timed out because another process stopped progressing."""


class SharedError(ValueError):
    """A user error every process raises alike (rank 0's, broadcast, or one decided from what every process shares):
    rank 0 alone says it (``swinlite.engine.cli``); every process exits with code 2."""


class PeerGoneError(RuntimeError):
    """A collective failed because another process of the run ended (killed, or failed on its own)."""


# what a collective raises when another process is gone (its sockets closed): gloo's "Connection closed by peer",
# "Connection reset by peer" (a read) and "Broken pipe" (a write); NCCL's "remote process exited or there was a network
# error" (ncclRemoteError)
_PEER_GONE = re.compile(r"connection (?:closed|reset) by (?:remote )?peer|broken pipe|remote process exited", re.I)


def launched() -> DistInfo:
    """This process's place as ``torchrun`` sets it in the environment (a single process without it), known before
    the process group is joined.

    Raises:
        ValueError: the environment describes no place: ``WORLD_SIZE`` or ``RANK`` that is not a number, or
            ``WORLD_SIZE`` above 1 without ``RANK`` (a variable left from another launch; a ``KeyError`` before).
    """
    world = _environ_int("WORLD_SIZE", "1")
    if world <= 1:
        return DistInfo()
    if "RANK" not in os.environ:
        raise ValueError(
            f"the environment sets WORLD_SIZE={world} but not RANK: start the processes with torchrun, which sets "
            "both, or unset WORLD_SIZE to run one process"
        )
    return DistInfo(_environ_int("RANK", "0"), world, _environ_int("LOCAL_RANK", "0"))


def _environ_int(name: str, default: str) -> int:
    """The whole number the environment variable ``name`` holds (``default`` where unset): ValueError naming it."""
    value = os.environ.get(name, default)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"the environment sets {name}={value!r}: expected a whole number, as torchrun sets") from None


def run_keys() -> str:
    """The part of this run's keys in the launch's store that tells them from an earlier one's: the launch attempt
    (``torchrun --max-restarts`` keeps its agent's store across restarts, where a restarted process read the last
    attempt's addresses and failed to connect) and the ``run`` calls this process made before (a sweep calls ``run``
    again in the same processes: the next read the last one's startup reports as its own)."""
    return f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/run{_runs}"


def run_started() -> None:
    """At the start of each ``run``: a sweep's next run in this process uses keys of its own (:func:`run_keys`). The
    keys move at the next run's start, not at a run's end: an error after a run, on the process's way out, is still
    that run's (its startup report posted: nothing is posted under another run's keys)."""
    global _runs, _started
    if _started:
        _runs += 1
    _started = True


def init_distributed(device: torch.device, timeout: float, store: dist.Store) -> DistInfo:
    """Join the process group ``torchrun`` describes in the environment (nccl on CUDA, gloo on CPU), through the
    launch's rendezvous ``store``, where the processes met already (``handshake.join``).

    Without ``torchrun`` (no ``WORLD_SIZE``), this is a single process and nothing is initialized.

    Args:
        device: this process's device.
        timeout: seconds any collective waits for the other processes.
        store: the launch's rendezvous store (``handshake.launch_store``).
    """
    global _store
    info = launched()
    if not info.enabled:
        return info
    if device.type == "cuda":
        torch.cuda.set_device(device)
    wait = timedelta(seconds=timeout)
    backend = "nccl" if device.type == "cuda" else "gloo"
    joined = dist.PrefixStore(f"default_pg/attempt_{run_keys()}", store)  # init_process_group's own, of this run
    dist.init_process_group(backend=backend, timeout=wait, store=joined, rank=info.rank, world_size=info.world_size)
    _store = dist.PrefixStore(f"swinlite/answers/{run_keys()}", store)
    return info


def is_timeout(error: BaseException) -> bool:
    """Whether ``error`` is a collective that waited past the process group's timeout."""
    return isinstance(error, RuntimeError) and re.search(r"timed? ?out", str(error), re.IGNORECASE) is not None


def peer_gone(error: BaseException) -> str | None:
    """Why a collective failed, as its message says (``Connection closed by peer``), when it failed because another
    process of the run ended; None for any other error."""
    found = _PEER_GONE.search(str(error)) if isinstance(error, RuntimeError) else None
    return None if found is None else found.group(0)


def bounded(call: Callable[[], T], wait: float) -> T:
    """``call()`` (reads and writes of the launch's store), given ``wait`` seconds at most: run in a daemon thread,
    left behind when it takes longer. A TCPStore's client waits for its host's reply without limit (neither its
    timeout nor ``set_timeout`` bounds it): a host that is stopped (SIGSTOP), alive and connected, held it forever.

    Raises:
        TimeoutError: ``call`` did not return within ``wait`` seconds.
    """
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as e:  # raised again in the calling thread
            failure.append(e)

    worker = threading.Thread(target=run, name="swinlite-store", daemon=True)
    worker.start()
    worker.join(wait)
    if failure:
        raise failure[0]
    if not result:
        raise TimeoutError(f"the launch's store did not reply within {wait:g} s; is the process hosting it stopped?")
    return result[0]


def _all_posted(keys: list[str], rank: int, note: str, wait: float) -> bool:
    """Post ``note`` at this process's key of ``keys`` (``rank``'s) in the launch's store, then wait up to ``wait``
    seconds for every other key: whether all were posted (unbounded store calls: run it through :func:`bounded`)."""
    _store.set(keys[rank], note)
    deadline = time.monotonic() + wait
    while not _store.check(keys):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def stalled_ranks(info: DistInfo, wait: float = 30.0) -> list[int] | None:
    """After a collective timed out: the ranks that do not answer within ``wait`` seconds, through the launch's store
    (every process waits ``wait`` seconds at most, and ``STORE_REPLY_WAIT`` more for a store that does not reply;
    gloo's monitored barrier bounded only rank 0's wait, the others waited train.dist_timeout). Empty when all answer.

    None on a rank other than 0 where rank 0 does not answer, or the store does not reply (rank 0 may host it, and
    ended after naming the stalled ranks, or is stopped): rank 0 stalled, or is busy (preparing the data), and names
    the stalled ranks.
    """
    keys = [f"stalled/{rank}" for rank in range(info.world_size)]

    def answered() -> list[int]:
        if _all_posted(keys, info.rank, "here", wait):
            return []
        return [rank for rank, key in enumerate(keys) if not _store.check([key])]

    try:
        silent = bounded(answered, wait + STORE_REPLY_WAIT)
    except (RuntimeError, TimeoutError):  # the store is gone with the rank 0 that hosted it, or does not reply
        if info.rank == 0:
            raise
        return None
    return None if info.rank != 0 and 0 in silent else silent


def all_answer(info: DistInfo, wait: float, note: str) -> bool:
    """Whether every process reaches this call within ``wait`` seconds, each posting ``note`` (why it is here) in the
    launch's store: False on a process that waited for one busy elsewhere (in a collective of the process group that
    it will not leave), which must then make no collective; False too where the store does not reply (its host is
    stopped). Through the store, every process waits ``wait`` seconds at most, and ``STORE_REPLY_WAIT`` more for a
    store that does not reply (a monitored barrier bounds only rank 0's wait: the others waited train.dist_timeout,
    and so did the busy process, in its collective, for them to end)."""
    global _answers
    if not info.enabled:
        return True
    _answers += 1
    keys = [f"answer{_answers}/{rank}" for rank in range(info.world_size)]

    try:
        return bounded(lambda: _all_posted(keys, info.rank, note, wait), wait + STORE_REPLY_WAIT)
    except TimeoutError:
        return False


def notes_elsewhere(info: DistInfo) -> list[str]:
    """The notes the other processes posted in :func:`all_answer` calls this process did not make (each
    ``rank N: ...``): why a collective of this one failed or timed out, where one of them said it. None found where the
    store does not reply within ``STORE_REPLY_WAIT`` seconds (its host is stopped) or is gone."""
    if not info.enabled or _store is None:
        return []
    keys = [f"answer{_answers + 1}/{rank}" for rank in range(info.world_size) if rank != info.rank]
    try:
        return bounded(lambda: [_store.get(key).decode() for key in keys if _store.check([key])], STORE_REPLY_WAIT)
    except (RuntimeError, TimeoutError):
        return []


def evaluate_in_step(model: nn.Module, info: DistInfo) -> None:
    """Before an evaluation through the DDP ``model`` (compiled or not): rank 0's buffers on every process, and DDP's
    own broadcast of them in its next forward turned off, as DDP turns it off after a forward without gradients.

    DDP broadcasts rank 0's buffers in the first forward after a training step: a collective inside the forward. A
    process with no batch to evaluate (an empty val shard, or one whose every image failed to decode) makes no
    forward, and its next collective met that broadcast: every process then waited ``train.dist_timeout``. Made
    here, by every process before evaluating, the broadcast cannot be skipped.
    """
    ddp = getattr(model, "_orig_mod", model)  # torch.compile's wrapper holds the DDP module
    if not info.enabled or not isinstance(ddp, nn.parallel.DistributedDataParallel):
        return
    share_buffers(ddp.module, info)
    ddp.require_forward_param_sync = False


def share_buffers(module: nn.Module, info: DistInfo) -> None:
    """Rank 0's buffers (BatchNorm's running statistics) on every process, so that every shard of an evaluation
    scores the model rank 0 saves. The EMA copy needs it too: each process averages its own buffers into it, which
    DDP's broadcast never reaches (timm's train.py calls ``distribute_bn`` on its EMA model for the same reason)."""
    if info.enabled:
        for buffer in module.buffers():
            dist.broadcast(buffer, src=0)


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def all_reduce_sum(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Sum a few numbers over all processes (identity when single-process)."""
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def all_gather_object(obj: Any, info: DistInfo) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every process (``[obj]`` when single-process)."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, info: DistInfo) -> Any:
    """Rank 0's ``obj`` on every process."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@contextlib.contextmanager
def refused_alike(info: DistInfo) -> Iterator[None]:
    """Around work every process does alike from what they share (``--resume`` loading the same file into the same
    model): a ValueError raised in the block is said once. Every process then raises a :class:`SharedError` (rank 0
    alone says it) with rank 0's message, or, where rank 0 had none, the first other rank's, prefixed ``rank N:``;
    they stop together, rather than the others waiting at their next collective for one that ended. A collective:
    every process must enter the block; what it runs makes none after a ValueError one process may raise alone (a
    task's data scan, rank 0's alone, broadcast with its refusal, comes before the checks of what each one read)."""
    if not info.enabled:
        yield
        return
    problem: ValueError | None = None
    try:
        yield
    except SharedError:  # raised alike by every process already (a broadcast refusal): nothing to gather
        raise
    except ValueError as e:
        problem = e
    said = all_gather_object(None if problem is None else str(problem), info)
    refused = [(rank, text) for rank, text in enumerate(said) if text is not None]
    if refused:
        rank, text = refused[0]
        raise SharedError(text if rank == 0 else f"rank {rank}: {text}") from problem


def cleanup(info: DistInfo) -> None:
    global _store, _answers
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
    _store, _answers = None, 0
