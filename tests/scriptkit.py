"""The scripts under ``scripts/`` in this process: loaded as modules, or run as from the command line."""

from __future__ import annotations

import errno
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))  # the scripts import their shared _cli.py as `python scripts/x.py` would


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module: its ``main(argv)`` runs without the command-line runner."""
    spec = importlib.util.spec_from_file_location(f"script_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(name: str, argv: list[object]) -> int:
    """``python scripts/<name>.py ARGV`` in this process, through its runner (``_cli.run``); returns the exit code."""
    module = load_script(name)
    try:
        return module.run(module.main, [str(a) for a in argv])
    except SystemExit as e:  # a user error (the runner's or argparse's) exits 2 at once
        return e.code


def script_env() -> dict[str, str]:
    """The environment for a script subprocess: this checkout first on the path, one thread (as the in-process
    runs of the tests, and kind to a shared CPU)."""
    return os.environ | {"PYTHONPATH": os.pathsep.join([str(REPO), *sys.path]), "OMP_NUM_THREADS": "1"}


def evaluation_inputs(root: Path, script: str, segmenter: Path | None) -> Path | None:
    """What an evaluate script reads before its output folder, for a test of that folder's checks whose data argument
    is ``root/data``: evaluate_detection.py's COCO layout there (an annotation file and an image folder: their paths
    are checked first; neither is read before the folder), evaluate_segmentation.py's image and mask folder and its
    checkpoint (``segmenter``, returned: its test flags are checked against it first); None for other scripts."""
    if script == "evaluate_detection":
        (root / "data" / "val2017").mkdir(parents=True, exist_ok=True)
        (root / "data" / "annotations").mkdir(exist_ok=True)
        (root / "data" / "annotations" / "instances_val2017.json").write_text("{}\n")
    if script != "evaluate_segmentation":
        return None
    (root / "data").mkdir(parents=True, exist_ok=True)
    return segmenter


def interrupt_second_png(monkeypatch) -> None:
    """The second PNG a script writes (``files.atomic_write_png``) is interrupted, as Ctrl-C does: the first is on
    disk, nothing after it (a drawing script's run killed after its first drawing)."""
    from swinlite import files

    write, calls = files.atomic_write_png, []

    def interrupted(path, image) -> None:
        calls.append(path)
        if len(calls) > 1:
            raise KeyboardInterrupt
        write(path, image)

    monkeypatch.setattr(files, "atomic_write_png", interrupted)


def disk_full_after_first_file(monkeypatch, folder: Path) -> None:
    """The disk fills once a script has written its first file in ``folder``: every later write of one there fails
    with ENOSPC, naming no file, as a full disk's does (``atomic_write``'s rename, which each of its writers makes;
    hidden files, a lock's, are left to write)."""
    replace, written = os.replace, []

    def full(src, dst, *args, **kwargs) -> None:
        dst = Path(dst)
        if dst.resolve().parent == folder.resolve() and not dst.name.startswith("."):
            if written:
                raise OSError(errno.ENOSPC, "No space left on device")
            written.append(dst)
        replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full)
