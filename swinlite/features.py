"""Feature files: per-image multi-scale maps and one embeddings file, as safetensors.

Per image: tensors ``stage0..stageN`` ([C_i, H_i, W_i], NCHW without the batch axis; a detection run's backbone the
levels its FPN reads, ``stage1..stage3`` for a RetinaNet's) and ``pooled``
([C], fp32), with metadata ``source``, ``original_size`` (H, W), ``input_size`` (H, W), ``strides``,
``model`` (JSON strings in the safetensors header; ``scripts/extract_features.py`` adds ``source_file``, the
image's real path, size and the SHA-256 of its bytes: :func:`swinlite.extract.source_record`).
``embeddings.safetensors`` holds ``embeddings`` ([N, C]) and, in its metadata, the ordered ``paths``. Every file is
written to a temporary file, fsynced and renamed over the target, so a crash never leaves a half-written file under the
final name.
"""

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save

from .io import atomic_write_bytes, read_metadata

METADATA_KEYS = ("source", "original_size", "input_size", "strides", "model")


@dataclass(frozen=True)
class ImageFeatures:
    """One image's features as written by ``scripts/extract_features.py``.

    Attributes:
        maps: ``{"stage0": [C0, H0, W0], ...}`` in level order.
        pooled: the model's pooled (pre-logits) vector [C].
        source: the image path.
        original_size: (H, W) of the decoded image.
        input_size: (H, W) the model saw.
        strides: stride of each map, in pixels of the model input.
        model: the model name.
    """

    maps: dict[str, torch.Tensor]
    pooled: torch.Tensor
    source: str
    original_size: tuple[int, int]
    input_size: tuple[int, int]
    strides: tuple[int, ...]
    model: str


def save_features(path: Path, features: ImageFeatures, extra: dict[str, object] | None = None) -> None:
    """Write one image's features atomically, with ``extra`` metadata (JSON values) beside the features' own."""
    tensors = {name: m.contiguous() for name, m in features.maps.items()}
    tensors["pooled"] = features.pooled.float().contiguous()
    metadata = {key: json.dumps(getattr(features, key)) for key in METADATA_KEYS}
    metadata |= {key: json.dumps(value) for key, value in (extra or {}).items()}
    atomic_write_bytes(path, save(tensors, metadata=metadata))


def load_features(path: str | os.PathLike) -> ImageFeatures:
    """Read a per-image feature file; ValueError when it is not one."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{str(path)!r} is not a file: give one of extract_features.py's OUT/features/*.safetensors")
    if not is_complete_feature_file(path):
        raise ValueError(f"{str(path)!r} is not a complete swinlite feature file (stage maps, pooled and metadata)")
    tensors = load_file(path)
    meta = read_metadata(path)
    maps = {k: tensors[k] for k in sorted((k for k in tensors if k.startswith("stage")), key=lambda k: int(k[5:]))}
    return ImageFeatures(
        maps=maps,
        pooled=tensors["pooled"],
        source=meta["source"],
        original_size=tuple(meta["original_size"]),
        input_size=tuple(meta["input_size"]),
        strides=tuple(meta["strides"]),
        model=meta["model"],
    )


def _read_header(path: Path) -> dict | None:
    """The safetensors JSON header if the file is whole (its size matches the header), else None."""
    try:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > 100_000_000:
                return None
            header = json.loads(f.read(length))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        return header if path.stat().st_size == 8 + length + end else None
    except (OSError, struct.error, ValueError, KeyError, TypeError):
        return None


def is_complete_feature_file(path: Path) -> bool:
    """True when ``path`` is a whole feature file: all bytes present, stage maps (``stage0`` on, or a run's backbone's
    levels its FPN reads: ``stage1`` on for a RetinaNet's), pooled and metadata."""
    header = _read_header(path)
    if header is None:
        return False
    metadata = header.get("__metadata__") or {}
    stages = any(key.startswith("stage") for key in header)
    return stages and "pooled" in header and all(k in metadata for k in METADATA_KEYS)


def save_embeddings(path: Path, embeddings: torch.Tensor, paths: list[str]) -> None:
    """Write pooled vectors [N, C] and their N ordered image paths atomically."""
    if embeddings.shape[0] != len(paths):
        raise ValueError(f"{embeddings.shape[0]} embeddings but {len(paths)} paths")
    data = save({"embeddings": embeddings.float().contiguous()}, metadata={"paths": json.dumps(paths)})
    atomic_write_bytes(path, data)


def load_embeddings(path: str | os.PathLike) -> tuple[torch.Tensor, list[str]]:
    """Read ``embeddings.safetensors`` (extract_features.py's ``OUT/embeddings.safetensors``): (vectors [N, C], the N
    image paths in the same order); ValueError when ``path`` is not such a file."""
    header = _read_header(Path(path)) if Path(path).is_file() else None
    if header is None or "embeddings" not in header or "paths" not in (header.get("__metadata__") or {}):
        raise ValueError(
            f"{str(path)!r} is not a complete swinlite embeddings file: give extract_features.py's "
            "OUT/embeddings.safetensors"
        )
    with safe_open(path, "pt") as f:
        return f.get_tensor("embeddings"), json.loads(f.metadata()["paths"])
