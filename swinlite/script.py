"""What every command line of swinlite does around its ``main``: a user error is one ``error: ...`` line and exit
code 2, a missing optional package names its extra, a Python warning is one ``warning: ...`` line.

A script outside this repository (a task of your own, trained with ``swinlite.engine.cli.run_from_cli``) ends as the
scripts in ``scripts/`` do::

    from swinlite.script import run

    def main(argv: list[str] | None = None) -> int:
        ...
        return run_from_cli(MyTask, args.config, args.overrides, ...)

    if __name__ == "__main__":
        sys.exit(run(main))

It imports nothing but the standard library (``scripts/_cli.py`` runs this file alone and re-exports it, so that
``--help`` answers before torch loads): the package's modules it names (:func:`other_task_key`) are looked up once
they raised the error.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

# OSError covers missing files, folders that are files, permissions, a full disk: nothing a traceback explains better.
USER_ERRORS = (ValueError, OSError)

# Optional dependencies (pyproject.toml's [project.optional-dependencies]) by import name -> the extra that has them.
OPTIONAL = {
    "yaml": "train",
    "matplotlib": "train",
    "sklearn": "train",
    "tensorboard": "train",
    "pycocotools": "detection",
    "onnx": "export",
    "onnxscript": "export",
    "onnx_ir": "export",
    "onnxruntime": "export",
}

# pip's name where it is not the import name
PIP_NAMES = {"sklearn": "scikit-learn", "yaml": "PyYAML", "onnx_ir": "onnx-ir"}

# The training scripts: the task each trains and its config class (module, name), to name another task's config key.
TRAIN_SCRIPTS = {
    "scripts/train.py": ("classification", "swinlite.classification.config", "Config"),
    "scripts/train_detection.py": ("detection", "swinlite.detection.config", "DetConfig"),
    "scripts/train_segmentation.py": ("segmentation", "swinlite.segmentation.config", "SegConfig"),
}


# Seconds a process of a launch that ends before its startup checks waits for each step of telling the others, and
# the training engine's function (module, name) that tells them, looked up on the way out of such a process alone.
LAUNCH_WAIT = 5.0
LAUNCH_TELLER = ("swinlite.engine.handshake", "refuse_before_checks")

# Seconds a process of a torchrun launch whose error another process says waits for torchrun to end it (then it exits
# as before): that one says it, exits, and torchrun ends the rest by SIGTERM (its monitor looks every 0.1 s).
SAID_ELSEWHERE_WAIT = 30.0


class UserExit(SystemExit):
    """:func:`fail`'s exit: code 2, with the line it printed (``message``), for the other processes of a launch."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message


def fail(message: str) -> NoReturn:
    """Print ``error: message`` (one line) on stderr and exit with code 2."""
    line = " ".join(message.split("\n"))
    print("error: " + line, file=sys.stderr)
    raise UserExit(line)


def missing_extra(error: ModuleNotFoundError, user: str = "this script") -> str | None:
    """The one-line message for an optional dependency that is not installed (``user`` needs it), or None for any
    other module."""
    package = (error.name or "").split(".")[0]
    extra = OPTIONAL.get(package)
    if extra is None:
        return None
    install = f'pip install -e ".[{extra}]" (or pip install {PIP_NAMES.get(package, package)})'
    return f"{user} needs the optional package {package!r}: {install}"


def extra_error(error: ModuleNotFoundError, user: str) -> ModuleNotFoundError:
    """``error`` as a module of the library that ``user`` names raises it to a Python user: with
    :func:`missing_extra`'s message where an extra holds the package, and its ``name`` (a script names the extra as
    before); ``error`` itself for any other module."""
    message = missing_extra(error, user)
    return error if message is None else ModuleNotFoundError(message, name=error.name)


