"""The ONNX conversion of ``swinlite.export.export_onnx`` against ``torch.onnx.export``'s default optimization: the
same exported program (any size, Swin-T by default) converted by each, then timed side by side in ONNX Runtime.

``torch.onnx.export(optimize=True)`` runs onnxscript's optimizer (constant folding, then its pattern rewriter, then
clean-up passes); swinlite converts with ``optimize=False`` and runs the folding and clean-up alone
(``swinlite.export.simplify``). Printed per pipeline: conversion seconds, node count, file size, ONNX Runtime's
median latency over interleaved rounds, and the largest difference between the two files' outputs. Figures:
benchmarks/onnx_passes.md.

    python benchmarks/onnx_passes_check.py                                  # Swin-T, 224x224, batch 1
    python benchmarks/onnx_passes_check.py --model swinlite_pico_patch2_window4_32 --size 32
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
import timm
import torch

import swinlite  # noqa: F401  (registers the models)
from swinlite import export


def convert(model: torch.nn.Module, size: int, optimize: bool) -> tuple[bytes, float, int]:
    """The serialized file, its conversion seconds (torch.export not counted) and its node count."""
    program = export.export_program(model, torch.rand(2, 3, size, size), (size // 2, size * 2))
    start = time.perf_counter()
    with export.symbolic_sizes():
        onnx_program = torch.onnx.export(program, input_names=["images"], output_names=["logits"], optimize=optimize)
    if not optimize:
        export.simplify(onnx_program.model)
    seconds = time.perf_counter() - start
    proto = onnx_program.model_proto
    return proto.SerializeToString(), seconds, len(proto.graph.node)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="swinlite_tiny_patch4_window7_224")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    model = timm.create_model(args.model).eval()
    files = {
        "torch optimize=True": convert(model, args.size, True),
        "swinlite simplify": convert(model, args.size, False),
    }
    images = np.random.default_rng(0).random((1, 3, args.size, args.size), dtype=np.float32)
    sessions = {
        name: ort.InferenceSession(data, providers=["CPUExecutionProvider"]) for name, (data, _, _) in files.items()
    }
    outputs = {name: session.run(None, {"images": images})[0] for name, session in sessions.items()}
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(args.rounds):
        for name, session in sessions.items():
            start = time.perf_counter()
            session.run(None, {"images": images})
            times[name].append(time.perf_counter() - start)
    threads = torch.get_num_threads()
    print(f"{args.model} at {args.size}x{args.size}, batch 1, torch {torch.__version__}, {threads} threads")
    for name, (data, seconds, nodes) in files.items():
        latency = 1e3 * statistics.median(times[name])
        print(
            f"{name:20s} convert {seconds:5.1f} s  {nodes:5d} nodes  {len(data) / 1e6:6.1f} MB  ORT {latency:6.1f} ms"
        )
    first, second = outputs.values()
    print(f"largest output difference: {float(np.abs(first - second).max()):.1e}")


if __name__ == "__main__":
    main()
