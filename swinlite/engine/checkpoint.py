"""Crash-safe checkpoints: weights as safetensors, a resume file with everything needed to continue.

Every file is written to a temporary name in the same folder, flushed, fsynced and renamed over the
old one (``os.replace`` is atomic), so a kill at any moment leaves either the old or the new file,
never a half-written one. A write that fails (disk full, read-only folder) is a ValueError naming the
file; the previous file stays as it was. Weights that must agree with the resume file (the best weights, which
follow its history) wait under a pending name until it is written (:func:`pending`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import zipfile
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..files import fsync_folder
from ..io import atomic_write, load_refusal, read_metadata, save_safetensors

RESUME_FILE = "resume.pt"
# the output folder as the messages name it: the shipped scripts' option, then the key a script of your own sets
OUTPUT_DIR = "--output-dir (train.output_dir)"
RESUME_KEYS = ("task", "model", "optimizer", "scheduler", "scaler", "ema", "epoch", "step", "batch", "history", "rng")


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Turn an OSError while ``path`` is written into one ValueError line naming the file (left as it was: every
    write is atomic; what a caller wrote before it is the caller's to say)."""
    try:
        yield
    except OSError as e:
        reason = e.strerror or str(e)
        raise ValueError(f"cannot write {path}: {reason}; {Path(path).name} is left as it was") from None


def save_weights(path: str | Path, state_dict: Mapping[str, torch.Tensor], metadata: dict[str, Any]) -> None:
    """Save a state dict as safetensors atomically; ``metadata`` values are stored as JSON strings."""
    with writing(path):
        save_safetensors(path, state_dict, metadata)


def pending(path: Path) -> Path:
    """Where new weights for ``path`` (``OUT/best.safetensors``) wait, as ``OUT/.best.safetensors.pending``, until
    the resume file that records their epoch is written; then :func:`complete_pending` renames them over ``path``.
    A kill before the resume file leaves ``path`` as the saved history has it."""
    return path.with_name(f".{path.name}.pending")


def epoch_end(path: Path) -> Path:
    """Where the resume file ``path`` (``OUT/resume.pt``) of the last completed epoch's end is kept, as
    ``OUT/.resume.pt.epoch``, while step checkpoints of the next epoch replace ``path``: a divergence in that epoch
    puts it back (their weights may already be ruined, yet finite)."""
    return path.with_name(f".{path.name}.epoch")


def keep_linked(path: Path, kept: Path) -> None:
    """``kept`` made the file ``path`` is now (a hard link: no copy, ``path``'s later atomic replacements leave it),
    durably; a copy where the filesystem has no hard links. Made before ``path`` is replaced, so it is whole whenever
    it is needed (a kill mid-copy leaves ``path`` as it was, and the next run makes ``kept`` again)."""
    with writing(kept):
        kept.unlink(missing_ok=True)
        try:
            os.link(path, kept)
        except OSError:
            shutil.copyfile(path, kept)
        fsync_folder(kept.parent)


def complete_pending(path: Path) -> None:
    """Rename the pending weights of ``path`` (:func:`pending`) over it, atomically and durably."""
    with writing(path):
        os.replace(pending(path), path)
        fsync_folder(path.parent)


def settle_pending(paths: Iterable[Path], epochs_done: int, evaluation: tuple[str, ...]) -> None:
    """The pending weights of ``paths`` a kill left: completed when the resume file records their epoch (it holds
    ``epochs_done`` epochs: the kill came after it was written), else removed (their epoch is not in its history).
    ``evaluation``: the evaluate script's files, removed first where they describe the weights completed
    (:func:`clear_evaluation`)."""
    for path in paths:
        waiting = pending(path)
        if not waiting.is_file():
            continue
        if read_metadata(waiting)["epoch"] <= epochs_done:
            clear_evaluation(path.parent, [path.name], evaluation)
            complete_pending(path)
        else:
            waiting.unlink()


def clear_evaluation(folder: Path, replaced: Collection[str], files: tuple[str, ...]) -> None:
    """Remove an evaluate script's results from ``folder`` (``files``: the task's ``evaluation_files``) before the
    weights files ``replaced`` there are replaced, when they describe one of them. Their record is the first of
    ``files``, a JSON object with a ``"checkpoint"`` (:func:`evaluated_checkpoint`: the shipped scripts' ``eval.json``,
    a task's own ``reg_eval.json`` alike; the others, which may be large, such as ``detections.json``, are not read),
    which names the checkpoint evaluated by its path as typed, an absolute one compared as the file it is, a relative
    one (from wherever the script ran), or an absolute one no longer there (the run folder moved or renamed since), by
    its file name. Removed first, so that a kill in between never leaves them beside the new weights."""
    described = evaluated_checkpoint(folder / files[0]) if files else None
    if described is None:  # no record of a checkpoint: nothing of the run's
        return
    path = Path(described)
    if path.is_absolute() and path.exists() and path.parent.resolve() != folder.resolve():  # another folder's weights
        return
    if path.name in replaced:
        for name in files:
            (folder / name).unlink(missing_ok=True)


def evaluated_checkpoint(path: Path) -> str | None:
    """The ``"checkpoint"`` the JSON object in ``path`` records (an evaluation's record of the weights it read:
    :func:`swinlite.images.evaluated_data`), None where there is none (no file, another file, another object)."""
    try:
        described = json.loads(path.read_bytes())["checkpoint"]
    except (OSError, ValueError, KeyError, TypeError):  # none, or not a record of a checkpoint
        return None
    return described if isinstance(described, str) else None