def other_task_key(error: Exception) -> str | None:
    """For an unknown config key (``swinlite.engine.config.UnknownKeyError``) that a shipped task's config has (the
    training scripts of :data:`TRAIN_SCRIPTS`), the message that says so, instead of a "did you mean" among this
    config's keys (train_detection.py's ``train.label_smoothing`` suggested ``train.best_of``); None for any other
    error. A config of none of those scripts (a task of your own) is named by its class. The package is loaded by
    then (it raised the error), torch with it."""
    config = sys.modules.get("swinlite.engine.config")
    if config is None or not isinstance(error, config.UnknownKeyError):
        return None
    this, owners = None, []
    for script, (task, module, name) in TRAIN_SCRIPTS.items():
        cls = getattr(importlib.import_module(module), name)
        if cls is error.config:
            this = script
        elif error.key in config.valid_keys(cls()):
            owners.append((task, script))
    if not owners:
        return None
    if this is None:
        this = f"the config {error.config.__module__}.{error.config.__qualname__}"
    tasks, scripts = " and ".join(t for t, _ in owners), ", ".join(s for _, s in owners)
    return f"{error.key} is a {tasks} setting ({scripts}); {this} has no such key"


def _warning_line(message, category, filename, lineno, line=None) -> str:
    """A Python warning as one ``warning: ...`` line (no file, line number or source line)."""
    return "warning: " + " ".join(str(message).split()) + "\n"


@contextlib.contextmanager
def script_output() -> Iterator[None]:
    """While a script runs: stdout writes file names that are not UTF-8 with escapes (it never fails printing after
    the work is done), and a warning prints as one ``warning: ...`` line; both as before afterwards."""
    stdout = sys.stdout
    errors = stdout.errors if hasattr(stdout, "reconfigure") else None  # a TextIOWrapper, as the console's
    if errors is not None:
        stdout.reconfigure(errors="backslashreplace")
    formatwarning, warnings.formatwarning = warnings.formatwarning, _warning_line
    try:
        yield
    finally:
        warnings.formatwarning = formatwarning
        if errors is not None:
            stdout.reconfigure(errors=errors)


def traceback_wanted() -> bool:
    """Whether ``SWINLITE_TRACEBACK`` asks for the traceback of a user error: any value but empty, ``0``, ``false``,
    ``no`` or ``off`` (any case)."""
    return os.environ.get("SWINLITE_TRACEBACK", "").strip().lower() not in ("", "0", "false", "no", "off")


def _world_size() -> int:
    """The processes the environment says this one is of (``WORLD_SIZE``, as torchrun sets it): 1 where it is unset or
    no number (the engine names such a value when it joins)."""
    world = os.environ.get("WORLD_SIZE", "1").strip()
    return int(world) if world.isdigit() else 1


