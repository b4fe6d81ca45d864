"""Files: reading weights, checking an output path before any work, and crash-safe writing.

- :func:`read_state_dict` and :func:`read_metadata` are the one reader of weights files (safetensors, or
  torch checkpoints loaded with ``weights_only=True``); a file that is missing, empty, truncated or not
  a weights file is a ValueError naming it. Given a file's bytes read once (:func:`read_weights_bytes`) they read
  those, not the file as it is by then: what a caller hashes is what it loads.
- :func:`check_output` is the one check every writer makes before it starts: no output replaces an input,
  and the output can be written where it is asked for.
- :func:`json_bytes` is the one JSON writer of the files users read: strict JSON, NaN as null.
- :func:`atomic_write` and its helpers: a reader only ever sees the old file or the complete new one.
  Files get the mode any tool's output gets, 0666 less the umask (0644 with the usual umask 022), not the
  0600 of the temporary file they are written as.

The last three (with :func:`printable_path`) live in :mod:`swinlite.files`, which imports no torch, and are
re-exported here.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes

from .files import (  # noqa: F401 (re-exported)
    _umask,
    atomic_write,
    atomic_write_bytes,
    check_model_path,
    check_output,
    json_bytes,
    printable_path,
)

StateDict = dict[str, torch.Tensor]


# Where a training checkpoint keeps its state dict, in timm's order (``timm.models.load_state_dict``, whose
# ``use_ema`` is True by default): the EMA weights first when the file has them, as timm's train.py saves them.
EMA_KEYS = ("state_dict_ema", "model_ema")
RAW_KEYS = ("state_dict", "model", "module")


def unwrap_checkpoint(checkpoint: Mapping[str, object], stacklevel: int = 2) -> StateDict:
    """Take the state dict out of a training checkpoint (``{"state_dict": ...}``, ``{"model": ...}``).

    One rule on every path, timm's: a checkpoint holding EMA weights (``state_dict_ema``, then ``model_ema``) gives
    those, as ``timm.create_model(..., checkpoint_path=...)`` and ``pretrained_cfg_overlay=dict(file=...)`` load them;
    else ``state_dict``, ``model``, ``module``. When it holds both EMA and raw weights a UserWarning names the key
    taken (load ``checkpoint["state_dict"]`` itself for the raw ones), at the line ``stacklevel`` frames up, as
    ``warnings.warn`` counts them (2: the caller's). A plain state dict is returned as it is.
    """
    found = _state_dict_keys(checkpoint)
    if not found:
        return {k: v for k, v in checkpoint.items() if isinstance(v, torch.Tensor)}
    raw = [k for k in found if k in RAW_KEYS]
    if found[0] in EMA_KEYS and raw:
        warnings.warn(
            f"the checkpoint holds EMA weights ({found[0]}) and raw ones ({raw[0]}): loading the EMA weights, as timm "
            f"does (for the raw ones load checkpoint[{raw[0]!r}] itself)",
            stacklevel=stacklevel,
        )
    return dict(checkpoint[found[0]])


def holds_state_dict(checkpoint: Mapping[str, object]) -> bool:
    """Whether ``checkpoint`` is a file's whole content holding a state dict, which :func:`unwrap_checkpoint` takes
    out: a mapping with tensors under one of its keys. A state dict is none, whatever its keys: its values are
    tensors (a submodule ``model``'s weights are ``model.*`` keys, never a ``model`` one)."""
    return bool(_state_dict_keys(checkpoint))


def _state_dict_keys(checkpoint: Mapping[str, object]) -> list[str]:
    """The keys of ``checkpoint`` holding a state dict (a mapping with tensors), in timm's order (EMA first)."""
    return [
        key
        for key in (*EMA_KEYS, *RAW_KEYS)
        if isinstance(inner := checkpoint.get(key), Mapping)
        and any(isinstance(v, torch.Tensor) for v in inner.values())
    ]


def holds_ema(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a torch training checkpoint holding EMA weights (``state_dict_ema``, ``model_ema``): the
    weights :func:`read_state_dict` gives of it (timm's rule); False for any other file."""
    checkpoint = _mapped_torch_file(path)
    found = _state_dict_keys(checkpoint) if checkpoint is not None else []
    return bool(found) and found[0] in EMA_KEYS  # what unwrap_checkpoint takes


def weights_kind(path: str | os.PathLike) -> str:
    """The kind of weights :func:`read_state_dict` gives of ``path``: ``"ema"`` where it records ``"weights": "ema"``
    (a swinlite weights file) or is a torch training checkpoint holding EMA weights (:func:`holds_ema`), else
    ``"raw"``. What an exported ONNX file's metadata and an evaluation's ``eval.json`` record as ``weights``."""
    return "ema" if read_metadata(path).get("weights") == "ema" or holds_ema(path) else "raw"


def holds_resume_ema(path: str | os.PathLike, data: bytes | None = None) -> bool:
    """Whether ``path`` (its bytes ``data`` where given) is a swinlite run's resume state trained with EMA: a torch
    file holding state dicts under ``model`` and ``ema`` (without EMA, its ``ema`` is None). :func:`read_state_dict`
    gives its ``model``; no reader takes its ``ema``. False for any other file (a safetensors file is not read as a
    torch one: its header length would read as a pickle protocol, with torch's warning)."""
    checkpoint = _mapped_torch_file(path, data)
    return checkpoint is not None and resume_ema_in(checkpoint)


def resume_ema_in(checkpoint: Mapping[str, object]) -> bool:
    """:func:`holds_resume_ema` of a file's content read before (:func:`read_checkpoint`)."""
    parts = [checkpoint.get(key) for key in ("model", "ema")]
    return all(isinstance(part, Mapping) and any(isinstance(v, torch.Tensor) for v in part.values()) for part in parts)


def resume_task(path: str | os.PathLike, data: bytes | None = None) -> str | None:
    """The task a swinlite run's resume state records (the engine's ``resume.pt``; ``data``: its bytes where given),
    else None: a torch file holding ``task``, ``model`` and ``optimizer``, keys of the engine's resume state
    (``swinlite.engine.checkpoint.RESUME_KEYS``: the library imports no engine) that no weights file holds."""
    checkpoint = _mapped_torch_file(path, data)
    return None if checkpoint is None else resume_task_in(checkpoint)


def resume_task_in(checkpoint: Mapping[str, object]) -> str | None:
    """:func:`resume_task` of a file's content read before (:func:`read_checkpoint`)."""
    if not all(key in checkpoint for key in ("task", "model", "optimizer")):
        return None
    task = checkpoint["task"]
    return task if isinstance(task, str) else None


# swinlite's tasks, whose runs write their weights (which record the model, classes and preprocessing) beside their
# resume state
RUN_TASKS = ("classification", "detection", "segmentation")


def check_not_resume_state(task: str | None, source: str, folder: Path | None = None) -> None:
    """ValueError for a swinlite run's resume state (``task``: what :func:`resume_task_in` gives of it, None: none)
    read as weights, naming the run's weights files, in ``folder`` where known; ``source``: what the weights came as
    (the file, "the state dict"). A task of the user's own passes: its resume state gives its raw weights."""
    if task not in RUN_TASKS:
        return
    if folder is None:
        weights = "best.safetensors or last.safetensors in its folder (scripts/train.py --resume resumes the run)"
    else:
        weights = f"{folder / 'best.safetensors'} or {folder / 'last.safetensors'}"
    raise ValueError(
        f"{source} is a {task} run's resume state, not its weights (which record its model and preprocessing): "
        f"give the run's weights, {weights}"
    )


def mapped_state_dict(path: str | os.PathLike, stacklevel: int = 2) -> StateDict | None:
    """:func:`read_state_dict` of a torch file, its tensors mapped from the file, not read (a training checkpoint's
    EMA weights taken with :func:`unwrap_checkpoint`'s warning, ``stacklevel`` as there); None for a file torch does
    not map (a safetensors file, a legacy torch file), which :func:`read_state_dict` reads."""
    checkpoint = _mapped_torch_file(path)
    return None if checkpoint is None else unwrap_checkpoint(checkpoint, stacklevel + 1)


def _mapped_torch_file(path: str | os.PathLike, data: bytes | None = None) -> Mapping[str, object] | None:
    """What a torch file (its bytes ``data`` where given) holds when that is a mapping, loaded with
    ``weights_only=True`` (no code is unpickled) and, from a file, mapped (its tensors are not read); None for anything
    else: no file, a safetensors file (its header length would read as a pickle protocol, with torch's warning), a
    file torch does not read so. The weights readers name the problems of such files."""
    if data is None and not Path(path).is_file():
        return None
    if _holds_safetensors(Path(path), data):
        return None
    try:
        source = path if data is None else io.BytesIO(data)
        checkpoint = _load_torch(source, mmap=data is None)
    except Exception:  # zip, pickle and weights-only refusals come in many types
        return None
    return checkpoint if isinstance(checkpoint, Mapping) else None


def _check_file(path: Path) -> None:
    check_model_path(path, "checkpoint")
    if path.stat().st_size == 0:
        raise ValueError(f"checkpoint {str(path)!r} is empty (0 bytes)")


def is_safetensors(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts as safetensors files do: an 8-byte header length, then the JSON header."""
    with open(path, "rb") as f:
        return _safetensors_head(f.read(9))


def _safetensors_head(head: bytes) -> bool:
    return len(head) >= 9 and head[8:9] == b"{"


def _holds_safetensors(path: Path, data: bytes | None) -> bool:
    """Whether the file at ``path``, or its bytes ``data`` where given, are safetensors."""
    return is_safetensors(path) if data is None else _safetensors_head(data)


def _torch_head(path: Path, data: bytes | None) -> bool:
    """Whether the file at ``path``, or its bytes ``data`` where given, start as a torch file does: a zip archive
    (``torch.save``'s format) or a pickle of protocol 2 or later (the legacy format)."""
    if data is None:
        with open(path, "rb") as f:
            data = f.read(4)
    return data[:1] == b"\x80" or data[:4] == b"PK\x03\x04"


def read_weights_bytes(path: str | os.PathLike) -> bytes:
    """A weights file's bytes, read once, for a caller that records their hash: the readers given them
    (``data=`` of :func:`read_state_dict`, :func:`read_metadata`, :func:`swinlite.weights.load_model`) load those
    bytes, so the weights loaded are the ones hashed even when the file is replaced meanwhile (a training run writing
    a new best.safetensors). The whole file is held in memory; ValueError for a missing or empty file."""
    _check_file(Path(path))
    return Path(path).read_bytes()


def read_state_dict(path: str | os.PathLike, stacklevel: int = 2, data: bytes | None = None) -> StateDict:
    """The tensors of a safetensors or torch (``weights_only=True``) file; ValueError naming the file otherwise.

    A torch training checkpoint (``{"model": state_dict, ...}``, ``{"state_dict": ...}``) gives its state dict, its
    EMA weights where it has them (``state_dict_ema``, ``model_ema``), as timm loads it (:func:`unwrap_checkpoint`;
    its warning names the line ``stacklevel`` frames up from here: 2, the caller's; more, the user's line that called
    a loading function which calls this one). ``data``: the file's bytes, read before (:func:`read_weights_bytes`),
    loaded instead of the file as it is now (``path`` then names them in the messages).
    """
    return state_dict_in(path, read_checkpoint(path, data), stacklevel + 1)


def state_dict_in(path: str | os.PathLike, checkpoint: Mapping[str, object], stacklevel: int = 2) -> StateDict:
    """:func:`read_state_dict` of a file's content read before (:func:`read_checkpoint`, :func:`read_weights`)."""
    state = unwrap_checkpoint(checkpoint, stacklevel + 1)
    if not state:
        raise ValueError(f"{str(path)!r} holds no tensors")
    return state


def read_checkpoint(path: str | os.PathLike, data: bytes | None = None) -> Mapping[str, object]:
    """Everything a weights file holds, read once: a safetensors file's tensors, a torch file's mapping as saved (a
    training checkpoint whole, for :func:`state_dict_in`, :func:`resume_task_in`, :func:`resume_ema_in`).
    ValueError naming the file as :func:`read_state_dict` does; ``data`` as there."""
    path = Path(path)
    if data is None:
        _check_file(path)
    safetensors = _holds_safetensors(path, data)
    try:
        if safetensors:
            return load_file(path) if data is None else load_safetensors_bytes(data)
        return _torch_checkpoint(path if data is None else io.BytesIO(data))
    except Exception as e:  # safetensors, pickle and zip readers raise many types for a file that is not theirs
        raise _unreadable(path, data, safetensors, e) from None


def read_weights(path: str | os.PathLike, data: bytes | None = None) -> tuple[dict[str, Any], Mapping[str, object]]:
    """A weights file's metadata (:func:`read_metadata`) and everything it holds (:func:`read_checkpoint`), from one
    read of the file; ValueError naming the file as those do. ``data`` as there."""
    path = Path(path)
    if data is None:
        _check_file(path)
    if data is not None or not is_safetensors(path):  # bytes, or a torch file: its metadata is {}
        return read_metadata(path, data), read_checkpoint(path, data)
    try:
        handle = safe_open(str(path), framework="pt")
        raw = handle.metadata() or {}
    except Exception as e:  # safetensors raises its own error type for a damaged header
        raise _damaged_header(path, e) from None
    with handle:
        try:
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
        except Exception as e:  # the reader's own error type
            raise _unreadable(path, None, True, e) from None
    return _decoded(raw), tensors


def _load_torch(source: Path | str | os.PathLike | io.BytesIO, mmap: bool = False) -> object:
    """``torch.load(source, weights_only=True)`` onto the CPU, with ``argparse.Namespace`` allowed, as timm's loader
    allows it: timm's ``train.py`` saves its arguments as one beside ``state_dict`` and ``state_dict_ema``. A path
    named ``*.safetensors`` (a torch file, as its content says) is read through an open file, without ``mmap``:
    ``torch.load`` hands such a path to the safetensors reader."""
    with torch.serialization.safe_globals([argparse.Namespace]):
        if isinstance(source, (str, os.PathLike)) and os.fspath(source).endswith(".safetensors"):
            with open(source, "rb") as file:
                return torch.load(file, map_location="cpu", weights_only=True)
        return torch.load(source, map_location="cpu", weights_only=True, mmap=mmap)


def _torch_checkpoint(source: Path | io.BytesIO) -> Mapping[str, object]:
    """A torch file's content: a mapping, loaded with ``weights_only=True``; ValueError for anything else."""
    other = _other_format(source)
    if other is not None:
        raise ValueError(other)
    checkpoint = _load_torch(source)
    if not isinstance(checkpoint, Mapping):
        raise ValueError(f"it holds a {type(checkpoint).__name__}, not a state dict")
    return checkpoint


def _unreadable(path: Path, data: bytes | None, safetensors: bool, error: Exception) -> ValueError:
    """:func:`read_checkpoint`'s refusal of a file (its bytes ``data`` where given) that ``error`` kept from loading."""
    what = "a damaged (truncated?) safetensors file" if safetensors else "not a weights file"
    # A file of neither format (text, an image) fails in the unpickler, whose error (KeyError: 101) says nothing.
    foreign = not safetensors and not isinstance(error, ValueError) and not _torch_head(path, data)
    cause = "" if foreign else f": {load_refusal(error)}"
    return ValueError(f"{str(path)!r} is {what} (expected safetensors or a torch checkpoint){cause}")


def check_weights_file(path: str | os.PathLike, read_legacy: bool = True) -> None:
    """ValueError for a weights file that cannot be read whole, found without reading its tensors (the safetensors
    header against the file's size, a torch file's zip directory; a legacy torch file, which has neither, is read,
    unless ``read_legacy=False``: then it passes unread, for a caller whose loader reads it next): a download cut
    short is named before a run scans its data or clears its output folder. Whether its tensors fit a model is the
    loader's to say.

    Raises:
        ValueError: a missing or empty file, a damaged safetensors file, a zip-format torch file without its
            directory, or a file of neither format (nor a legacy torch pickle).
    """
    path = Path(path)
    _check_file(path)
    if is_safetensors(path):
        try:
            with safe_open(path, framework="pt"):
                pass
        except Exception as e:  # the reader's own error type
            raise ValueError(f"{str(path)!r} is a damaged (truncated?) safetensors file: {load_refusal(e)}") from None
        return
    with open(path, "rb") as f:
        pickled = f.read(1) == b"\x80"
    if pickled:  # a legacy torch file, a pickle (protocol 2+), has no index to check: it is read
        if read_legacy:
            read_state_dict(path)
    elif not _torch_head(path, None):
        raise ValueError(f"{str(path)!r} is not a weights file (expected safetensors or a torch checkpoint)")
    elif not zipfile.is_zipfile(path):
        raise ValueError(f"{str(path)!r} is a damaged (truncated?) torch checkpoint: its zip directory is missing")


def read_metadata(path: str | os.PathLike, data: bytes | None = None) -> dict[str, Any]:
    """The metadata of a safetensors file, each value JSON-decoded where it parses (else the string as stored).

    Empty for a torch file, or a safetensors file without metadata. ``data``: the file's bytes, read before
    (:func:`read_weights_bytes`), read instead of the file as it is now (``path`` then names them in the messages).
    """
    path = Path(path)
    if data is None:
        _check_file(path)
    if not _holds_safetensors(path, data):
        return {}
    try:
        if data is None:
            with safe_open(str(path), framework="pt") as f:
                raw = f.metadata() or {}
        else:
            raw = _header_metadata(data)
    except Exception as e:  # safetensors raises its own error type for a damaged header
        raise _damaged_header(path, e) from None
    return _decoded(raw)


def _damaged_header(path: Path, error: Exception) -> ValueError:
    return ValueError(
        f"{str(path)!r} is a damaged (truncated?) safetensors file: {type(error).__name__}: {_first_line(error)}"
    )


def _decoded(raw: Mapping[str, str]) -> dict[str, Any]:
    """Safetensors metadata with each value JSON-decoded where it parses (else the string as stored)."""
    meta = {}
    for key, value in raw.items():
        try:
            meta[key] = json.loads(value)
        except json.JSONDecodeError:
            meta[key] = value
    return meta


def _header_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of safetensors bytes: an 8-byte little-endian header length, then that many bytes of JSON
    (the format's own layout; ``safe_open`` reads files only)."""
    size = int.from_bytes(data[:8], "little")
    if 8 + size > len(data):
        raise ValueError(f"its header ({size} bytes) runs past the end of the file ({len(data)} bytes)")
    return json.loads(data[8 : 8 + size]).get("__metadata__") or {}


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "no detail"


def _other_format(source: Path | io.BytesIO) -> str | None:
    """What a file that is no weights file holds, where it is a format a user may pass by mistake, said before
    torch.load (whose messages for them print a warning, then advise ``weights_only=False``): a TorchScript archive
    (``torch.jit.save``: code and constants in its zip) or an ONNX model (protobuf; its first field, ir_version, is
    the byte 0x08)."""
    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            scripted = any(name.endswith("/constants.pkl") or "/code/" in name for name in archive.namelist())
        if isinstance(source, io.BytesIO):
            source.seek(0)
        if scripted:
            return (
                "it is a TorchScript archive (torch.jit.save), a program rather than weights: save its state_dict() "
                "with torch.save or safetensors"
            )
        return None
    if isinstance(source, io.BytesIO):
        head = source.getvalue()[:1]
    else:
        with source.open("rb") as f:
            head = f.read(1)
    return "it is an ONNX model: the scripts take one with --onnx" if head == b"\x08" and _is_onnx(source) else None


def _is_onnx(source: Path | io.BytesIO) -> bool:
    """Whether ``source`` parses as an ONNX model with a graph (onnx is an export extra: False without it)."""
    try:
        import onnx
    except ImportError:
        return False
    data = source.getvalue() if isinstance(source, io.BytesIO) else source.read_bytes()
    try:
        return bool(onnx.load_from_string(data).graph.node)
    except Exception:  # protobuf raises its own DecodeError for anything else
        return False


def load_refusal(error: BaseException) -> str:
    """Why a file did not load, in one line; for a pickle ``torch.load(..., weights_only=True)`` refused, what it
    holds instead of torch's message, whose first lines advise loading with ``weights_only=False`` (which runs
    any code the file carries) and hold terminal escape codes."""
    if not isinstance(error, pickle.UnpicklingError):
        return f"{type(error).__name__}: {_first_line(error)}"
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(error))
    held = f"it pickles {found.group(1)}" if found else "it is not a pickle of tensors"
    return f"{held}, and only tensors and plain containers are read (torch.load with weights_only=True)"


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, as hex (read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def save_safetensors(
    path: str | os.PathLike, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, Any] | None = None
) -> None:
    """Save tensors atomically as safetensors; metadata values are stored as JSON strings.

    safetensors refuses tensors that share memory (a converted backbone's last level norm is also its final ``norm``;
    views of one buffer): each tensor after the first on a storage is written from a copy.
    """
    storages: set[int] = set()
    contiguous = {}
    for key, value in tensors.items():
        value = value.detach().cpu().contiguous()
        storage = value.untyped_storage().data_ptr()
        contiguous[key] = value.clone() if storage in storages else value
        storages.add(storage)
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
        ``root`` as a Path, with the mode a plain ``mkdir`` gives (0777 less the umask).
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
        os.chmod(tmp, 0o777 & ~_umask())  # a plain mkdir's mode, not mkdtemp's 0700
        if root.exists():
            root.rmdir()  # empty, checked above
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root
