"""Side-by-side benchmark of swinlite, timm and torchvision Swin models of one size, in one process.

swinlite gets timm's weights (its random init, converted) and torchvision keeps its own random weights (speed does
not depend on their values); every model gets the same input and the same step. The models of one task are timed
alternately (A, B, C, A, B, C, ...) so that load from other processes hits them alike; each figure is the median over
the repeats after a warm-up.

Peak memory of a train step is the highest total of bytes held by PyTorch's allocator during one
step (forward, loss, backward, SGD update), above what was held before it: on CUDA from
``torch.cuda.max_memory_allocated``, on CPU by replaying the allocation and free events that the
profiler records (``profile_memory=True``). Parameters, their gradients' previous values and the
input are not counted; every activation, gradient and temporary tensor is, and so is the scratch
memory kernels take from the allocator. Memory that a library takes from the system allocator
directly (e.g. oneDNN scratchpads) is invisible to both measurements.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import timm
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from swinlite.convert import convert_state_dict
from swinlite.fast import measured
from swinlite.models.swin import pad_to_window, stage_maps

from .choices import MIN_IMG_SIZE, MODELS, PRECISIONS, SIZES, TASKS  # noqa: F401  (re-exported)
from .timing import FaultCounted, interleaved_seconds, paired_ratio, ratio_range


@dataclass
class BenchConfig:
    """What to run. ``models`` is a subset of :data:`MODELS`; timm is the reference of the ratios."""

    size: str = "tiny"
    batch: int = 8
    img_size: int = 224
    device: str = "cpu"
    models: tuple[str, ...] = MODELS
    tasks: tuple[str, ...] = TASKS
    precisions: tuple[str, ...] = PRECISIONS
    warmup: int = 2
    repeats: int = 7
    memory: bool = True
    profile: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        _check_choices("size", (self.size,), tuple(SIZES))
        _check_choices("models", self.models, MODELS)
        _check_choices("tasks", self.tasks, TASKS)
        _check_choices("precisions", self.precisions, PRECISIONS)
        if self.batch < 1 or self.img_size < MIN_IMG_SIZE or self.warmup < 0 or self.repeats < 1:
            raise ValueError(
                f"expected batch >= 1, img_size >= {MIN_IMG_SIZE}, warmup >= 0, repeats >= 1; got batch={self.batch}, "
                f"img_size={self.img_size}, warmup={self.warmup}, repeats={self.repeats}"
            )
        check_device(self.device)


@dataclass
class Row:
    """One measured (task, precision, model) cell; ratios are filled in by :func:`add_ratios`."""

    task: str
    precision: str
    model: str
    seconds: float
    images_per_s: float
    ceiling_fraction: float
    peak_mb: float | None = None
    speed_vs_timm: float | None = None
    speed_vs_timm_fp32: float | None = None
    round_seconds: list[float] = field(default_factory=list)  # every timed round, in order
    speed_vs_timm_range: list[float] | None = None  # [min, max] of the per-round ratios
    memory_vs_timm: float | None = None
    notes: list[str] = field(default_factory=list)
    condition: str | None = None  # --contended: what else ran (swinbench.contended.CONDITIONS)
    faults_per_call: float | None = None  # median minor page faults of one timed call (timing.FaultCounted)


def check_device(device: str) -> None:
    """A ValueError naming the devices valid here unless ``device`` is one: ``cpu``, ``cuda``, ``cuda:N``."""
    valid = ["cpu"]
    if torch.cuda.is_available():
        valid += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if device not in valid:
        why = " (torch.cuda.is_available() is False)" if device.startswith("cuda") and len(valid) == 1 else ""
        raise ValueError(f"device {device!r} is not available here{why}; valid here: {', '.join(valid)}")


def _check_choices(name: str, values: tuple[str, ...], allowed: tuple[str, ...]) -> None:
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise ValueError(f"{name} must be a non-empty subset of {allowed}, got {values}")


def build_models(cfg: BenchConfig) -> dict[str, nn.Module]:
    """The requested models on ``cfg.device``, stochastic depth off.

    swinlite gets timm's random weights (converted): the two compute the same function except at sizes where their
    padding differs (:func:`differences_by_design`, e.g. Swin-T at 64² or 256²); torchvision keeps its own random
    weights (speed does not depend on their values).
    """
    lite_name, timm_name, tv_name = SIZES[cfg.size]
    torch.manual_seed(cfg.seed)
    reference = timm.create_model(timm_name, drop_path_rate=0.0, img_size=cfg.img_size)
    with torch.no_grad():  # Swin-V2's post-norms start at zero: its blocks would not reach the logits compared
        for name, p in reference.named_parameters():
            if name.endswith(("norm1.weight", "norm2.weight")) and not p.any():
                p.fill_(1.0)
    models: dict[str, nn.Module] = {}
    if "swinlite" in cfg.models:
        lite = timm.create_model(lite_name, drop_path_rate=0.0, img_size=cfg.img_size)  # V2: timm's stage windows
        lite.load_state_dict(convert_state_dict(reference.state_dict(), lite))
        models["swinlite"] = lite
    if "timm" in cfg.models:
        models["timm"] = reference
    if "torchvision" in cfg.models:
        tv = getattr(torchvision.models, tv_name)()
        for module in tv.modules():
            if isinstance(module, torchvision.ops.StochasticDepth):
                module.p = 0.0
        models["torchvision"] = tv
    return {name: model.to(cfg.device) for name, model in models.items()}


def max_output_difference(
    models: dict[str, nn.Module], x: torch.Tensor, precisions: tuple[str, ...] = ("fp32",)
) -> dict[str, float]:
    """Largest |logit difference| of swinlite from timm on ``x`` (eval, no autograd), in each of ``precisions``:
    ``"swinlite"`` in fp32, ``"swinlite bf16"`` with both models under bf16 autocast (swinlite's bf16 fast path: its
    kept bf16 weight copies and attention kernels). Both hold the same weights; :func:`differences_by_design` says
    where they still compute different functions."""
    if "timm" not in models or "swinlite" not in models:
        return {}
    differences = {}
    for precision in precisions:
        with torch.no_grad(), torch.autocast(x.device.type, torch.bfloat16, enabled=precision == "bf16"):
            diff = models["swinlite"].eval()(x).float() - models["timm"].eval()(x).float()
        differences["swinlite" if precision == "fp32" else f"swinlite {precision}"] = diff.abs().max().item()
    return differences


def differences_by_design(model: nn.Module, img_size: int) -> list[str]:
    """Why swinlite's ``model`` and timm's Swin of the same weights compute different functions on a square
    ``img_size`` input, decided from the geometry; empty where they compute the same one.

    - ``img_size`` is not a multiple of the patch: swinlite pads the image to whole patches, timm's patch
      embedding drops the remainder.
    - A stage's map is larger than its window but not a multiple of it: swinlite pads the map to whole windows
      before the cyclic shift and masks the padded keys, timm pads after the shift and lets them attend
      (docs/models.md, "Any input size"). A map no larger than the window is one window in both (timm shrinks its
      window to the map, swinlite masks the rest): the same function.
    """
    reasons = []
    patch = model.patch_size
    if img_size % patch[0] or img_size % patch[1]:
        reasons.append(
            f"at {img_size} px the image is not a multiple of the {patch[0]}×{patch[1]} patch: swinlite pads it to "
            "whole patches, timm's patch embedding drops the remainder"
        )
    padded = []
    grid = (-(-img_size // patch[0]), -(-img_size // patch[1]))  # swinlite pads the image to whole patches
    for i, (stage, size) in enumerate(zip(model.layers, stage_maps(grid, len(model.layers)), strict=True)):
        window = stage.blocks[0].window
        if any(pad and side > w for pad, side, w in zip(pad_to_window(size, window), size, window, strict=True)):
            padded.append(f"stage {i}, {size[0]}×{size[1]} map, {window[0]}×{window[1]} window")
    if padded:
        reasons.append(
            f"at {img_size} px some stages pad their windows ({'; '.join(padded)}): swinlite masks the padded keys, "
            'timm does not (docs/models.md, "Any input size")'
        )
    return reasons


def timm_attention(model: nn.Module) -> str:
    """How timm's Swin ``model`` computes its window attention, read from its attention layers' ``fused_attn``.

    timm's Swin sets it from ``use_fused_attn(experimental=True)``: its fused path (one
    ``F.scaled_dot_product_attention`` call) is experimental and on only with the environment variable
    ``TIMM_FUSED_ATTN=2``; timm's Swin-V2 has no fused path (no layer has the attribute).
    """
    flags = [m.fused_attn for m in model.modules() if hasattr(m, "fused_attn")]
    if not flags:
        return "explicit (this timm model has no fused attention path)"
    if all(flags):
        return "fused (fused_attn=True: F.scaled_dot_product_attention)"
    if not any(flags):
        return "explicit (fused_attn=False; TIMM_FUSED_ATTN=2 turns timm's fused path on)"
    return f"mixed (fused_attn=True in {sum(flags)} of {len(flags)} attention layers)"


def matmul_step(device: str, dtype: torch.dtype = torch.float32, n: int = 2048) -> tuple[Callable[[], object], int]:
    """An n x n x n matmul to time with the models (the machine's practical ceiling, same rounds), and its FLOPs.
    It writes into one output kept across calls: a fresh output of 8-16 MB is mapped and faulted in on every call
    wherever the allocator's thresholds are below its size, which is not the matmul's speed."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    out = torch.empty(n, n, device=device, dtype=dtype)
    return _synced(lambda: torch.matmul(a, b, out=out), device), 2 * n**3


def step_flops(model: nn.Module, x: torch.Tensor, task: str) -> int:
    """FLOPs (2 per multiply-add) of one forward (inference) or forward + backward (train) on ``x``: of timm's
    model (:func:`start_run`), whose ops the counter sees."""
    if task == "inference":
        model.eval()
        step: Callable[[], object] = lambda: model(x)  # noqa: E731
    else:
        step = make_step(model, x, task, "fp32", optimizer=False)
    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def make_step(
    model: nn.Module, x: torch.Tensor, task: str, precision: str, optimizer: bool = True
) -> Callable[[], None]:
    """A closure that runs one inference forward or one train step (cross-entropy, backward, SGD)."""
    device_type = x.device.type
    autocast = precision == "bf16"
    if task == "inference":
        model.eval()

        def infer() -> None:
            with torch.inference_mode(), torch.autocast(device_type, torch.bfloat16, enabled=autocast):
                model(x)

        return infer
    model.train()
    target = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    sgd = torch.optim.SGD(model.parameters(), lr=1e-6) if optimizer else None

    def train() -> None:
        with torch.autocast(device_type, torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(model(x), target)
        loss.backward()
        if sgd is not None:
            sgd.step()
        model.zero_grad(set_to_none=True)

    return train


def peak_memory_bytes(step: Callable[[], None], device: str) -> int:
    """Peak bytes held by PyTorch's allocator during ``step()`` above the level before it (module docstring).

    On the CPU it overstates the peak of a step that frees memory allocated before it: the profiler records no free of
    an allocation it did not see (the Swin steps measured here free only what they allocate: their events sum to 0).
    """
    if device.startswith("cuda"):  # that GPU's counters, not the current one's (nothing calls set_device)
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    total = peak = 0
    for _, nbytes in events:  # positive: allocation, negative: free
        total += nbytes
        peak = max(peak, total)
    return peak


def step_profile(step: Callable[[], object], device: str, row_limit: int = 12) -> dict[str, Any]:
    """One call of ``step`` (after a warm-up call), profiled: ``ops``, the operators (on CUDA the kernels) that take
    the most self time (name, share of the total, ms, calls); ``calls``, how many ran (on CUDA: kernel launches);
    ``self_ms``, their self time in all; ``wall_ms``, one unprofiled call's wall time. On CUDA self over wall is the
    share of the step the device is busy: well below 1, the step waits on the CPU's launches."""
    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]
    run = _synced(step, device)
    run()  # warm-up: caches, first-call allocation
    start = time.perf_counter()
    run()
    wall = time.perf_counter() - start
    with profile(activities=activities) as prof:
        run()
    attr = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, attr) > 0]
    total = sum(getattr(e, attr) for e in events)
    events.sort(key=lambda e: getattr(e, attr), reverse=True)
    ops = [
        dict(op=e.key, share=getattr(e, attr) / total, ms=getattr(e, attr) / 1e3, calls=e.count)
        for e in events[:row_limit]
    ]
    return dict(ops=ops, calls=sum(e.count for e in events), self_ms=total / 1e3, wall_ms=wall * 1e3)