def said_elsewhere() -> int:
    """The exit code (2) of a process that ends on an error another process of its launch says (each machine's first,
    or rank 0), returned under ``torchrun`` (``TORCHELASTIC_RUN_ID`` set) only after :data:`SAID_ELSEWHERE_WAIT`
    seconds, in which torchrun ends it (SIGTERM) once that process said the error and exited. Exiting at once, this
    process was the launch's first failure: torchrun ended the others by SIGTERM, the one to say the error maybe before
    it said it (no message at all), and its summary named this quiet one as the root cause. Call it where SIGTERM ends
    the process as by default (outside :func:`swinlite.sigterm.terminate_as_interrupt`'s block): it ends without a
    word. Processes started by hand (no torchrun to end them) return at once."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        time.sleep(SAID_ELSEWHERE_WAIT)
    return 2


def check_one_process() -> None:
    """Refuse a script that runs on one process started as one of several (``torchrun --nproc_per_node=2``: its
    ``WORLD_SIZE``): each process ran the whole work and wrote the same files (two summaries, a race on one folder).
    The message names the environment as the cause: a ``WORLD_SIZE`` left in a plain ``python`` environment (a
    Kubernetes PyTorchJob pod sets it in every container) refuses it too. Only under ``torchrun`` (which sets
    ``TORCHELASTIC_RUN_ID``) do the processes but each machine's first (``LOCAL_RANK`` 0) say nothing: they wait for
    torchrun to end them once that one said it (:func:`said_elsewhere`); a process started by hand always prints its
    line."""
    world = _world_size()
    if world <= 1:
        return
    if "TORCHELASTIC_RUN_ID" in os.environ and os.environ.get("LOCAL_RANK", "0").strip() != "0":
        sys.exit(said_elsewhere())
    script = Path(sys.argv[0]).name or "this script"
    fail(f"the environment says this is one of {world} processes (WORLD_SIZE={world}, as torchrun sets it): "
         f"{script} runs on one: start it with python alone, with WORLD_SIZE unset or 1")  # fmt: skip


def exit_message(error: SystemExit) -> str | None:
    """What a process that exits with ``error`` tells the others of its launch: the line :func:`fail` printed, else
    its exit code (a parser of one's own printed its message); None for a success (``--help``)."""
    if isinstance(error, UserExit):
        return error.message
    if error.code in (0, None):
        return None
    if isinstance(error.code, str):
        return error.code
    return f"it exited with code {error.code} before its startup checks (its own output says why)"


def tell_launch(message: str | None) -> None:
    """Where the environment says this is one process of a launch of several (``WORLD_SIZE`` above 1 and
    ``MASTER_ADDR``: started by hand, or by torchrun) that ends on ``message`` before its startup checks, tell the
    others through the launch's store (:data:`LAUNCH_TELLER`): started by hand, nothing
    else ends them, and they waited ``train.dist_timeout`` for it. Bounded (:data:`LAUNCH_WAIT` a step): no store
    reached, it exits as before. Torch loads here only, on the way out of such a process."""
    if message is None or _world_size() <= 1 or not os.environ.get("MASTER_ADDR"):
        return
    module, name = LAUNCH_TELLER
    try:
        tell = getattr(importlib.import_module(module), name)
    except ImportError:  # no torch: no launch to tell
        return
    tell(message, LAUNCH_WAIT)


def run(
    main: Callable[[list[str] | None], object],
    argv: list[str] | None = None,
    passive_threads: bool = True,
    one_process: bool = False,
) -> int:
    """Run a script's ``main``: user errors (:data:`USER_ERRORS`, a missing optional package) print one line and exit
    with code 2; returns ``main``'s exit code (0 when it returns none).

    Set ``SWINLITE_TRACEBACK=1`` to see the traceback instead (:func:`traceback_wanted`).

    Args:
        main: the script's ``main(argv)``.
        argv: its arguments (None: the command line's).
        passive_threads: idle OpenMP threads sleep instead of spinning (set before torch loads): on shared CPUs
            spinning threads waste the cores others (and the data loader) need. Off for timing runs.
        one_process: the script runs on one process: refused first, under ``torchrun`` or a ``WORLD_SIZE`` above 1
            (:func:`check_one_process`; every script but the training ones, which ``torchrun`` runs on several).
            Else an error that ends a process of a launch before its startup checks is told to the others
            (:func:`tell_launch`).
    """
    if one_process:
        check_one_process()
        return _run(main, argv, passive_threads)
    try:
        return _run(main, argv, passive_threads)
    except SystemExit as e:
        tell_launch(exit_message(e))
        raise
    except Exception as e:  # no user error (or SWINLITE_TRACEBACK): its traceback follows
        tell_launch(f"{type(e).__name__}: {e}")
        raise


def _run(main: Callable[[list[str] | None], object], argv: list[str] | None, passive_threads: bool) -> int:
    """:func:`run`'s work, without telling a launch."""
    if passive_threads:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with script_output():
        try:
            code = main(argv)
        except ModuleNotFoundError as e:
            message = missing_extra(e)
            if message is None or traceback_wanted():
                raise
            fail(message)
        except USER_ERRORS as e:
            if traceback_wanted():
                raise
            fail(other_task_key(e) or str(e))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
    return code if isinstance(code, int) else 0
