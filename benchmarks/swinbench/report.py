"""Benchmark results as markdown tables and as a JSON file written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swinlite.io import atomic_write_bytes, json_bytes


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def markdown_table(result: dict[str, Any]) -> str:
    """The rows of :func:`swinbench.swin.run_benchmark` (or ``run_contended``, with a condition column) as a markdown
    table, with a header of context."""
    cfg, machine = result["config"], result["machine"]
    ceilings = ", ".join(f"{p} {g:.0f}" for p, g in result["matmul_gflops"].items())
    gflop = ", ".join(f"{t} {g:.2f}" for t, g in result["gflop_per_image"].items())
    diffs = ", ".join(f"{m} {d:.1e}" for m, d in result["max_output_difference"].items()) or "–"
    by_design = result.get("differences_by_design")
    if by_design:
        diffs += "; the two compute different functions here, by design: " + "; ".join(by_design)
    conditions = result.get("conditions")
    order = f"in a random order per round (order seed {cfg['order_seed']})" if conditions else "interleaved"
    lines = [
        f"Swin-{cfg['size']} batch {cfg['batch']} at {cfg['img_size']}², device {cfg['device']} "
        f"({machine['gpu'] or cpu_description(machine)}, {machine['threads']} threads); torch {machine['torch']}, "
        f"timm {machine['timm']}, torchvision {machine['torchvision']}."
        + (f" timm attention: {result['timm_attention']}." if result.get("timm_attention") else ""),
        f"Median of {cfg['repeats']} runs {order} after {cfg['warmup']} warm-up; × timm: the median of the "
        "per-round ratios to timm (× timm fp32 of a bf16 row: the ratio of the medians, timed in other rounds); "
        "spread: the lowest and highest per-round ratio. Matmul ceiling (GFLOP/s, a 2048³ matmul timed in the same "
        f"rounds): {ceilings}. GFLOP per image: {gflop}. Max |logit difference| from timm: {diffs}. "
        f"Load average before/after: {_load(machine['load_average_before'])} / "
        f"{_load(machine.get('load_average_after'))}.",
    ]
    if conditions:
        lines.append("Conditions: " + "; ".join(f"{name}: {what}" for name, what in conditions.items()) + ".")
    if any(r.get("faults_per_call") is not None for r in result["rows"]):
        lines.append(
            "Page faults per call: the process's minor page faults during one timed call (median), memory the "
            "allocator mapped afresh and the call touched first; they cost time and depend on the allocator's state."
        )
    if result.get("kernel_choices"):
        lines.append("Kernels chosen by measurement: " + "; ".join(result["kernel_choices"]) + ".")
    column = "| condition " if conditions else ""
    lines += [
        "",
        f"| task | precision {column}| model | img/s | × timm | spread | × timm fp32 | % of matmul ceiling | peak MB "
        "| memory × timm | page faults per call |",
        "|---|---|" + ("---|" if conditions else "") + "---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        model = r["model"] + (f" ({'; '.join(r['notes'])})" if r["notes"] else "")
        condition = f" {r.get('condition')} |" if conditions else ""
        lines.append(
            f"| {r['task']} | {r['precision']} |{condition} {model} | {r['images_per_s']:.2f} | "
            f"{_fmt(r['speed_vs_timm'], '.2f')} | {spread(r.get('speed_vs_timm_range'))} | "
            f"{_fmt(r['speed_vs_timm_fp32'], '.2f')} | "
            f"{_fmt(100 * r['ceiling_fraction'], '.0f', '%')} | {_fmt(r['peak_mb'], '.0f')} | "
            f"{_fmt(r['memory_vs_timm'], '.2f')} | {_fmt(r.get('faults_per_call'), '.0f')} |"
        )
    return "\n".join(lines + profile_tables(result.get("profile", {})))


MATMUL_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::addmm_",
    "aten::bmm",
    "aten::baddbmm",
    "mkl::_mkl_linear",
    "mkldnn::_linear_pointwise",
)


def profile_tables(profiles: dict[str, dict[str, Any]]) -> list[str]:
    """Markdown lines: per profiled step (:func:`swinbench.swin.step_profile`), its top operators by self time, the
    share of the matmuls among them, how many ran, and their self time against the step's wall time."""
    lines = []
    for name, profiled in profiles.items():
        ops = profiled["ops"]
        matmul = sum(o["share"] for o in ops if is_matmul(o["op"]))
        busy = 100 * profiled["self_ms"] / profiled["wall_ms"]
        lines += [
            "",
            f"{name}, top operators by self time: (the matmuls among them: {100 * matmul:.0f}% of the total; "
            f"{profiled['calls']} ran, {profiled['self_ms']:.1f} ms of self time in all, {busy:.0f}% of one "
            f"unprofiled step's {profiled['wall_ms']:.1f} ms wall time)",
            "",
        ]
        lines += ["| op | share | ms | calls |", "|---|---:|---:|---:|"]
        lines += [f"| {_short(o['op'])} | {100 * o['share']:.1f}% | {o['ms']:.1f} | {o['calls']} |" for o in ops]
    return lines


