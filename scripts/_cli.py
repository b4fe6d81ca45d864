"""Command-line plumbing shared by the scripts: a user error is one ``error: ...`` line and exit code 2.

It imports nothing heavy, so every script answers ``--help`` before torch and timm load; each script
parses its arguments first and imports the package afterwards.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NoReturn

# On shared CPUs, spinning OpenMP threads waste the cores others (and our own loader) need; set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def fail(message: str) -> NoReturn:
    """Print ``error: message`` on stderr and exit with code 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


class Parser(argparse.ArgumentParser):
    """argparse with the module docstring as description, and its errors as one line (no usage block)."""

    def __init__(self, doc: str | None, **kwargs) -> None:
        super().__init__(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see {self.prog} --help)")

    def add_compile_argument(self, note: str = "") -> None:
        """``--compile``: run the model through ``swinlite.optimize_for_inference``, compiled once."""
        self.add_argument(
            "--compile",
            action="store_true",
            help="compile with swinlite.optimize_for_inference (inductor freezing) for batches of --batch-size; "
            "smaller batches (the last one) are zero-padded to that size and the padded outputs dropped, so it "
            "compiles once; outputs equal eager to 1e-4" + note,
        )


def run(main: Callable[[list[str] | None], object]) -> int:
    """Run a script's ``main``: the package's user errors (ValueError, missing files) print one line, exit 2.

    Set ``SWINLITE_TRACEBACK=1`` to see the traceback instead.
    """
    try:
        main(None)
    except USER_ERRORS as e:
        if os.environ.get("SWINLITE_TRACEBACK"):
            raise
        fail(str(e))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0
