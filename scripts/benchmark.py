#!/usr/bin/env python
"""Benchmark swinlite against timm's and torchvision's Swin of the same size, side by side in one process.

Times inference and a train step (cross-entropy, backward, SGD) in fp32 and under bf16 autocast,
alternating between the models (median after warm-up), measures the peak memory of a train step and
the machine's matmul ceiling, and prints a markdown table (ratios against timm) and writes a JSON file.
With ``--compile`` it times fp32 inference eager and through ``swinlite.optimize_for_inference`` (inductor
freezing, the same call for every model), with compile times and a second process's warm-cache start; with
``--compile-train`` the train step through ``torch.compile`` (what ``train.compile: true`` runs), each precision.
With ``--sizes`` it times swinlite and timm at several input sizes (batch 2, inference and train step, peak
memory), the detection backbones at the largest size, and profiles inference there.
With ``--contended`` it times swinlite and timm (CPU) quiet, while a second process keeps one core busy, and
(inference) fed by a 2-worker image-decoding DataLoader as scripts/predict.py is, every round in a random order
(``--seed`` replays a run's orders; the JSON records the seed drawn otherwise).
With ``--rel-pos-1d`` it instead times the 1-D relative attention layer (L 1024, width 512, 8 heads,
batch 4) against plain attention and the double-loop formulation.

Examples:
    python scripts/benchmark.py --size tiny --batch 8 --repeats 7 --json benchmarks/cpu_tiny_b8.json
    python scripts/benchmark.py --size v2_tiny --batch 8 --precisions fp32 --json benchmarks/cpu_v2_tiny_b8_fp32.json
    python scripts/benchmark.py --compile --models swinlite,timm --json benchmarks/cpu_tiny_b8_compile.json
    python scripts/benchmark.py --compile-train --models swinlite,timm --json benchmarks/cpu_tiny_b8_compile_train.json
    python scripts/benchmark.py --contended --models swinlite,timm --precisions fp32 --json contended.json
    python scripts/benchmark.py --sizes --json benchmarks/cpu_sizes.json
    python scripts/benchmark.py --sizes 224,800x1333 --device cuda --json sizes_cuda.json
    python scripts/benchmark.py --rel-pos-1d --repeats 11 --json benchmarks/cpu_rel_pos_1d.json
    python scripts/benchmark.py --deploy --warmup 1 --repeats 7 --json benchmarks/cpu_deploy.json
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from pathlib import Path

from _cli import Parser, run, user_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # benchmark code sits beside its results

from swinbench.choices import (  # noqa: E402
    DEFAULT_SIZES,
    EVERY_RUN,
    IMG_SIZES,
    MIN_IMG_SIZE,
    MODELS,
    PRECISIONS,
    RUN_OPTIONS,
    SIZES,
    TASKS,
    option,
    options_of,
    parse_sizes,
    run_name,
    unpadded_sizes_error,
)

RUNS = tuple(run for run in RUN_OPTIONS if run)  # the options that choose a run other than the side-by-side one
DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def _csv(allowed: tuple[str, ...]):
    """The parser of a list option (--models, --tasks, --precisions): a value given twice counts once, where it first
    appears (two blocks of one case could not be told apart, and the ratios would compare across them)."""

    def parse(text: str) -> tuple[str, ...]:
        values = tuple(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(allowed)}, got {text!r}")
        return values

    return parse


def _sizes(text: str) -> tuple[tuple[int, int], ...]:
    try:
        return parse_sizes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _device(text: str) -> str:
    if not DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N (N: the GPU's index), got {text!r}")
    return text


def _epilog() -> str:
    lines = ["Options each run takes (any other is an error):"]
    lines += [f"  {run_name(run)}: {options_of(run)}" for run in RUN_OPTIONS]
    return "\n".join(lines)


def _parser() -> Parser:
    # Every option a run may not take defaults to None, so that one given explicitly is told from one left out.
    p = Parser(__doc__, epilog=_epilog())
    p.add_argument("--size", choices=tuple(SIZES), help="model size; v2_tiny: Swin-V2-T, window 8 (default: tiny)")
    p.add_argument("--batch", type=int, help="batch size (default: 8; 2 with --sizes)")
    p.add_argument("--img-size", type=int, help="square input size (default: 224; 256 for v2_tiny, its size)")
    p.add_argument("--device", type=_device, help="cpu or cuda[:i] (default: cpu)")
    p.add_argument("--models", type=_csv(MODELS), help="subset of swinlite,timm,torchvision (default: all)")
    p.add_argument("--tasks", type=_csv(TASKS), help="subset of inference,train (default: both)")
    p.add_argument(
        "--precisions",
        type=_csv(PRECISIONS),
        help="subset of fp32,bf16 (autocast) (default: both; fp32 alone on a CPU without bf16 units, which emulates "
        "bf16)",
    )
    p.add_argument(
        "--compile", action="store_true", help="fp32 inference, eager and through swinlite.optimize_for_inference"
    )
    p.add_argument(
        "--compile-train",
        action="store_true",
        help="the train step through torch.compile (what train.compile: true runs), each of --precisions",
    )
    p.add_argument(
        "--no-warm-start", action="store_true", default=None, help="--compile: skip the second, warm-cache process"
    )
    p.add_argument(
        "--contended",
        action="store_true",
        help="CPU: also time with one core kept busy by a second process and (inference) fed by a 2-worker "
        "image-decoding DataLoader; rounds in random order",
    )
    p.add_argument(
        "--seed",
        type=int,
        help="--contended: seed of the rounds' random orders, to replay a run (default: drawn for each run; the JSON "
        "records it as config.order_seed)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="torch threads, at most the cores this process may use (default: torch's, one per core)",
    )
    p.add_argument(
        "--sizes",
        nargs="?",
        const=",".join(f"{h}x{w}" for h, w in DEFAULT_SIZES),
        type=_sizes,
        help="time swinlite and timm at these sizes, N or HxW (default list: %(const)s); with --size v2_tiny each "
        "side a multiple of 4 (timm's Swin V2 does not pad to whole patches)",
    )
    p.add_argument("--warmup", type=int, help="untimed runs per model and case (default: 2; 1 with --sizes)")
    p.add_argument(
        "--repeats",
        type=int,
        help="timed runs per model and case; median (default: 7; 3 with --sizes, 15 with --contended)",
    )
    p.add_argument(
        "--no-memory",
        action="store_true",
        default=None,
        help="skip the peak-memory measurement: of the train steps (with --sizes, of the inference steps too)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        default=None,
        help="also profile one step of each model and case: top operators by self time",
    )
    p.add_argument(
        "--rel-pos-1d", action="store_true", help="time the 1-D relative attention layer instead of the Swin models"
    )
    p.add_argument(
        "--deploy",
        action="store_true",
        help="Swin-T inference served every way: eager, optimize_for_inference, ONNX Runtime on the any-size file "
        "(fp32, INT8) and on fixed-size exports, timm's Swin-T in ONNX Runtime (benchmarks/swinbench/deploy.py)",
    )
    p.add_argument(
        "--json",
        type=user_path("a JSON file"),
        default="benchmarks/benchmark.json",
        help="output JSON path; an existing file is replaced, atomically (default: benchmarks/benchmark.json, relative "
        "to the current folder)",
    )
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments, checked and resolved for the chosen run: ``args.run`` names it ("" for the side-by-side run); the
    options it does not take are None; --threads and --contended are checked against the cores this process may use,
    and a CPU run's default precisions leave out bf16 where the CPU emulates it. Values that need torch to judge (a GPU
    that is not there) are checked by the run's config, also before anything is built."""
    p = _parser()
    args = p.parse_args(argv)
    # --sizes= (an empty list) is a --sizes run too, refused below as --sizes 0 is
    runs = [run for run in RUNS if getattr(args, run) not in (None, False)]
    if len(runs) > 1:
        p.error(f"{' and '.join(map(option, runs))} are separate runs; pass one of them")
    args.run = runs[0] if runs else ""
    given = [name for name in vars(args) if name not in (*RUNS, *EVERY_RUN, "run") and getattr(args, name) is not None]
    for name in given:
        if name not in RUN_OPTIONS[args.run]:
            p.error(f"{option(name)} does not apply to {run_name(args.run)}, which takes {options_of(args.run)}")
    for name, low in dict(threads=1, batch=1, img_size=MIN_IMG_SIZE, warmup=0, repeats=1).items():
        if getattr(args, name) is not None and getattr(args, name) < low:
            p.error(f"{option(name)} must be at least {low}, got {getattr(args, name)}")
    if args.sizes is not None and (not args.sizes or min(min(size) for size in args.sizes) < MIN_IMG_SIZE):
        got = ",".join(f"{h}x{w}" for h, w in args.sizes)
        p.error(f"--sizes must be a non-empty list of N or HxW with N, H, W >= {MIN_IMG_SIZE}, got {got!r}")
    _check_cores(p, args)
    _resolve_defaults(args)
    if args.sizes is not None and (why := unpadded_sizes_error(args.size, args.sizes)):
        p.error(why)
    return args


