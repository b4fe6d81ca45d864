"""Contended benchmark behind ``scripts/benchmark.py --contended``: swinlite against timm on a CPU that is shared.

Every (condition, model) pair is timed once per round, the pairs of each round in a fresh random order, so that
drift and the other condition's after-effects hit every pair alike; figures are medians over the rounds and the
spread is the lowest and highest per-round ratio to timm in the same condition. The orders come from one generator
seeded with the run's order seed (drawn from the OS for each run unless given, recorded in the result's config), from
which each (task, precision) block takes the seed of its orders: runs without a given seed are independent repeats,
the blocks of one run get different orders, and the same seed with the same options replays a run's orders. The
conditions:

- ``quiet``: nothing else of this benchmark runs;
- ``busy core``: a second process keeps one core busy (a pure Python loop), paused (SIGSTOP) while other
  conditions run;
- ``loader``: inference fed by a DataLoader with two worker processes decoding JPEG photos through the model's
  eval transform, as ``scripts/predict.py`` does (``swinlite.inference.predict``); the time per batch counts the
  model and any wait for decoded images, over :data:`LOADER_BATCHES` batches (one pass over the files) per round.
  Inference only.

The matmul ceiling is timed in the quiet and busy-core conditions, as a third "model".
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import statistics
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from timm.data import create_transform, resolve_model_data_config
from torch import nn
from torch.utils.data import DataLoader

from swinlite.images import ImageFiles
from swinlite.inference import predict
from swinlite.sigterm import loader_worker_init

from .swin import BenchConfig, Row, add_ratios, finish_run, make_step, matmul_step, start_run
from .timing import FaultCounted, shuffled_seconds, spin

CONDITIONS = ("quiet", "busy core", "loader")
LOADER_BATCHES = 4  # batches per loader round: one pass over the generated photos
LOADER_WORKERS = 2
PHOTO_SIZE = (960, 1280)  # (H, W) of the generated JPEG photos


def run_contended(
    cfg: BenchConfig, log: Callable[[str], None] = print, order_seed: int | None = None
) -> dict[str, Any]:
    """Time every (task, precision) in every condition; return a JSON-ready result.

    Args:
        cfg: what to run; ``memory`` and ``profile`` are not read (no peak memory or profile is measured here, as
            the result's ``config`` records).
        log: progress messages.
        order_seed: seed of the rounds' random orders (module docstring); None draws one from the OS.

    Returns:
        dict as :func:`swinbench.swin.run_benchmark` (rows carry their ``condition``; ``matmul_gflops`` per
        "task precision condition"), plus ``conditions`` (what each one is); ``config["order_seed"]`` is the seed
        the orders came from.
    """
    if cfg.device != "cpu" or "swinlite" not in cfg.models:
        raise ValueError(f"--contended measures swinlite on a shared CPU: got device {cfg.device}, models {cfg.models}")
    cfg = replace(cfg, memory=False, profile=False)  # what runs
    if order_seed is None:
        order_seed = int.from_bytes(os.urandom(4), "big")
    orders = random.Random(order_seed)
    models, x, result = start_run(cfg, cfg.tasks)
    result["config"]["order_seed"] = order_seed
    result["matmul_gflops"] = {}
    result["conditions"] = {
        "quiet": "nothing else of this benchmark runs",
        "busy core": "a second process keeps one core busy",
        "loader": f"inference fed by a {LOADER_WORKERS}-worker DataLoader decoding {PHOTO_SIZE[1]}x{PHOTO_SIZE[0]} "
        f"JPEG photos (scripts/predict.py's loop), {LOADER_BATCHES} batches per round; its % of matmul ceiling is "
        "of the quiet ceiling (the matmul is not timed beside the loader)",
    }
    rows: list[Row] = []
    with busy_core() as set_busy, photo_loader(models["swinlite"], cfg.batch, cfg.img_size) as loader:
        for task in cfg.tasks:
            for precision in cfg.precisions:
                log(f"timing {task} {precision}: {', '.join(models)} in {', '.join(CONDITIONS)}, random order")
                matmul, matmul_flops = matmul_step("cpu", {"fp32": torch.float32, "bf16": torch.bfloat16}[precision])
                steps = {
                    key: FaultCounted(step) for key, step in _steps(models, x, task, precision, loader, matmul).items()
                }
                block_seed = orders.randrange(2**32)  # a seed per block: its own orders
                times = shuffled_seconds(
                    steps, lambda key: set_busy(key[0] == "busy core"), cfg.warmup, cfg.repeats, block_seed
                )
                faults = {key: step.median(cfg.repeats, LOADER_BATCHES if key[0] == "loader" else 1)
                          for key, step in steps.items()}  # fmt: skip
                rows += _rows(times, faults, matmul_flops, cfg.batch, task, precision, result)
    add_ratios(rows)
    result["rows"] = [asdict(r) for r in rows]
    finish_run(result)
    return result


def _steps(
    models: dict[str, nn.Module],
    x: torch.Tensor,
    task: str,
    precision: str,
    loader: DataLoader,
    matmul: Callable[[], object],
) -> dict[tuple[str, str], Callable[[], object]]:
    """(condition, model or "matmul") -> one timed unit: a step, a pass of the loader, or the ceiling's matmul."""
    steps: dict[tuple[str, str], Callable[[], object]] = {}
    for condition in CONDITIONS:
        if condition == "loader":
            if task == "inference":
                steps.update({(condition, n): partial(_predict_pass, m, loader, precision) for n, m in models.items()})
            continue
        steps.update({(condition, n): make_step(m, x, task, precision) for n, m in models.items()})
        steps[(condition, "matmul")] = matmul
    return steps


def _rows(
    times: dict[tuple[str, str], list[float]],
    faults: dict[tuple[str, str], float | None],
    matmul_flops: int,
    batch: int,
    task: str,
    precision: str,
    result: dict[str, Any],
) -> list[Row]:
    flops = result["gflop_per_image"][task] * 1e9
    rows = []
    for condition in CONDITIONS:
        matmul = times.get((condition, "matmul"), times.get(("quiet", "matmul")))
        ceiling = matmul_flops / statistics.median(matmul)
        if (condition, "matmul") in times:
            result["matmul_gflops"][f"{task} {precision} {condition}"] = ceiling / 1e9
        for (cond, name), t in times.items():
            if cond != condition or name == "matmul":
                continue
            per_batch = [s / LOADER_BATCHES for s in t] if cond == "loader" else t
            s = statistics.median(per_batch)
            rows.append(
                Row(
                    task,
                    precision,
                    name,
                    s,
                    batch / s,
                    batch / s * flops / ceiling,
                    round_seconds=per_batch,
                    condition=condition,
                    faults_per_call=faults[(cond, name)],
                )
            )
    return rows


def _predict_pass(model: nn.Module, loader: DataLoader, precision: str) -> None:
    amp = torch.bfloat16 if precision == "bf16" else None  # predict opens its own autocast: an outer one is undone
    for _ in predict(model, loader, topk=5, device=torch.device("cpu"), amp=amp):
        pass


@contextmanager
def busy_core() -> Iterator[Callable[[bool], None]]:
    """A spawned process spinning on one core; yields ``set_busy(active)``, which resumes or pauses it."""
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=spin, args=(ready, os.getpid()), daemon=True)
    process.start()
    while not ready.wait(timeout=1.0):  # a child that cannot start (e.g. a main module without a __main__ guard)
        if not process.is_alive():
            raise RuntimeError(f"the busy-core process exited with code {process.exitcode} before it started")
    os.kill(process.pid, signal.SIGSTOP)
    state = {"active": False}

    def set_busy(active: bool) -> None:
        if active != state["active"]:
            os.kill(process.pid, signal.SIGCONT if active else signal.SIGSTOP)
            state["active"] = active

    try:
        yield set_busy
    finally:
        process.kill()
        process.join()


