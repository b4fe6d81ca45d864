"""The device a model runs on, from what a user typed (``auto``, ``cpu``, ``cuda``, ``cuda:1``, ``mps``)."""

from __future__ import annotations

import torch


def available_devices() -> list[str]:
    """The device names this machine accepts: ``auto``, ``cpu``, then ``cuda``, ``cuda:0``, ... and ``mps``."""
    names = ["auto", "cpu"]
    if torch.cuda.is_available():
        names += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        names.append("mps")
    return names


def resolve_device(name: str, local_rank: int = 0, option: str = "--device") -> torch.device:
    """The device ``name`` stands for on this machine.

    Args:
        name: ``"auto"`` (this process's GPU when there is one, else the CPU), ``"cpu"``, ``"cuda"``,
            ``"cuda:N"`` or ``"mps"``.
        local_rank: the GPU of ``"auto"`` and ``"cuda"`` (the process's rank on its machine under torchrun).
        option: how the user gave ``name`` (``--device``, ``train.device``), for the error message.

    Raises:
        ValueError: one line naming the devices valid here, for a name torch does not know (``gpu0``) or a
            device this machine lacks.
    """
    valid = ", ".join(available_devices())
    if name == "auto":
        return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"{option} {name!r} is not a device; valid here: {valid}") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda" and torch.cuda.is_available():
        if device.index is None:
            return torch.device("cuda", local_rank)
        if device.index < torch.cuda.device_count():
            return device
        raise ValueError(f"{option} {name}: this machine has {torch.cuda.device_count()} CUDA devices; valid: {valid}")
    if device.type == "mps" and torch.backends.mps.is_available():
        return device
    what = "CUDA" if device.type == "cuda" else device.type
    raise ValueError(f"{option} {name}: {what} is not available here; valid here: {valid}")
