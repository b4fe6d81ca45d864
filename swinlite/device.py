"""The device a model runs on, from what a user typed (``auto``, ``cpu``, ``cuda``, ``cuda:1``, ``mps``), and the
autocast dtype it runs in (``none``, ``bf16``, ``fp16``); the compiler loaded without torch's note about CUDA where
there is no GPU."""

from __future__ import annotations

import logging
import os
import warnings

import torch

AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def cpu_computes_bf16() -> bool:
    """Whether this CPU computes bfloat16 (oneDNN's check: AVX-512 or AMX); elsewhere bfloat16 is emulated, several
    times slower than float32."""
    return torch.ops.mkldnn._is_mkldnn_bf16_supported()


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
        local_rank: the GPU of ``"auto"`` and ``"cuda"`` (the process's rank on its machine under torchrun,
            ``LOCAL_RANK``).
        option: how the user gave ``name`` (``--device``, ``train.device``), for the error message.

    Raises:
        ValueError: one line naming the devices valid here, for a name torch does not know (``gpu0``) or a
            device this machine lacks (``cuda:3``, or ``auto`` / ``cuda`` with a ``local_rank`` past its GPUs).
    """
    valid = ", ".join(available_devices())
    if name == "auto":
        return _local_gpu(local_rank, f"{option} {name}", valid) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"{option} {name!r} is not a device; valid here: {valid}") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda" and torch.cuda.is_available():
        if device.index is None:
            return _local_gpu(local_rank, f"{option} {name}", valid)
        if device.index < torch.cuda.device_count():
            return device
        raise ValueError(f"{option} {name}: this machine has {torch.cuda.device_count()} CUDA devices; valid: {valid}")
    if device.type == "mps" and torch.backends.mps.is_available():
        return device
    what = "CUDA" if device.type == "cuda" else device.type
    raise ValueError(f"{option} {name}: {what} is not available here; valid here: {valid}")


def _local_gpu(local_rank: int, setting: str, valid: str) -> torch.device:
    """The GPU of the process of rank ``local_rank`` on this machine, for ``setting`` (``train.device auto``).

    Raises:
        ValueError: this machine has no GPU of that index (torchrun started more processes than it has GPUs, or
            ``CUDA_VISIBLE_DEVICES`` hides the others from each process): torch's "invalid device ordinal" before.
    """
    count = torch.cuda.device_count()
    if 0 <= local_rank < count:
        return torch.device("cuda", local_rank)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = "CUDA_VISIBLE_DEVICES unset" if visible is None else f"CUDA_VISIBLE_DEVICES={visible!r}"
    raise ValueError(
        f"{setting}: this process's LOCAL_RANK={local_rank} takes GPU {local_rank}, and it sees {count} CUDA devices "
        f"({seen}): start at most {count} processes per machine (torchrun --nproc_per_node), and give each process "
        f"every GPU in CUDA_VISIBLE_DEVICES (the process of LOCAL_RANK n takes the nth); valid here: {valid}"
    )


def device_memory(device: torch.device) -> int | None:
    """The bytes of memory ``device`` has in all: a CUDA device's own, else the machine's physical memory (a CPU's,
    and an Apple GPU's, which shares it); None where the system does not say (no ``os.sysconf``: Windows)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def autocast_dtype(name: str, device: torch.device, option: str = "--amp") -> torch.dtype | None:
    """The autocast dtype ``name`` stands for on ``device``: None for ``"none"`` (no autocast), else bf16 or fp16.

    Args:
        name: a key of :data:`AUTOCAST_DTYPES`.
        device: the device the model runs on.
        option: how the user gave ``name`` (``--amp``, ``train.amp``), for the error message.

    Raises:
        ValueError: fp16 off CUDA (CPU autocast computes in bf16; fp16 would need a gradient scaler and CUDA's
            kernels), or a name that is not a key of :data:`AUTOCAST_DTYPES`.

    Warns:
        UserWarning: bf16 on a CPU for which oneDNN has no bfloat16 kernels (x86 without AVX-512): emulated there,
            several times slower than no autocast (docs/training.md, ``train.amp``).
    """

    def setting(value: str) -> str:  # as the user writes it: "--amp bf16", "train.amp=bf16"
        return f"{option} {value}" if option.startswith("-") else f"{option}={value}"

    if name not in AUTOCAST_DTYPES:
        raise ValueError(f"{setting(name)} is not an autocast dtype; valid: {', '.join(AUTOCAST_DTYPES)}")
    if name == "fp16" and device.type != "cuda":
        raise ValueError(f"{setting('fp16')} needs CUDA; use {setting('bf16')} on {device.type}")
    if name == "bf16" and device.type == "cpu" and not cpu_computes_bf16():
        warnings.warn(
            f"{setting('bf16')} on a CPU without bfloat16 kernels (no AVX-512: "
            f"{torch.backends.cpu.get_cpu_capability()}): bfloat16 is emulated here, several times slower than "
            f"{setting('none')} (docs/training.md, train.amp)",
            stacklevel=2,
        )
    return AUTOCAST_DTYPES[name]


class _NoCudaRuntimeNote(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No CUDA runtime is found")


def load_compiler_quietly() -> None:
    """Import ``torch.utils.cpp_extension``, which ``torch.compile``'s C++ builds load, without the line it logs at
    import on a machine with a CUDA toolkit and no GPU: "No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'"
    is a warning about CUDA in the middle of a compile for the CPU. Call before the first ``torch.compile``."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    note = _NoCudaRuntimeNote()
    logger.addFilter(note)
    try:
        import torch.utils.cpp_extension  # noqa: F401
    finally:
        logger.removeFilter(note)
