"""Two processes of a training script as ``torchrun --nproc_per_node=2`` places them (RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT in the environment), forked from the test's process: torch, timm and swinlite are imported already.
And torchrun itself, its agent forked from the test's process (:func:`torchrun`), its processes fresh ones.

For a launch refused before training (its startup checks, the handshake): see forkkit for why a forked child must
not train."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from scriptkit import run_script, script_env


def report_and_exit(reports: list[Path], rank: int, said: str, wait: float = 30) -> None:
    """End a forked rank of :func:`forked_pair`: write its report (``reports[rank]``), stay until every later rank has
    written its own (rank 0 hosts the launch's store: leaving first would cut the others off), at most ``wait``
    seconds, and exit without Python's teardown."""
    reports[rank].write_text(said)
    stay_until_reported(reports, rank, wait)
    os._exit(0)


def stay_until_reported(reports: list[Path], rank: int, wait: float = 30) -> None:
    """Wait until every rank after ``rank`` has written its report (``reports``), at most ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while not all(r.exists() for r in reports[rank + 1 :]) and time.monotonic() < deadline:
        time.sleep(0.05)


def forked_pair(target: Callable[..., None], args: tuple = (), timeout: float = 60) -> tuple[list[int], float]:
    """Fork rank 0 and rank 1, each running ``target(rank, port, *args)`` (``port``: a free one, for the launch's
    store), each waited for up to ``timeout`` s (then SIGKILLed); their exit codes and the seconds until both ended."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fork = multiprocessing.get_context("fork")
    procs = [fork.Process(target=target, args=(rank, port, *args)) for rank in range(2)]
    start = time.monotonic()
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=timeout)
        seconds = time.monotonic() - start
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join()
    return [p.exitcode for p in procs], seconds


def _rank(rank: int, port: int, script: str, argvs: list[list[str]], cwds: list[Path | None], logs: list[Path]) -> None:
    """One process: ``scripts/<script>.py`` with its ``argvs[rank]`` in its ``cwds[rank]``, its output into its
    ``logs[rank]``, its exit code as the process's."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    output = os.open(logs[rank], os.O_WRONLY | os.O_CREAT)
    os.dup2(output, 1)
    os.dup2(output, 2)
    sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)
    code = 1
    try:
        if cwds[rank] is not None:
            os.chdir(cwds[rank])
        code = run_script(script, argvs[rank])
    finally:
        sys.stdout.flush()
        os._exit(code)


def two_ranks(
    script: str, argvs: list[list[str]], logs: Path, cwds: list[Path | None] | None = None, timeout: float = 60
) -> tuple[list[int], list[str], float]:
    """Run rank 0 and rank 1 of ``scripts/<script>.py`` (rank r with ``argvs[r]``, in ``cwds[r]`` where given), each
    waited for up to ``timeout`` s (then SIGKILLed); their exit codes, what each printed (``logs/rank<r>.log``), and
    the seconds until both ended."""
    paths = [logs / f"rank{rank}.log" for rank in range(2)]
    codes, seconds = forked_pair(_rank, (script, argvs, cwds or [None, None], paths), timeout)
    return codes, [path.read_text() for path in paths], seconds


def _agent(args: list[str], out: Path, err: Path) -> None:
    """torchrun's agent in a forked process: its output (and its processes') into ``out`` and ``err``, the scripts'
    environment, then torchrun's ``main``; its exception, a failed launch's summary, is printed as from the command
    line (multiprocessing prints it; exit code 1)."""
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # torch's loggers write to sys.stderr as it is when they do
    os.environ.update(script_env())
    from torch.distributed import run

    run.main(args)


def torchrun(args: list[str], logs: Path, timeout: float) -> subprocess.CompletedProcess:
    """``torchrun ARGS`` in the scripts' environment (``scriptkit.script_env``), as ``subprocess.run`` gives it: exit
    code, stdout and stderr (through ``logs/torchrun.{out,err}``); past ``timeout`` s the agent is SIGKILLed and
    ``subprocess.TimeoutExpired`` raised. The agent (torchrun's ``main``, which trains nothing) is forked from the
    test's process, where torch is imported already: ``python -m torch.distributed.run`` spends 2 s or more of each
    launch importing it. The processes it starts are fresh interpreters, as torchrun starts them."""
    out, err = logs / "torchrun.out", logs / "torchrun.err"
    agent = multiprocessing.get_context("fork").Process(target=_agent, args=(args, out, err))
    agent.start()
    agent.join(timeout)
    if agent.exitcode is None:
        os.kill(agent.pid, signal.SIGKILL)
        agent.join()
        raise subprocess.TimeoutExpired(["torchrun", *args], timeout)
    return subprocess.CompletedProcess(["torchrun", *args], agent.exitcode, out.read_text(), err.read_text())
