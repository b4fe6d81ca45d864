"""Cost against input size behind ``scripts/benchmark.py --sizes``: swinlite and timm Swin-T, and detection backbones.

At each size (H×W) swinlite and timm are built fresh for that size and timed alternately (median after warm-up),
for inference and for a train step; the peak memory of each step is measured as in :mod:`swinbench.swin`.
timm is given its fastest set-up at each size: ``img_size=(H, W)`` (attention masks built once) where H and W are
patch multiples, else ``strict_img_size=False`` with a patch embedding that pads (``dynamic_img_pad=True``; timm's
Swin V2 takes none, so its sizes must be patch multiples: :func:`swinbench.choices.unpadded_sizes_error`).
At the largest size the swinlite Swin-T + FPN detection backbone (:func:`swinlite.fpn.build_fpn_backbone`)
is timed next to torchvision's ResNet-50 FPN backbone (all layers trainable, frozen batch norm), and the operators
that take the time in swinlite's and timm's inference are profiled.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import timm
import torch
from timm.layers import PatchEmbed
from torch import nn
from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

from swinlite.fpn import build_fpn_backbone

from .choices import DEFAULT_SIZES, MIN_IMG_SIZE, PATCH, unpadded_sizes_error
from .report import profile_tables, spread
from .swin import (
    SIZES,
    _synced,
    check_device,
    finish_run,
    machine_info,
    make_step,
    peak_memory_bytes,
    step_profile,
    timm_attention,
)
from .timing import interleaved_seconds, paired_ratio, ratio_range


@dataclass
class SizesConfig:
    """What :func:`run_sizes` measures; ``size`` is the Swin size (a key of :data:`swinbench.swin.SIZES`)."""

    sizes: tuple[tuple[int, int], ...] = DEFAULT_SIZES
    size: str = "tiny"
    batch: int = 2
    device: str = "cpu"
    tasks: tuple[str, ...] = ("inference", "train")
    detection: bool = True
    profile: bool = True
    memory: bool = True
    warmup: int = 1
    repeats: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise ValueError(f"size must be one of {tuple(SIZES)}, got {self.size!r}")
        if not self.sizes or any(h < MIN_IMG_SIZE or w < MIN_IMG_SIZE for h, w in self.sizes):
            raise ValueError(f"sizes must be a non-empty list of (H, W) with H, W >= {MIN_IMG_SIZE}, got {self.sizes}")
        if why := unpadded_sizes_error(self.size, self.sizes):
            raise ValueError(why)
        if self.batch < 1 or self.warmup < 0 or self.repeats < 1:
            raise ValueError(
                f"expected batch >= 1, warmup >= 0, repeats >= 1; got {self.batch}, {self.warmup}, {self.repeats}"
            )
        check_device(self.device)


def build_timm(name: str, size: tuple[int, int], patch: int = PATCH) -> nn.Module:
    """timm's Swin at ``size`` (H, W): fixed masks where H, W are patch multiples, else dynamic size and padding."""
    if size[0] % patch == 0 and size[1] % patch == 0:
        return timm.create_model(name, drop_path_rate=0.0, img_size=size)
    return timm.create_model(
        name, drop_path_rate=0.0, strict_img_size=False, embed_layer=partial(PatchEmbed, dynamic_img_pad=True)
    )


def backbone_step(model: nn.Module, x: torch.Tensor, task: str) -> Callable[[], None]:
    """One inference forward, or one train step (loss: the sum of the mean of every output map, backward)."""
    if task == "inference":
        model.eval()

        def infer() -> None:
            with torch.inference_mode():
                model(x)

        return infer
    model.train()

    def train() -> None:
        sum(level.mean() for level in model(x).values()).backward()
        model.zero_grad(set_to_none=True)

    return train


