"""Crash-safe file writing: a reader only ever sees the old file or the complete new one."""

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save as safetensors_bytes


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, rename it over ``path``, fsync the folder.

    A kill at any moment leaves either the previous file or the complete new one under ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
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


def save_safetensors(
    path: str | os.PathLike, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, Any] | None = None
) -> None:
    """Save tensors atomically as safetensors; metadata values are stored as JSON strings."""
    contiguous = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    meta = {k: json.dumps(v) for k, v in (metadata or {}).items()}
    atomic_write_bytes(path, safetensors_bytes(contiguous, metadata=meta or None))
