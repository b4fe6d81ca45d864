"""Deployment benchmark behind ``scripts/benchmark.py --deploy``: Swin-T inference on CPU, every way of serving it,
side by side in one process.

Variants, per case (batch, H, W):

- ``eager``: swinlite (fast modules) under ``inference_mode``;
- ``optimize_for_inference``: :func:`swinlite.optimize_for_inference` compiled for the case's shape;
- ``ORT fp32``: ONNX Runtime on the one any-size file of :mod:`swinlite.export`;
- ``ORT fp32 fixed``: ONNX Runtime on an export of the same model fixed to the case's size (224² only: the target
  compares the two there);
- ``ORT INT8``: ONNX Runtime on the any-size file after dynamic INT8 quantization of its MatMuls;
- ``timm ORT fixed``: timm's Swin-T (the same weights) exported at the case's fixed batch and size, in ONNX
  Runtime.

Each case times its variants interleaved (a round runs each once) after warm-up: the medians, each speed ratio as the
median of its per-round ratios, and their spread. ONNX Runtime gets as many threads as torch, and its sessions do not
spin-wait after a run (``session.intra_op.allow_spinning`` 0): with spinning on, the threads of the session timed just
before keep the cores busy while the next one runs (on 2 cores, ONNX Runtime fp32 at 224² batch 1 took 69 ms alone,
92–100 ms interleaved with a second session; 76–79 ms either way without spinning). The result also holds each
variant's largest |logit difference| from eager and the check of the any-size file against eager at the issue's sizes
(logits and every feature level of a features export).
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import timm
import torch

from swinlite.export import (
    FeatureExtractor,
    export_onnx,
    export_program,
    onnx_max_abs_error,
    quantize_dynamic,
)
from swinlite.optimize import optimize_for_inference
from swinlite.weights import load_checkpoint

from .report import _load, spread
from .swin import machine_info
from .timing import interleaved_seconds, paired_ratio, ratio_range

MODEL = "swinlite_tiny_patch4_window7_224"
TIMM = "swin_tiny_patch4_window7_224"
CASES = ((1, 224, 224), (8, 224, 224), (1, 800, 1344))
CHECK_SIZES = ((224, 224), (250, 333), (97, 131), (800, 1344), (1344, 800))


def _session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    # no spin-waiting after a run: six sessions' threads spinning would take the cores from the one being timed
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _export(model: torch.nn.Module, path: Path, size: tuple[int, int], fixed: bool, names: list[str]) -> Path:
    program = export_program(model, torch.randn(2, 3, *size), fixed_size=fixed)
    return export_onnx(program, path, names)


def build_files(model: torch.nn.Module, timm_model: torch.nn.Module, folder: Path, log) -> dict[str, Path]:
    """The ONNX files the variants run: any-size fp32 and INT8, swinlite fixed at 224², timm fixed at each case's
    size (with the same weights)."""
    files = {"any": _export(model, folder / "any.onnx", (224, 224), False, ["logits"])}
    log("exported the any-size file")
    files["int8"] = quantize_dynamic(files["any"], folder / "int8.onnx")
    files["fixed 224x224"] = _export(model, folder / "fixed.onnx", (224, 224), True, ["logits"])
    for batch, h, w in CASES:  # timm's graph assumes a batch of more than one image: its batch is fixed too
        reference = timm.create_model(TIMM, img_size=(h, w)).eval()
        reference.load_state_dict(timm_model.state_dict())
        with torch.no_grad():
            program = torch.export.export(reference, (torch.randn(batch, 3, h, w),), strict=False)
        files[f"timm {batch} {h}x{w}"] = export_onnx(program, folder / f"timm_{batch}_{h}x{w}.onnx", ["logits"])
        log(f"exported timm at batch {batch}, {h}x{w}")
    return files


def run_deploy_benchmark(warmup: int = 1, repeats: int = 5, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Time every variant on every case, interleaved; check the any-size file at :data:`CHECK_SIZES`."""
    if warmup < 0 or repeats < 1:  # before the exports, minutes of work a median of nothing would throw away
        raise ValueError(f"expected warmup >= 0 and repeats >= 1, got {warmup} and {repeats}")
    torch.manual_seed(0)
    timm_model = timm.create_model(TIMM).eval()
    model = timm.create_model(MODEL).eval()
    load_checkpoint(model, timm_model.state_dict())  # the same weights: timm's logits equal ours at 224²
    machine = machine_info("cpu")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = build_files(model, timm_model, Path(tmp), log)
        megabytes = {name: files[name].stat().st_size / 2**20 for name in ("any", "int8")}
        sessions = {name: _session(path) for name, path in files.items()}
        checks = check_any_size(model, files["any"], Path(tmp), log)
        for batch, h, w in CASES:
            rows += time_case(model, sessions, torch.randn(batch, 3, h, w), warmup, repeats, log)
    machine["load_average_after"] = os.getloadavg()
    return dict(
        kind="deploy",
        config=dict(model=MODEL, timm=TIMM, warmup=warmup, repeats=repeats, cases=[list(c) for c in CASES]),
        machine=machine,
        file_mb=megabytes,
        rows=rows,
        checks=checks,
    )