def is_matmul(op: str) -> bool:
    """Whether a profiled operator (CPU) or kernel (CUDA: cuBLAS's and CUTLASS's, named ``...gemm...``) is a matmul;
    attention kernels (SDPA's, ``fmha_...``) are not counted."""
    return op in MATMUL_OPS or "gemm" in op.lower()


def _short(op: str, chars: int = 100) -> str:
    """A kernel's name cut to its first ``chars`` characters: a templated CUDA kernel's runs to hundreds."""
    return op if len(op) <= chars else f"{op[:chars]}…"


def cpu_description(machine: dict[str, Any]) -> str:
    """The CPU's name with its bf16 support (``cpu_bf16`` of :func:`swinbench.swin.machine_info`, where recorded)."""
    bf16 = machine.get("cpu_bf16")
    if bf16 is None:
        return machine["cpu"]
    return f"{machine['cpu']}, bf16: {', '.join(bf16) if bf16 else 'none (no AVX-512 BF16, AMX or AVX-NE-CONVERT)'}"


def rel_pos_1d_table(result: dict[str, Any]) -> str:
    """The rows of :func:`swinbench.rel_pos_1d.run_rel_pos_1d` as a markdown table, with a header of context."""
    cfg, machine = result["config"], result["machine"]
    lines = [
        f"1-D relative attention, L {cfg['seq_len']}, width {cfg['dim']}, {cfg['num_heads']} heads, batch "
        f"{cfg['batch']}; forward without autograd, fp32, cpu ({machine['cpu']}, {machine['threads']} threads); "
        f"torch {machine['torch']}.",
        f"Median of {cfg['repeats']} interleaved runs after {cfg['warmup']} warm-up; the double loop runs once. "
        "time × plain: the time over plain attention's (above 1: slower). "
        f"Load average before/after: {_load(machine['load_average_before'])} / "
        f"{_load(machine.get('load_average_after'))}.",
        "",
        "| formulation | L | ms | time × plain | note |",
        "|---|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        lines.append(f"| {r['name']} | {r['seq_len']} | {r['ms']:.1f} | {r['vs_plain']:.2f} | {r['note']} |")
    return "\n".join(lines)


def spread(bounds: list[float] | tuple[float, float] | None) -> str:
    return "–" if bounds is None else f"{bounds[0]:.2f}–{bounds[1]:.2f}"


def _load(load: list[float] | tuple[float, ...] | None) -> str:
    return "–" if load is None else " ".join(f"{v:.1f}" for v in load)


def write_json(result: dict[str, Any], path: str | Path) -> None:
    """Write ``result`` to ``path`` as indented strict JSON (a non-finite figure as null), atomically."""
    atomic_write_bytes(path, json_bytes(result, indent=2))
