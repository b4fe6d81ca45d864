"""Files: reading weights, checking an output path before any work, and crash-safe writing.

- :func:`read_state_dict` and :func:`read_metadata` are the one reader of weights files (safetensors, or
  torch checkpoints loaded with ``weights_only=True``); a file that is missing, empty, truncated or not
  a weights file is a ValueError naming it.
- :func:`check_output` is the one check every writer makes before it starts: no output replaces an input,
  and the output can be written where it is asked for.
- :func:`json_bytes` is the one JSON writer of the files users read: strict JSON, NaN as null.
- :func:`atomic_write` and its helpers: a reader only ever sees the old file or the complete new one.
  Files get the mode any tool's output gets, 0666 less the umask (0644 with the usual umask 022), not the
  0600 of the temporary file they are written as.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes

StateDict = dict[str, torch.Tensor]


def unwrap_checkpoint(checkpoint: Mapping[str, object]) -> StateDict:
    """Take the state dict out of a training checkpoint (``{"model": ...}``, ``{"state_dict": ...}``)."""
    for key in ("model", "state_dict", "model_ema", "module"):
        inner = checkpoint.get(key)
        if isinstance(inner, Mapping) and any(isinstance(v, torch.Tensor) for v in inner.values()):
            return dict(inner)
    return {k: v for k, v in checkpoint.items() if isinstance(v, torch.Tensor)}


def _check_file(path: Path) -> None:
    if not path.exists():
        raise ValueError(f"checkpoint {str(path)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"checkpoint {str(path)!r} is not a file")
    if path.stat().st_size == 0:
        raise ValueError(f"checkpoint {str(path)!r} is empty (0 bytes)")


def is_safetensors(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts as safetensors files do: an 8-byte header length, then the JSON header."""
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


def read_state_dict(path: str | os.PathLike) -> StateDict:
    """The tensors of a safetensors or torch (``weights_only=True``) file; ValueError naming the file otherwise.

    A torch training checkpoint (``{"model": state_dict, ...}``, ``{"state_dict": ...}``) gives its state dict.
    """
    path = Path(path)
    _check_file(path)
    safetensors = is_safetensors(path)
    try:
        if safetensors:
            state = load_file(path)
        else:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(checkpoint, Mapping):
                raise ValueError(f"it holds a {type(checkpoint).__name__}, not a state dict")
            state = unwrap_checkpoint(checkpoint)
    except Exception as e:  # safetensors, pickle and zip readers raise many types for a file that is not theirs
        what = "a damaged (truncated?) safetensors file" if safetensors else "not a weights file"
        raise ValueError(
            f"{str(path)!r} is {what} (expected safetensors or a torch checkpoint): "
            f"{type(e).__name__}: {_first_line(e)}"
        ) from None
    if not state:
        raise ValueError(f"{str(path)!r} holds no tensors")
    return state


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata of a safetensors file, each value JSON-decoded where it parses (else the string as stored).

    Empty for a torch file, or a safetensors file without metadata.
    """
    path = Path(path)
    _check_file(path)
    if not is_safetensors(path):
        return {}
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = f.metadata() or {}
    except Exception as e:  # safetensors raises its own error type for a damaged header
        raise ValueError(
            f"{str(path)!r} is a damaged (truncated?) safetensors file: {type(e).__name__}: {_first_line(e)}"
        ) from None
    meta = {}
    for key, value in raw.items():
        try:
            meta[key] = json.loads(value)
        except json.JSONDecodeError:
            meta[key] = value
    return meta


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, as hex (read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def printable_path(path: str | os.PathLike) -> str:
    """``path`` as text any UTF-8 writer takes: bytes of a file name that are not UTF-8 become ``\\xNN`` escapes."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def json_bytes(value: Any, indent: int | None = None) -> bytes:
    """``value`` as strict JSON (RFC 8259 has no NaN or infinity), UTF-8: non-finite floats become null.

    For the JSON files users read with any tool (``eval.json``, ``detections.json``, extraction settings);
    Python's ``json.dumps`` would write ``NaN``, which strict parsers refuse.
    """
    return json.dumps(_finite_or_null(value), indent=indent, allow_nan=False).encode()


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_null(v) for v in value]
    return value


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "no detail"


def _same(a: Path, b: Path) -> bool:
    """Whether two resolved paths are one file: equal, or hard links to the same inode."""
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def check_output(
    path: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None] = (),
    *,
    option: str = "--output",
    folder: bool = False,
    names: Iterable[str] = (),
) -> None:
    """Check, before any work, that writing ``path`` can succeed and destroys no input.

    Paths are compared after resolving symlinks and relative parts (and hard links by inode).

    Args:
        path: the file (``folder=False``) or the folder (``folder=True``) the caller writes.
        inputs: the files and folders the caller reads (None entries are skipped). A folder counts as read
            whole: an output inside it would be read back as input on the next run.
        option: how the user named ``path``, for the message.
        folder: ``path`` is a folder.
        names: for a folder, the names of the files written in it.

    Raises:
        ValueError: one line naming ``option``: an output would replace an input or lie inside an input
            folder; ``path`` is a folder where a file is expected or a file where a folder is expected; the
            nearest existing folder above it is a file or cannot be written.
    """
    given = Path(path)
    out = given.resolve()
    if folder and out.exists() and not out.is_dir():
        raise ValueError(f"{option} {given} is a file; expected a folder")
    if not folder and out.is_dir():
        raise ValueError(f"{option} {given} is a folder; expected a file name")
    written = [out / name for name in names] if folder else [out]
    for source in (Path(p) for p in inputs if p is not None):
        real = source.resolve()
        for target in written + ([out] if folder else []):
            if _same(target, real) and not real.is_dir():
                raise ValueError(f"{option} {given}: writing {target} would replace the input {source}")
            if real.is_dir() and target.is_relative_to(real):
                raise ValueError(
                    f"{option} {given} lies inside the input folder {source}: what it writes would be read as input; "
                    "choose an output outside it"
                )
    existing = out if folder and out.exists() else out.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{option} {given}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {given}: no permission to write in {existing}")


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