def time_case(model, sessions, x: torch.Tensor, warmup: int, repeats: int, log) -> list[dict[str, Any]]:
    """One case: every variant that applies, timed interleaved; ms per batch, ratios to ORT fp32."""
    batch, _, h, w = x.shape
    feed = x.numpy()
    with torch.inference_mode():
        eager_out = model(x)
        compiled = optimize_for_inference(model, x)
    variants: dict[str, Callable[[], Any]] = {
        "eager": lambda: _infer(model, x),
        "optimize_for_inference": lambda: _infer(compiled, x),
        "ORT fp32": lambda: sessions["any"].run(None, {"images": feed}),
        "ORT INT8": lambda: sessions["int8"].run(None, {"images": feed}),
    }
    if f"fixed {h}x{w}" in sessions:
        variants["ORT fp32 fixed"] = lambda: sessions[f"fixed {h}x{w}"].run(None, {"images": feed})
    variants["timm ORT fixed"] = lambda: sessions[f"timm {batch} {h}x{w}"].run(None, {"images": feed})
    log(f"timing batch {batch} at {h}x{w}: {', '.join(variants)}")
    times = interleaved_seconds(list(variants.values()), warmup, repeats)
    reference = times[list(variants).index("ORT fp32")]
    rows = []
    for (name, fn), seconds in zip(variants.items(), times, strict=True):
        out = fn()
        out = out[0] if isinstance(out, list) else out.numpy() if isinstance(out, torch.Tensor) else out
        rows.append(
            dict(
                case=f"{h}x{w} b{batch}",
                variant=name,
                ms=1000 * statistics.median(seconds),
                round_seconds=seconds,
                vs_ort_fp32=paired_ratio(reference, seconds),
                vs_ort_fp32_range=list(ratio_range(reference, seconds)),
                max_diff=float(np.abs(np.asarray(out) - eager_out.numpy()).max()),
            )
        )
    return rows


def _infer(fn, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return fn(x)


def check_any_size(model, path: Path, folder: Path, log) -> list[dict[str, Any]]:
    """The any-size logits file and a features file (every level) against eager at :data:`CHECK_SIZES`."""
    features = FeatureExtractor(model, (0, 1, 2, 3)).eval()
    program = export_program(features, torch.randn(2, 3, 224, 224))
    features_path = export_onnx(program, folder / "features.onnx", [f"stage{i}" for i in range(4)])
    checks = []
    for h, w in CHECK_SIZES:
        x = torch.randn(1, 3, h, w)
        logits, levels = onnx_max_abs_error(path, model, x), onnx_max_abs_error(features_path, features, x)
        checks.append(dict(size=f"{h}x{w}", logits=logits, features=levels))
        log(f"checked {h}x{w}: logits {logits:.2e}, features {levels:.2e}")
    return checks


def deploy_table(result: dict[str, Any]) -> str:
    """The result as markdown: context, the timing table, the check table."""
    machine, cfg = result["machine"], result["config"]
    lines = [
        f"{cfg['model']} inference on {machine['cpu']}, {machine['threads']} threads (torch and ONNX Runtime); "
        f"torch {machine['torch']}, timm {machine['timm']}. Median of {cfg['repeats']} interleaved rounds after "
        f"{cfg['warmup']} warm-up; × ORT fp32: the median of the per-round ratios; spread: their lowest and highest. "
        "Load average before/after: "
        f"{_load(machine['load_average_before'])} / {_load(machine.get('load_average_after'))}. Files: fp32 "
        f"{result['file_mb']['any']:.0f} MB, INT8 {result['file_mb']['int8']:.0f} MB. timm's Swin-T has the same "
        "weights; at 800x1344 it computes another function (its shift wraps across the padding).",
        "",
        "| case | variant | ms | × ORT fp32 | spread | max abs diff from eager |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['case']} | {r['variant']} | {r['ms']:.1f} | {r['vs_ort_fp32']:.2f} | "
            f"{spread(r['vs_ort_fp32_range'])} | {r['max_diff']:.1e} |"
        )
    lines += ["", "The any-size file against eager PyTorch (max abs difference; features: every level):", ""]
    lines += ["| size | logits | features |", "|---|---:|---:|"]
    lines += [f"| {c['size']} | {c['logits']:.1e} | {c['features']:.1e} |" for c in result["checks"]]
    return "\n".join(lines)