def _synced(fn: Callable[[], object], device: str) -> Callable[[], object]:
    if not device.startswith("cuda"):
        return fn

    def run() -> None:
        fn()
        torch.cuda.synchronize(device)  # the GPU that runs fn, not the current one (nothing calls set_device)

    return run


def start_run(cfg: BenchConfig, tasks: tuple[str, ...]) -> tuple[dict[str, nn.Module], torch.Tensor, dict[str, Any]]:
    """What every Swin benchmark run begins with: the models, one seeded input batch, and the result's common
    fields (``config``, ``machine``, ``max_output_difference`` in each of ``cfg.precisions``,
    ``differences_by_design``, ``timm_attention`` where timm runs, ``gflop_per_image`` for ``tasks``, counted on
    timm's model)."""
    models = build_models(cfg)
    torch.manual_seed(cfg.seed)
    x = torch.randn(cfg.batch, 3, cfg.img_size, cfg.img_size, device=cfg.device)
    result: dict[str, Any] = dict(config=asdict(cfg), machine=machine_info(cfg.device))
    result["max_output_difference"] = max_output_difference(models, x, cfg.precisions)
    both = "swinlite" in models and "timm" in models
    result["differences_by_design"] = differences_by_design(models["swinlite"], cfg.img_size) if both else []
    if "timm" in models:
        result["timm_attention"] = timm_attention(models["timm"])
    # timm's model, built for the count where the run has none: swinlite's fast path runs private CPU kernels whose
    # FLOPs the counter does not see (its flash attention, wherever the CPU is not AVX2)
    if "timm" in models:
        flop_model = models["timm"]
    else:
        flop_model = timm.create_model(SIZES[cfg.size][1], img_size=cfg.img_size).to(cfg.device)
    result["gflop_per_image"] = {t: step_flops(flop_model, x, t) / cfg.batch / 1e9 for t in tasks}
    return models, x, result


