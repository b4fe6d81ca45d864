"""The training scripts' body after their arguments are parsed: load the config, print it or run it.

User errors propagate to the script's runner (``scripts/_cli.py``, the one that turns them into one ``error: ...``
line and exit code 2); a stalled process is one line and exit code 1, an interrupt a hint to ``--resume``
(when there is something to resume).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from .checkpoint import RESUME_FILE
from .config import to_dict
from .distributed import StalledRankError, launched
from .run import run
from .task import Task


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
    cfg = task.load_config(config, overrides)
    if print_config:
        print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
        return 0
    try:
        run(task, cfg, resume=resume, overwrite=overwrite)
    except StalledRankError as e:
        print("error: " + " ".join(str(e).split()), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if launched().is_main:  # under torchrun every process is interrupted; one hint is enough
            print(interrupted(Path(cfg.train.output_dir)), file=sys.stderr)
        return 130
    return 0


def interrupted(out: Path) -> str:
    """What an interrupted run leaves: the resume file to continue from, or nothing to resume yet."""
    if (out / RESUME_FILE).is_file():
        return f"interrupted; continue from {out / RESUME_FILE} with --resume"
    return (
        f"interrupted before the first save; nothing to resume ({RESUME_FILE} is written after each epoch, and every "
        "train.save_every_steps steps)"
    )