def _resolve_defaults(args: argparse.Namespace) -> None:
    """Fill the options the chosen run takes and the user left out with their defaults for that run."""
    sizes = args.run == "sizes"
    defaults = dict(size="tiny", device="cpu", models=MODELS, tasks=TASKS)
    defaults |= dict(no_memory=False, profile=False, no_warm_start=False, batch=2 if sizes else 8)
    for name in RUN_OPTIONS[args.run]:
        if name in defaults and getattr(args, name) is None:
            setattr(args, name, defaults[name])
    if "img_size" in RUN_OPTIONS[args.run] and args.img_size is None:
        args.img_size = IMG_SIZES[args.size]
    if "precisions" in RUN_OPTIONS[args.run]:
        args.precisions = _cpu_precisions(args.precisions) if args.device == "cpu" else args.precisions or PRECISIONS
    if args.warmup is None:
        args.warmup = 1 if sizes else 2
    if args.repeats is None:
        args.repeats = 3 if sizes else 15 if args.run == "contended" else 7


def _cpu_precisions(given: tuple[str, ...] | None) -> tuple[str, ...]:
    """The precisions to time on the CPU: the ``given`` ones, else both where the CPU has bf16 units and fp32 alone
    where it emulates bf16 (a 2048³ matmul took 115 s on an AVX2 EPYC, and its % of the emulated matmul ceiling reads
    above 100 %). ``swinlite.device.cpu_computes_bf16`` decides, as for ``--amp bf16`` (benchmarks/cpu_run.sh: the same
    oneDNN check)."""
    from swinlite.device import cpu_computes_bf16  # after the argument errors: those come before torch loads

    if cpu_computes_bf16():
        return given or PRECISIONS
    if given is None:
        _log("note: bf16 left out: this CPU has no bf16 units (oneDNN emulates bf16, minutes per case); "
             "--precisions fp32,bf16 times it anyway")  # fmt: skip
        return ("fp32",)
    if "bf16" in given:
        _log("warning: bf16 on a CPU without bf16 units is emulated: slow, and its % of matmul ceiling means little")
    return given


