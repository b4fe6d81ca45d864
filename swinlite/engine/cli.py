"""The training scripts' body after their arguments are parsed: load the config, print it or run it.

User errors propagate to the script's runner (``swinlite.script.run``, which ``scripts/_cli.py`` re-exports, the one
that turns them into one ``error: ...`` line and exit code 2; one every process raises alike, ``SharedError``, from rank
0 alone, and a refusal of the checks made before the processes join, of the config, the data's folders, the output
folder, from each machine's first process alone, ``checked_alike``, named by rank where another process alone failed
them, ``handshake``; under ``torchrun`` the processes that do not say it wait for torchrun to end them once the one that
says it exited, ``said_elsewhere``, so that its line is printed and torchrun names it first); a stalled process, and
another process's end (killed, or failed), is one line and exit code 1 (the latter with a hint to ``--resume``), an
interrupt (Ctrl-C, exit code 130) or a SIGTERM (``kill``, a scheduler's stop; exit code 143) a hint to ``--resume``
(when there is something to resume), on rank 0; where rank 0 was killed (SIGKILL, a crash: it says nothing) and
``torchrun`` ended the others by SIGTERM, on the one process that finds rank 0's lock on the output folder left behind
(:func:`holder_killed`).
"""

from __future__ import annotations

import fcntl
import math
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..lock import LOCK_FILE
from ..script import said_elsewhere
from ..sigterm import Terminated, terminate_as_interrupt
from .checkpoint import RESUME_FILE
from .config import dump_yaml, load_config, to_dict
from .distributed import PeerGoneError, SharedError, StalledRankError, launched
from .handshake import checked_alike
from .rank_warnings import SharedWarnings
from .run import check_resume_or_overwrite, run
from .task import Task
from .trainer import home_expanded


def run_from_cli(
    task: type[Task],
    config: str | Path,
    overrides: list[str],
    resume: bool = False,
    overwrite: bool = False,
    print_config: bool = False,
) -> int:
    """Train ``task`` from a config file and ``key=value`` overrides; returns the exit code.

    Raises:
        ValueError, OSError: a user error (a setting, the data, the output folder), for the script's runner.
    """
    if print_config:
        return show_config(task.config, config, overrides, resume, overwrite)
    cfg = _loaded(task.config, config, overrides)
    if cfg is None:
        return said_elsewhere()
    try:
        with terminate_as_interrupt():
            run(task, cfg, resume=resume, overwrite=overwrite, config=config)
    except SharedError:
        if launched().is_main:  # every process raised it alike (under torchrun, once per process before)
            raise
        return said_elsewhere()
    except (StalledRankError, PeerGoneError) as e:  # each process left says it: the one that ended may be rank 0
        print("error: " + interrupted(Path(cfg.train.output_dir), " ".join(str(e).split())), file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        word = "terminated" if isinstance(e, Terminated) else "interrupted"
        out = Path(cfg.train.output_dir)
        if launched().is_main:  # under torchrun every process is interrupted; one hint is enough
            print(interrupted(out, word), file=sys.stderr)
        elif isinstance(e, Terminated) and holder_killed(out):  # torchrun's SIGTERM after rank 0 was killed
            print(interrupted(out, f"{word} as rank 0 ended without a word (killed?)"), file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(e, Terminated) else 130
    return 0


def show_config(
    config: type, path: str | Path, overrides: list[str], resume: bool = False, overwrite: bool = False
) -> int:
    """``--print-config``: the task's ``config`` dataclass loaded from its defaults, the file at ``path`` and
    ``overrides``, printed as YAML that reads back identically as a ``--config`` file; returns the exit code. It needs
    the config class alone, not the task, whose imports may need an extra (detection's pycocotools). ``resume`` and
    ``overwrite`` are the options the run would be given: refused together, as the run refuses them, and ``resume``
    alone too (:func:`check_printable`).

    Raises:
        ValueError: the settings, or ``resume``.
    """
    cfg = _loaded(config, path, overrides, lambda cfg: check_printable(cfg, resume, overwrite))
    if cfg is None:
        return said_elsewhere()
    print(dump_yaml(to_dict(cfg)), end="")
    return 0


def check_printable(cfg: Any, resume: bool, overwrite: bool) -> None:
    """ValueError for ``--print-config`` with ``--resume`` and ``--overwrite`` (:func:`check_resume_or_overwrite`), and
    with ``--resume``: it printed a new run's settings as if they were the resumed run's, whose unset ``data.mean``
    and such are those its ``OUT/config.yaml`` records (:func:`~swinlite.engine.preflight.resolve_normalisation`)."""
    check_resume_or_overwrite(resume, overwrite)
    if resume:
        recorded = Path(cfg.train.output_dir) / "config.yaml"
        raise ValueError(
            f"--print-config prints a new run's settings, not a resumed one's: {recorded} holds those the run resumes "
            "with (--resume warns of each setting this command changes)"
        )


def _loaded(
    config: type, path: str | Path, overrides: list[str], check: Callable[[Any], None] | None = None
) -> Any | None:
    """``config`` loaded as :meth:`Task.load_config` loads it, ``~`` expanded, then given to ``check``; None where the
    settings (or ``check``) were refused, which the machine's first process says (under torchrun every process reads
    the same file and overrides, and rank 0 alone shows what they warn of)."""
    try:
        with SharedWarnings(launched()), checked_alike(launched()):
            cfg = home_expanded(load_config(config(), path, overrides))
            if check is not None:
                check(cfg)
            return cfg
    except SharedError:
        return None


def holder_killed(out: Path) -> bool:
    """Whether the run's lock on ``out`` (``OUT/.lock``, rank 0's: :class:`~swinlite.lock.OutputLock`) was left by a
    process of this launch that ended without releasing it (killed, or crashed: the OS freed the lock, the file
    stayed), claimed here (the file removed, as a release removes it) so that one process of the run alone answers
    True. False where it is held (rank 0 runs on, and says its own hint), gone (released, or never taken), or left by
    an earlier launch (taken before this process started: rank 0 of this one had not taken it yet, and its next
    run's note on the dead holder is kept)."""
    path = out / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        taken = os.fstat(fd)
        if os.stat(path).st_ino != taken.st_ino or taken.st_mtime < process_start():  # claimed, or an earlier one
            return False
        path.unlink()
        return True
    except OSError:  # held (BlockingIOError), or removed meanwhile
        return False
    finally:
        os.close(fd)


def process_start() -> float:
    """When this process started (seconds since the epoch, to the second: the kernel's boot time is whole seconds);
    ``inf`` where ``/proc`` does not say (not Linux), so that no lock is taken for this launch's."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()  # after the command's "(name)"
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, StopIteration):
        return math.inf
    return int(boot.split()[1]) + int(fields[19]) / os.sysconf("SC_CLK_TCK") - 1  # starttime; btime rounds down


def interrupted(out: Path, word: str = "interrupted") -> str:
    """What an interrupted (or terminated: ``word``) run leaves: the resume file to continue from, or nothing to
    resume yet."""
    if (out / RESUME_FILE).is_file():
        return f"{word}; continue from {out / RESUME_FILE} with --resume"
    return (
        f"{word} before the first save; nothing to resume ({RESUME_FILE} is written after each epoch, and every "
        "train.save_every_steps steps)"
    )