def non_finite(state_dict: Mapping[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors holding NaN or infinity."""
    return [k for k, v in state_dict.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]


def save_resume(path: str | Path, state: dict[str, Any]) -> None:
    """Atomically ``torch.save`` a resume state (tensors, dicts, lists, numbers and strings only)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with writing(path):
        atomic_write(path, lambda f: f.write(buffer.getbuffer()))


def load_resume(path: str | Path, task: str | None = None, mmap: bool = False) -> dict[str, Any]:
    """Load a resume file written by ``save_resume`` (``weights_only=True``: no code is unpickled).

    Args:
        path: the file.
        task: the task the run is (e.g. "classification"): the file must be a whole resume file of a run of it.
            None: any file ``save_resume`` wrote.
        mmap: map its tensors rather than read them: a quick look at the run's task and position, made before the
            data is scanned (a file torch cannot map is read, to be refused as without).

    Raises:
        ValueError: an unreadable file (empty, truncated, a pickle of other objects), not a resume file, or
            one of another task; the message names the file.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap and zipfile.is_zipfile(path))
    except Exception as e:  # zip, pickle and weights-only refusals come in many types
        raise ValueError(
            f"{path} is not a readable resume file ({load_refusal(e)}); start over with --overwrite"
        ) from None
    if task is None:
        return state
    missing = [k for k in RESUME_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise ValueError(f"{path} is not a resume file of this version of swinlite (lacks {', '.join(missing)})")
    if state["task"] != task:
        raise ValueError(f"{path} holds a {state['task']} run, not a {task} run; choose its own {OUTPUT_DIR}")
    return state


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """Python, NumPy and torch generator states, as tensors: the CPU's, and for a CUDA ``device`` (the one this process
    computes on) that GPU's alone, no other's: a run resumed where fewer GPUs are visible has none of theirs to set,
    and a CPU run on a GPU machine makes no CUDA context."""
    version, py_state, gauss = random.getstate()
    kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state = {
        "python": torch.tensor([version, *py_state], dtype=torch.int64),
        "python_gauss": torch.tensor([float("nan") if gauss is None else gauss], dtype=torch.float64),
        "numpy": torch.from_numpy(np_keys.astype(np.int64)),
        "numpy_extra": torch.tensor([np_pos, np_has_gauss, np_gauss], dtype=torch.float64),
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def cuda_rng_state(state: dict[str, torch.Tensor], device: torch.device) -> torch.Tensor | None:
    """The state of the CUDA ``device``'s generator that ``state`` (:func:`rng_state`'s) holds: its device's [S], or,
    saved by an older swinlite, which kept every visible GPU's [N, S], the row of ``device``'s index; None where it
    holds none for it (saved on the CPU; fewer GPUs visible than that index) or ``device`` is not a CUDA device."""
    saved = state.get("cuda")
    if saved is None or device.type != "cuda":
        return None
    if saved.dim() == 1:
        return saved
    return saved[device.index] if device.index < len(saved) else None


def set_rng_state(state: dict[str, torch.Tensor], device: torch.device) -> None:
    """Restore what ``rng_state`` returned, its CUDA state onto ``device`` where it holds one for it
    (:func:`cuda_rng_state`; none: that generator is left as it is)."""
    py = state["python"].tolist()
    gauss = state["python_gauss"].item()
    random.setstate((py[0], tuple(py[1:]), None if gauss != gauss else gauss))
    pos, has_gauss, np_gauss = state["numpy_extra"].tolist()
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32), int(pos), int(has_gauss), np_gauss))
    torch.set_rng_state(state["torch"])
    cuda = cuda_rng_state(state, device)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda, device)


def seed_rng(seed: int) -> None:
    """Seed the generators :func:`rng_state` saves: Python's, NumPy's and torch's (CPU and every CUDA device).

    ``seed`` is any ``train.seed`` plus a rank, so it may reach past 32 bits, which NumPy's generator refuses: it
    takes the seed modulo 2**32 (the same seed below that, the ranks of one run still apart).
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resume_rng(saved: list[dict[str, torch.Tensor]], rank: int, seed: int, step: int, device: torch.device) -> None:
    """Set this process's generators as a resumed run goes on; ``saved`` holds one :func:`rng_state` per process of
    the saved run, ``step`` its optimizer steps, ``seed`` is ``train.seed``, ``device`` this process's device.

    A rank the saved run had gets its own state back exactly: a resume with as many processes goes on bitwise as
    the uninterrupted run. A rank it lacked (resumed with more processes) is seeded by
    ``SeedSequence(seed, spawn_key=(rank, step))``, a stream of its own: given another rank's saved state (as it was),
    it drew that rank's drop-path masks and mixup lambdas for the rest of the run. The rank sets it apart from the
    other processes' streams; the step from the one it drew at another point of the run (``seed + rank``, a fresh
    run's, is where it began, when it was there before a resume with fewer processes left it out); the same file
    resumed again seeds it alike, so the resumed run is as reproducible as a fresh one. So are the CUDA generators of
    a rank whose state holds none for its CUDA ``device`` (:func:`cuda_rng_state`: saved on the CPU, or by an older
    swinlite where fewer GPUs were visible), its other generators restored.
    """
    fresh = int(np.random.SeedSequence(seed, spawn_key=(rank, step)).generate_state(1)[0])
    if rank >= len(saved):
        seed_rng(fresh)
        return
    set_rng_state(saved[rank], device)
    if device.type == "cuda" and cuda_rng_state(saved[rank], device) is None:
        torch.cuda.manual_seed_all(fresh)  # as seed_rng's torch.manual_seed seeds them