def _check_cores(p: Parser, args: argparse.Namespace) -> None:
    """Refuse what the cores this process may use (its affinity: ``taskset`` narrows it) cannot run as asked: more
    ``--threads`` than cores (the JSON would record threads that shared cores), and ``--contended`` on one core (its
    "one core kept busy" would be the core the benchmark runs on)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # Linux: affinity
    if args.threads is not None and args.threads > cores:
        p.error(f"--threads {args.threads} is more than the {cores} cores this process may use")
    if args.run == "contended" and cores < 2:
        p.error(
            f"--contended needs at least 2 cores (one kept busy, one for the benchmark); this process may use {cores}"
        )


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Runs under ``_cli.run``: a bad option value (a ValueError of the config builds) is the one-line error. A SIGTERM
    unwinds as Ctrl-C does (the temporary files removed): "terminated", exit code 143."""
    args = parse_args(argv)
    from swinlite.sigterm import Terminated, terminate_as_interrupt  # after parsing: --help loads no torch

    try:
        with terminate_as_interrupt():
            _run(args)
    except Terminated:
        print("terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    return 0


def _run(args: argparse.Namespace) -> None:
    import torch
    from swinbench.compiled import (
        compile_table,
        compiled_train_table,
        run_compile_benchmark,
        run_compiled_train_benchmark,
    )
    from swinbench.contended import run_contended
    from swinbench.rel_pos_1d import run_rel_pos_1d
    from swinbench.report import markdown_table, rel_pos_1d_table, write_json
    from swinbench.sizes import SizesConfig, run_sizes, sizes_table
    from swinbench.swin import BenchConfig, run_benchmark

    from swinlite.io import check_output

    check_output(args.json, option="--json")  # before the run: a path that cannot be written would lose it
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.run == "deploy":
        from swinbench.deploy import deploy_table, run_deploy_benchmark

        result = run_deploy_benchmark(warmup=args.warmup, repeats=args.repeats, log=_log)
        table = deploy_table(result)
    elif args.run == "rel_pos_1d":
        result = run_rel_pos_1d(warmup=args.warmup, repeats=args.repeats)
        table = rel_pos_1d_table(result)
    elif args.run == "sizes":
        sizes_cfg = SizesConfig(
            sizes=args.sizes,
            size=args.size,
            batch=args.batch,
            device=args.device,
            tasks=args.tasks,
            memory=not args.no_memory,
            warmup=args.warmup,
            repeats=args.repeats,
        )
        result = run_sizes(sizes_cfg, log=_log)
        table = sizes_table(result)
    else:
        # the options this run takes; the runners record in the result's config what they fix (--compile: fp32
        # inference, no memory or profile)
        taken = dict(tasks=args.tasks, precisions=args.precisions, profile=args.profile)
        taken["memory"] = None if args.no_memory is None else not args.no_memory
        cfg = BenchConfig(
            size=args.size,
            batch=args.batch,
            img_size=args.img_size,
            device=args.device,
            models=args.models,
            warmup=args.warmup,
            repeats=args.repeats,
            **{name: value for name, value in taken.items() if value is not None},
        )
        if args.run == "compile":
            result = run_compile_benchmark(cfg, log=_log, warm_start=not args.no_warm_start)
            table = compile_table(result)
        elif args.run == "compile_train":
            result = run_compiled_train_benchmark(cfg, log=_log)
            table = compiled_train_table(result)
        elif args.run == "contended":
            result = run_contended(cfg, log=_log, order_seed=args.seed)
            table = markdown_table(result)
        else:
            result = run_benchmark(cfg, log=_log)
            table = markdown_table(result)
    write_json(result, args.json)
    print(table)


if __name__ == "__main__":
    # no OMP_WAIT_POLICY change: it would change what is timed
    sys.exit(run(main, passive_threads=False, one_process=True))