def run_sizes(cfg: SizesConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure swinlite and timm at every size (and the detection backbones at the largest); JSON-ready result.

    Returns:
        dict with ``config``, ``machine``, ``timm_attention`` (timm's attention path,
        :func:`swinbench.swin.timm_attention`), ``rows`` (size, task, model, seconds, images_per_s, peak_mb,
        speed_vs_timm, memory_vs_timm) and, with ``cfg.profile``, ``profile`` = {model: markdown table}.
    """
    lite_name, timm_name, _ = SIZES[cfg.size]
    result: dict[str, Any] = dict(config=asdict(cfg), machine=machine_info(cfg.device), rows=[])
    for size in cfg.sizes:
        torch.manual_seed(cfg.seed)
        models = {
            "swinlite": timm.create_model(lite_name, drop_path_rate=0.0),
            "timm": build_timm(timm_name, size),
        }
        result["timm_attention"] = timm_attention(models["timm"])  # built alike at every size
        x = torch.randn(cfg.batch, 3, *size, device=cfg.device)
        for task in cfg.tasks:
            log(f"timing {task} at {size[0]}×{size[1]}: swinlite, timm")
            steps = {name: make_step(m.to(cfg.device), x, task, "fp32") for name, m in models.items()}
            result["rows"] += _measure(steps, size, task, cfg, log)
    largest = max(cfg.sizes, key=lambda s: s[0] * s[1])
    x = torch.randn(cfg.batch, 3, *largest, device=cfg.device)
    if cfg.detection:
        backbones = {
            f"swinlite {cfg.size} FPN": build_fpn_backbone(lite_name, drop_path_rate=0.0),
            "torchvision resnet50 FPN": resnet_fpn_backbone(backbone_name="resnet50", weights=None, trainable_layers=5),
        }
        for task in cfg.tasks:
            log(f"timing {task} at {largest[0]}×{largest[1]}: {', '.join(backbones)}")
            steps = {name: backbone_step(m.to(cfg.device), x, task) for name, m in backbones.items()}
            result["rows"] += _measure(steps, largest, task, cfg, log)
    if cfg.profile:
        log(f"profiling inference at {largest[0]}×{largest[1]}")
        result["profile"] = {
            "swinlite": op_profile(timm.create_model(lite_name).to(cfg.device).eval(), x),
            "timm": op_profile(build_timm(timm_name, largest).to(cfg.device).eval(), x),
        }
    _add_ratios(result["rows"])
    finish_run(result)
    return result


def _measure(
    steps: dict[str, Callable[[], None]], size: tuple[int, int], task: str, cfg: SizesConfig, log: Callable[[str], None]
) -> list[dict]:
    synced = [_synced(step, cfg.device) for step in steps.values()]
    times = interleaved_seconds(synced, cfg.warmup, cfg.repeats)
    rows = []
    for (name, step), t in zip(steps.items(), times, strict=True):
        peak = peak_memory_bytes(step, cfg.device) / 2**20 if cfg.memory else None
        s = statistics.median(t)
        rows.append(
            dict(
                size=list(size),
                task=task,
                model=name,
                seconds=s,
                images_per_s=cfg.batch / s,
                peak_mb=peak,
                round_seconds=t,
            )
        )
        memory = "memory not measured" if peak is None else f"peak {peak:.0f} MB"
        log(f"  {name}: {cfg.batch / s:.3f} img/s, {memory}")
    return rows


def _add_ratios(rows: list[dict]) -> None:
    """Ratios to timm at the same size and task, timed in the same interleaved rounds: speed, the median of the
    per-round ratios (:func:`swinbench.timing.paired_ratio`), its spread, and memory; None for the FPN backbones."""
    timm_rows = {(tuple(r["size"]), r["task"]): r for r in rows if r["model"] == "timm"}
    for row in rows:
        ref = timm_rows.get((tuple(row["size"]), row["task"]))
        same_family = ref is not None and row["model"] in ("swinlite", "timm")
        row["speed_vs_timm"] = paired_ratio(ref["round_seconds"], row["round_seconds"]) if same_family else None
        row["speed_vs_timm_range"] = (
            list(ratio_range(ref["round_seconds"], row["round_seconds"])) if same_family else None
        )
        row["memory_vs_timm"] = row["peak_mb"] / ref["peak_mb"] if same_family and ref["peak_mb"] else None


def op_profile(model: nn.Module, x: torch.Tensor, row_limit: int = 10) -> dict[str, Any]:
    """One inference forward profiled (:func:`swinbench.swin.step_profile`): the operators that take the most self
    time, how many ran, their self time against the wall time."""
    model.eval()

    def forward() -> None:
        with torch.inference_mode():
            model(x)

    return step_profile(forward, str(x.device), row_limit)


def sizes_table(result: dict[str, Any]) -> str:
    """The rows of :func:`run_sizes` as a markdown table with a header of context, then the profiles."""
    cfg, machine = result["config"], result["machine"]
    load = " / ".join(" ".join(f"{v:.1f}" for v in machine[k]) for k in ("load_average_before", "load_average_after"))
    lines = [
        f"Swin-{cfg['size']} batch {cfg['batch']}, fp32, device {cfg['device']} ({machine['gpu'] or machine['cpu']}, "
        f"{machine['threads']} threads); torch {machine['torch']}, timm {machine['timm']}, torchvision "
        f"{machine['torchvision']}; timm attention: {result['timm_attention']}. Median of {cfg['repeats']} "
        f"interleaved runs after {cfg['warmup']} warm-up; × timm: the median of the per-round ratios to timm; "
        "spread: the lowest and highest. "
        f"Load average before/after: {load}."
        + ("".join(f" Kernel chosen by measurement: {c}." for c in result.get("kernel_choices", []))),
        "",
        "| H×W | task | model | img/s | × timm | spread | peak MB | memory × timm |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        ratio = "–" if r["speed_vs_timm"] is None else f"{r['speed_vs_timm']:.2f}"
        mem_ratio = "–" if r["memory_vs_timm"] is None else f"{r['memory_vs_timm']:.2f}"
        peak = "–" if r["peak_mb"] is None else f"{r['peak_mb']:.0f}"
        lines.append(
            f"| {r['size'][0]}×{r['size'][1]} | {r['task']} | {r['model']} | {r['images_per_s']:.2f} | {ratio} | "
            f"{spread(r.get('speed_vs_timm_range'))} | {peak} | {mem_ratio} |"
        )
    lines += profile_tables({f"{name} inference": ops for name, ops in result.get("profile", {}).items()})
    return "\n".join(lines)
