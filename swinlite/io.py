"""Crash-safe file writing: a reader only ever sees the old file or the complete new one.

Files get the mode any tool's output gets, 0666 less the umask (0644 with the usual umask 022), not
the 0600 of the temporary file they are written as.
"""

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import torch
from safetensors.torch import save as safetensors_bytes


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it; restored at once
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Fill a temporary file beside ``path`` through ``write(file)``, fsync it, rename it over ``path``.

    A kill at any moment leaves either the previous file or the complete new one under ``path``; a
    kill mid-write leaves a ``.<name>.tmp*`` file beside it, which the next write does not need.

    Args:
        path: destination; its folder is created if missing.
        write: fills the open binary file it is given.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    except OSError:  # some filesystems cannot fsync a folder
        pass
    finally:
        os.close(dir_fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(data))


def save_safetensors(
    path: str | os.PathLike, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, Any] | None = None
) -> None:
    """Save tensors atomically as safetensors; metadata values are stored as JSON strings."""
    contiguous = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    meta = {k: json.dumps(v) for k, v in (metadata or {}).items()}
    atomic_write_bytes(path, safetensors_bytes(contiguous, metadata=meta or None))


def build_folder_once(root: str | os.PathLike, marker: str, build: Callable[[Path], str], what: str) -> Path:
    """Build a generated folder once, atomically: a kill mid-build never leaves a partial folder at ``root``.

    Args:
        root: destination; returned as it is when it already holds ``marker`` (built before).
        marker: name of the file that marks a finished build.
        build: fills the temporary folder it is given and returns the text written to the marker.
        what: what the folder is, for the error when ``root`` holds something else.

    Returns:
        ``root`` as a Path.
    """
    root = Path(root)
    if (root / marker).is_file():
        return root
    if root.exists() and any(root.iterdir()):
        raise ValueError(f"{root} exists and is not a {what} folder; choose another data.data_dir")
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        (tmp / marker).write_text(build(tmp))  # the marker last: only a finished build has it
        if root.exists():
            root.rmdir()  # empty, checked above
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root
