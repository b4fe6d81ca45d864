"""Crash-safe checkpoints: weights as safetensors, a resume file with everything needed to continue.

Every file is written to a temporary name in the same folder, flushed, fsynced and renamed over the
old one (``os.replace`` is atomic), so a kill at any moment leaves either the old or the new file,
never a half-written one.
"""

from __future__ import annotations

import io
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..io import atomic_write, read_metadata, save_safetensors  # noqa: F401  (read_metadata: the library's, kept here)
from ..io import read_state_dict as load_weights  # noqa: F401  (the library's checkpoint reader, under its old name)


def save_weights(path: str | Path, state_dict: Mapping[str, torch.Tensor], metadata: dict[str, Any]) -> None:
    """Save a state dict as safetensors atomically; ``metadata`` values are stored as JSON strings."""
    save_safetensors(path, state_dict, metadata)


def save_resume(path: str | Path, state: dict[str, Any]) -> None:
    """Atomically ``torch.save`` a resume state (tensors, dicts, lists, numbers and strings only)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write(path, lambda f: f.write(buffer.getbuffer()))


def load_resume(path: str | Path) -> dict[str, Any]:
    """Load a resume file written by ``save_resume`` (``weights_only=True``: no code is unpickled)."""
    return torch.load(path, map_location="cpu", weights_only=True)


def rng_state() -> dict[str, torch.Tensor]:
    """Python, NumPy and torch (CPU and CUDA) generator states, as tensors."""
    version, py_state, gauss = random.getstate()
    kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state = {
        "python": torch.tensor([version, *py_state], dtype=torch.int64),
        "python_gauss": torch.tensor([float("nan") if gauss is None else gauss], dtype=torch.float64),
        "numpy": torch.from_numpy(np_keys.astype(np.int64)),
        "numpy_extra": torch.tensor([np_pos, np_has_gauss, np_gauss], dtype=torch.float64),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.stack(torch.cuda.get_rng_state_all())
    return state


def set_rng_state(state: dict[str, torch.Tensor]) -> None:
    """Restore what ``rng_state`` returned."""
    py = state["python"].tolist()
    gauss = state["python_gauss"].item()
    random.setstate((py[0], tuple(py[1:]), None if gauss != gauss else gauss))
    pos, has_gauss, np_gauss = state["numpy_extra"].tolist()
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32), int(pos), int(has_gauss), np_gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"]))