@contextmanager
def photo_loader(model: nn.Module, batch: int, img_size: int) -> Iterator[DataLoader]:
    """A DataLoader as scripts/predict.py builds it (the model's eval transform, at ``img_size``), over generated
    JPEG photos, its workers kept between passes."""
    data_config = resolve_model_data_config(model)
    data_config["input_size"] = (3, img_size, img_size)
    with tempfile.TemporaryDirectory(prefix="swinbench-photos-") as folder:
        files = write_photos(Path(folder), batch * LOADER_BATCHES)
        dataset = ImageFiles(files, create_transform(**data_config, is_training=False))
        loader = DataLoader(
            dataset,
            batch_size=batch,
            num_workers=LOADER_WORKERS,
            collate_fn=list,
            persistent_workers=True,
            worker_init_fn=loader_worker_init(),  # a SIGTERM to the process group: this process unwinds first
        )
        yield loader
        del loader  # stops the workers before the files go


def write_photos(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` JPEG files of :data:`PHOTO_SIZE`: smooth colour fields with noise, which decode like photos."""
    rng = np.random.default_rng(seed)
    h, w = PHOTO_SIZE
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    files = []
    for i in range(count):
        phase = rng.uniform(0, 2 * np.pi, 3)
        field = np.stack([np.sin(6 * xx + 4 * yy * (c + 1) + phase[c]) for c in range(3)], axis=-1)
        pixels = np.clip(127 + 90 * field + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
        path = folder / f"photo_{i:03d}.jpg"
        Image.fromarray(pixels).save(path, quality=90)
        files.append(path)
    return files
