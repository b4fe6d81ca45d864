"""The training scripts' body after their arguments are parsed: load the config, run, and answer every user
error with one ``error: ...`` line (exit code 2), a stalled process with one line (exit code 1)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

from .config import to_dict
from .distributed import StalledRankError
from .run import run
from .task import Task

USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def _error(message: str, code: int) -> int:
    print("error: " + " ".join(message.split()), file=sys.stderr)  # one line, whatever the message holds
    return code


def run_from_cli(
    task: type[Task],
    config: str | Path,
    overrides: list[str],
    resume: bool = False,
    overwrite: bool = False,
    print_config: bool = False,
) -> int:
    """Train ``task`` from a config file and ``key=value`` overrides; returns the exit code.

    ``FileNotFoundError`` covers swinlite's ``WeightsUnavailableError``. Set ``SWINLITE_TRACEBACK=1`` to see the
    traceback of a user error instead of its line.
    """
    try:
        cfg = task.load_config(config, overrides)
        if print_config:
            print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
            return 0
        run(task, cfg, resume=resume, overwrite=overwrite)
    except USER_ERRORS as e:
        if os.environ.get("SWINLITE_TRACEBACK"):
            raise
        return _error(str(e), 2)
    except StalledRankError as e:
        return _error(str(e), 1)
    except KeyboardInterrupt:
        print("interrupted; continue with --resume", file=sys.stderr)
        return 130
    return 0
