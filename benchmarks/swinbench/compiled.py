"""The compiled benchmarks: ``scripts/benchmark.py --compile``, eager against optimised inference (fp32), and
``--compile-train``, the train step through ``torch.compile`` (:func:`run_compiled_train_benchmark`).

``--compile``: every requested model is timed eager and as compiled by :func:`swinlite.optimize_for_inference`
(inductor freezing; the same call for timm and torchvision, it does not depend on the model), interleaved as in
:mod:`swinbench.swin`. Per optimised model the result holds the time ``optimize_for_inference`` took
(compilation, the first call, and timing the compiled graph against eager), which of the two serves, the largest
|difference| from the model's eager output, and the start of a second process with the compile cache warm: a
freshly spawned interpreter builds the same model and calls ``optimize_for_inference`` again, so only inductor's
on-disk caches carry over.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from functools import partial
from typing import Any

import torch

from swinlite.optimize import optimize_for_inference

from .report import markdown_table
from .swin import (
    BenchConfig,
    Row,
    _synced,
    add_peak_memory,
    add_ratios,
    build_models,
    finish_run,
    make_step,
    start_run,
    time_rows,
)
from .timing import paired_ratio

SUFFIX = "+optimized"


def run_compile_benchmark(
    cfg: BenchConfig, log: Callable[[str], None] = print, warm_start: bool = True
) -> dict[str, Any]:
    """Time fp32 inference of each model eager and optimised; return a JSON-ready result.

    Args:
        cfg: what to run; ``tasks``, ``precisions``, ``memory`` and ``profile`` are not read (fp32 inference only,
            as the result's ``config`` records, with ``warm_start``).
        log: progress messages.
        warm_start: also time ``optimize_for_inference`` in a fresh process with the cache warm.

    Returns:
        dict as :func:`swinbench.swin.run_benchmark` (``rows`` of task "inference", precision "fp32"),
        plus ``compile`` = {model: {"seconds", "max_difference_from_eager", "warm_start_seconds",
        "warm_start_process_seconds"}}.
    """
    cfg = replace(cfg, tasks=("inference",), precisions=("fp32",), memory=False, profile=False)  # what runs
    models, x, result = start_run(cfg, ("inference",))
    result["config"]["warm_start"] = warm_start
    steps = {name: _synced(make_step(model, x, "inference", "fp32"), cfg.device) for name, model in models.items()}
    result["compile"] = {}
    for name, model in models.items():
        log(f"optimize_for_inference({name})")
        start = time.perf_counter()
        optimized = optimize_for_inference(model.eval(), x, check=False)
        info: dict[str, float | str | None] = dict(seconds=time.perf_counter() - start, path=optimized.path)
        with torch.inference_mode():
            info["max_difference_from_eager"] = (optimized(x) - model(x)).abs().max().item()
        info["warm_start_seconds"], info["warm_start_process_seconds"] = None, None
        if warm_start:
            log(f"optimize_for_inference({name}) in a fresh process, cache warm")
            info["warm_start_seconds"], info["warm_start_process_seconds"] = warm_start_seconds(cfg, name)
        result["compile"][name] = info
        steps[name + SUFFIX] = _synced(partial(optimized, x), cfg.device)
    result["matmul_gflops"] = {}
    log(f"timing inference fp32: {', '.join(steps)}")
    rows = time_rows(steps, cfg.batch, "inference", "fp32", cfg, result)
    add_ratios(rows)
    _add_ratio_vs_timm_optimized(rows)
    result["rows"] = [asdict(r) for r in rows]
    finish_run(result)
    return result


def _add_ratio_vs_timm_optimized(rows: list[Row]) -> None:
    """Note each row's speed ratio to optimised timm of the same rounds (:func:`~swinbench.timing.paired_ratio`)."""
    reference = next((r for r in rows if r.model == "timm" + SUFFIX), None)
    if reference is None:
        return
    for row in rows:
        row.notes.append(f"{paired_ratio(reference.round_seconds, row.round_seconds):.2f}× timm{SUFFIX}")


def warm_start_seconds(cfg: BenchConfig, name: str) -> tuple[float, float]:
    """Seconds ``optimize_for_inference`` takes in a fresh spawned process, and that process's whole run.

    The child builds the same model (same seed, same weights) and input, with the parent's thread count.
    """
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        seconds = pool.apply(_optimize_in_fresh_process, (replace(cfg, models=(name,)), torch.get_num_threads()))
    return seconds, time.perf_counter() - start


def _optimize_in_fresh_process(cfg: BenchConfig, threads: int) -> float:
    torch.set_num_threads(threads)
    (model,) = build_models(cfg).values()
    model.eval()
    torch.manual_seed(cfg.seed)
    x = torch.randn(cfg.batch, 3, cfg.img_size, cfg.img_size, device=cfg.device)
    start = time.perf_counter()
    optimize_for_inference(model, x, check=False)
    return time.perf_counter() - start


def compile_table(result: dict[str, Any]) -> str:
    """The result of :func:`run_compile_benchmark` as markdown: the timing table, then one line per compilation."""
    lines = [markdown_table(result), ""]
    for name, info in result["compile"].items():
        warm = info["warm_start_seconds"]
        warm_text = (
            "not measured"
            if warm is None
            else (
                f"{warm:.1f} s in a second process with the cache warm ({info['warm_start_process_seconds']:.1f} s "
                "including its start-up and model build)"
            )
        )
        lines.append(
            f"- {name}{SUFFIX}: optimize_for_inference took {info['seconds']:.1f} s (compile, first call, and timing "
            f"the compiled graph against eager), {warm_text}; serving: {info['path']} (the faster); "
            f"max |difference| from eager {info['max_difference_from_eager']:.1e}."
        )
    return "\n".join(lines)


def run_compiled_train_benchmark(
    cfg: BenchConfig,
    log: Callable[[str], None] = print,
    compile_model: Callable[[torch.nn.Module], torch.nn.Module] = torch.compile,
) -> dict[str, Any]:
    """Time the train step (cross-entropy, backward, SGD) of each model through ``torch.compile`` in inductor's default
    mode, what the run engine's ``train.compile: true`` does, in each of ``cfg.precisions``; return a JSON-ready result.

    Args:
        cfg: what to run; ``tasks`` and ``profile`` are not read (the train step only, as the result's ``config``
            records).
        log: progress messages.
        compile_model: the compiler, ``torch.compile`` (the tests pass the identity).

    Returns:
        dict as :func:`swinbench.swin.run_benchmark` (``rows`` of task "train"), plus ``compile`` = {"model
        precision": seconds of the first step, compilation included}.
    """
    cfg = replace(cfg, tasks=("train",), profile=False)  # what runs
    models, x, result = start_run(cfg, ("train",))
    compiled = {name: compile_model(model) for name, model in models.items()}
    result["matmul_gflops"], result["compile"] = {}, {}
    rows: list[Row] = []
    for precision in cfg.precisions:
        steps = {name: _synced(make_step(m, x, "train", precision), cfg.device) for name, m in compiled.items()}
        for name, step in steps.items():
            log(f"compiling the {precision} train step of {name}")
            start = time.perf_counter()
            step()
            result["compile"][f"{name} {precision}"] = time.perf_counter() - start
        log(f"timing the compiled train step, {precision}: {', '.join(steps)}")
        precision_rows = time_rows(steps, cfg.batch, "train", precision, cfg, result)
        if cfg.memory:
            add_peak_memory(precision_rows, steps, cfg.device)
        rows += precision_rows
    add_ratios(rows)
    result["rows"] = [asdict(r) for r in rows]
    finish_run(result)
    return result


def compiled_train_table(result: dict[str, Any]) -> str:
    """The result of :func:`run_compiled_train_benchmark` as markdown: the timing table, then the compile times."""
    times = ", ".join(f"{key} {seconds:.0f} s" for key, seconds in result["compile"].items())
    return f"{markdown_table(result)}\n\nFirst step through torch.compile (compilation included): {times}."


def frozen_compiled_step(
    name: str, model: torch.nn.Module, x: torch.Tensor, bf16: bool = False, before: Callable[[], None] | None = None
) -> Callable[[], object]:
    """Inference of ``model`` on ``x`` through ``torch.compile`` with inductor's freezing (under bf16 autocast with
    ``bf16``), compiled by a first call made here; ``before`` runs ahead of every call (e.g. to set a rule the
    trace reads). A check script's compiled arm; prints the compile time."""
    import torch._inductor.config  # noqa: F401  (inductor's config, loaded only where a graph is compiled)

    compiled = torch.compile(model, dynamic=False)

    def step() -> object:
        if before is not None:
            before()
        with torch._inductor.config.patch(freezing=True), torch.inference_mode():
            with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
                return compiled(x)

    return compiled_by_first_call(name, step)


def compiled_by_first_call(name: str, step: Callable[[], object]) -> Callable[[], object]:
    """``step`` (a call of a ``torch.compile``-d model), after a first call here that compiles it; prints how long
    that took. A check script's compiled arm."""
    start = time.perf_counter()
    step()
    print(f"  compiled {name} in {time.perf_counter() - start:.0f} s", flush=True)
    return step