def run_benchmark(cfg: BenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Build the models, measure every (task, precision, model) and return a JSON-ready result.

    Returns:
        dict with ``config``, ``machine`` (versions, threads, load average before and after),
        ``matmul_gflops`` (per "task precision", timed in the same rounds), ``gflop_per_image`` (per task,
        counted on timm's model),
        ``max_output_difference`` (swinlite vs timm logits, per precision), ``differences_by_design`` (why the two
        compute different functions at this size, if they do), ``timm_attention`` (timm's attention path, where timm
        runs) and ``rows`` (one per measurement).
    """
    models, x, result = start_run(cfg, cfg.tasks)
    result["matmul_gflops"] = {}
    rows = []
    for task in cfg.tasks:
        for precision in cfg.precisions:
            log(f"timing {task} {precision}: {', '.join(models)}")
            rows += _measure(models, x, task, precision, cfg, result)
    add_ratios(rows)
    result["rows"] = [asdict(r) for r in rows]
    finish_run(result)
    return result


def finish_run(result: dict[str, Any]) -> None:
    """What every run ends with: the load average now, and the kernels the fast path chose by measurement (CUDA:
    the attention kernel per shape, :mod:`swinlite.fast.measured`), as "key: kernel"."""
    result["machine"]["load_average_after"] = os.getloadavg()
    result["kernel_choices"] = [f"{', '.join(map(str, key))}: {name}" for key, name in measured.CHOICES.items()]


def _measure(
    models: dict[str, nn.Module], x: torch.Tensor, task: str, precision: str, cfg: BenchConfig, result: dict
) -> list[Row]:
    steps = {name: _synced(make_step(model, x, task, precision), cfg.device) for name, model in models.items()}
    rows = time_rows(steps, x.shape[0], task, precision, cfg, result)
    if task == "train" and cfg.memory:
        add_peak_memory(rows, steps, cfg.device)
    if cfg.profile:
        for name, step in steps.items():
            result.setdefault("profile", {})[f"{task} {precision} {name}"] = step_profile(step, cfg.device)
    return rows


def add_peak_memory(rows: list[Row], steps: dict[str, Callable[[], object]], device: str) -> None:
    """Fill each row's ``peak_mb`` with one call of its step (:func:`peak_memory_bytes`)."""
    for row, step in zip(rows, steps.values(), strict=True):
        row.peak_mb = peak_memory_bytes(step, device) / 2**20


def time_rows(
    steps: dict[str, Callable[[], object]], batch: int, task: str, precision: str, cfg: BenchConfig, result: dict
) -> list[Row]:
    """Time ``steps`` and a matmul in interleaved rounds: one row per step, its share of the matmul ceiling.

    The ceiling goes to ``result["matmul_gflops"][f"{task} {precision}"]``.
    """
    matmul, matmul_flops = matmul_step(cfg.device, {"fp32": torch.float32, "bf16": torch.bfloat16}[precision])
    counted = {name: FaultCounted(step) for name, step in steps.items()}
    *times, matmul_times = interleaved_seconds([*counted.values(), matmul], cfg.warmup, cfg.repeats)
    ceiling = matmul_flops / statistics.median(matmul_times)
    result["matmul_gflops"][f"{task} {precision}"] = ceiling / 1e9
    flops = result["gflop_per_image"][task] * 1e9
    rows = []
    for name, t in zip(steps, times, strict=True):
        s = statistics.median(t)
        fraction, faults = batch / s * flops / ceiling, counted[name].median(cfg.repeats)
        rows.append(Row(task, precision, name, s, batch / s, fraction, round_seconds=t, faults_per_call=faults))
    return rows


def add_ratios(rows: list[Row]) -> None:
    """Fill speed and memory ratios against timm's row of the same task and condition (same precision, and fp32).

    timm of the same precision ran in the same interleaved rounds: ``speed_vs_timm`` is the median of the per-round
    ratios (:func:`swinbench.timing.paired_ratio`), the ratio of the medians only for rows without rounds. timm's
    fp32 row of a bf16 row ran in other rounds (its own :func:`time_rows` call): ``speed_vs_timm_fp32`` is then the
    ratio of the medians.
    """
    timm_rows = {(r.task, r.precision, r.condition): r for r in rows if r.model == "timm"}
    for row in rows:
        same = timm_rows.get((row.task, row.precision, row.condition))
        fp32 = timm_rows.get((row.task, "fp32", row.condition))
        if same is not None:
            if row.round_seconds and same.round_seconds:
                row.speed_vs_timm = paired_ratio(same.round_seconds, row.round_seconds)
                row.speed_vs_timm_range = list(ratio_range(same.round_seconds, row.round_seconds))
            else:
                row.speed_vs_timm = row.images_per_s / same.images_per_s
            if row.peak_mb is not None and same.peak_mb:
                row.memory_vs_timm = row.peak_mb / same.peak_mb
        if fp32 is not None and fp32 is same:  # an fp32 row: the same rounds
            row.speed_vs_timm_fp32 = row.speed_vs_timm
        elif fp32 is not None:
            row.speed_vs_timm_fp32 = row.images_per_s / fp32.images_per_s


def machine_info(device: str) -> dict[str, Any]:
    """Versions, CPU/GPU name, the CPU's bf16 units, thread count and the load average when the run starts."""
    cpu = platform.processor() or platform.machine()
    flags: set[str] = set()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and cpu == (platform.processor() or platform.machine()):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    return dict(
        torch=torch.__version__,
        timm=timm.__version__,
        torchvision=torchvision.__version__,
        cpu=cpu,
        cpu_bf16=[name for flag, name in BF16_FLAGS.items() if flag in flags] if flags else None,
        threads=torch.get_num_threads(),
        gpu=torch.cuda.get_device_name(device) if device.startswith("cuda") else None,
        load_average_before=os.getloadavg(),
    )


# /proc/cpuinfo flag -> the bf16 unit it names
BF16_FLAGS = {"avx512_bf16": "AVX-512 BF16", "amx_bf16": "AMX-BF16", "avx_ne_convert": "AVX-NE-CONVERT"}
