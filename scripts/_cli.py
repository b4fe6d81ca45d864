"""Command-line plumbing of every script: a user error is one ``error: ...`` line and exit code 2.

It imports nothing heavy, so every script answers ``--help`` before torch and timm load; each script
parses its arguments first and imports the package afterwards. A script is::

    def main(argv: list[str] | None = None) -> ...:
        args = Parser(__doc__) ... .parse_args(argv)
        ...  # imports of swinlite, torch, ... here

    if __name__ == "__main__":
        sys.exit(run(main))

:func:`run` is the one place that decides what a user sees: user errors (:data:`USER_ERRORS`) and missing
optional packages as one line, Python warnings as ``warning: ...`` lines, paths that are not UTF-8 printed
with escapes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import NoReturn

# OSError covers missing files, folders that are files, permissions, a full disk: nothing a traceback explains better.
USER_ERRORS = (ValueError, OSError)
AMP = ("none", "bf16", "fp16")  # the keys of swinlite.device.AUTOCAST_DTYPES, for --help without torch
# swinlite.files.IMAGE_EXTENSIONS, the files of a folder the scripts read, for --help without torch (numpy and PIL).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

# How a user of --model NAME alone (its pretrained weights: swinlite.weights.pretrained_model) gets weights otherwise.
WEIGHTS_HINT = "or pass a local weights file: --model NAME --checkpoint FILE"

# Optional dependencies (pyproject.toml's [project.optional-dependencies]) by import name -> the extra that has them.
OPTIONAL = {
    "yaml": "train",
    "tqdm": "train",
    "matplotlib": "train",
    "sklearn": "train",
    "tensorboard": "train",
    "pycocotools": "detection",
    "onnx": "export",
    "onnxscript": "export",
    "onnx_ir": "export",
    "onnxruntime": "export",
}

# pip's name where it is not the import name
PIP_NAMES = {"sklearn": "scikit-learn", "yaml": "PyYAML", "onnx_ir": "onnx-ir"}

# The training scripts: the task each trains and its config class (module, name), to name another task's config key.
TRAIN_SCRIPTS = {
    "scripts/train.py": ("classification", "swinlite.classification.config", "Config"),
    "scripts/train_detection.py": ("detection", "swinlite.detection.config", "DetConfig"),
    "scripts/train_segmentation.py": ("segmentation", "swinlite.segmentation.config", "SegConfig"),
}

# Each training script's --data-dir dataset -> its task's built-in demo, the data.dataset --data-dir replaces in a
# --config file (configs/demo.yaml, det_demo.yaml, seg_demo.yaml): any other one the file sets is the user's choice.
DEMO_DATASETS = {"folder": "digits", "coco": "digits", "ade20k": "shapes"}


def fail(message: str) -> NoReturn:
    """Print ``error: message`` (one line) on stderr and exit with code 2."""
    print("error: " + " ".join(message.split("\n")), file=sys.stderr)
    sys.exit(2)


class Parser(argparse.ArgumentParser):
    """argparse with the module docstring as description, and its errors as one line (no usage block)."""

    def __init__(self, doc: str | None, **kwargs) -> None:
        super().__init__(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
        self._ema = False  # whether add_ema_argument added --ema, which parse_args then checks

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see {self.prog} --help)")

    def parse_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """argparse's, then the checks of the options added by the methods below that need the other options."""
        parsed = super().parse_args(args, namespace)
        onnx = getattr(parsed, "onnx", None) is not None  # check_onnx_options names --ema with the others
        if self._ema and parsed.ema and not onnx and parsed.checkpoint is None:
            self.error("--ema selects the EMA weights of a --checkpoint")
        return parsed

    def add_ema_argument(self) -> None:
        """``--ema``: the run's EMA weights instead of ``--checkpoint`` (:func:`ema_weights` finds them). Refused,
        before torch loads, by :meth:`parse_args` without a ``--checkpoint`` (``--model`` alone: timm's pretrained
        weights), and with ``--onnx`` by :func:`check_onnx_options`, which the scripts with ``--onnx`` call."""
        self.add_argument("--ema", action="store_true", help="use the run's EMA weights (the file beside --checkpoint)")
        self._ema = True

    def add_images_argument(self, *names: str, **kwargs) -> None:
        """The images a script reads, as ``swinlite.files.list_images`` lists them, with a help that says which files
        of a folder that is (:data:`IMAGE_EXTENSIONS`)."""
        self.add_argument(
            *names,
            nargs="+",
            help=f"images and folders of images; a folder gives its image files ({' '.join(IMAGE_EXTENSIONS)}, any "
            "case; searched recursively), a file named explicitly is read whatever its extension",
            **kwargs,
        )

    def add_amp_argument(self) -> None:
        """``--amp``: the autocast dtype, one of ``swinlite.device.AUTOCAST_DTYPES`` (named here without torch)."""
        self.add_argument(
            "--amp", default="none", choices=AMP, help="autocast dtype, fp16 on CUDA only (default: none)"
        )

    def add_compile_argument(self, note: str = "") -> None:
        """``--compile``: run the model through ``swinlite.optimize_for_inference``, compiled once."""
        self.add_argument(
            "--compile",
            action="store_true",
            help="compile with swinlite.optimize_for_inference (inductor freezing) for batches of --batch-size; "
            "smaller batches (the last one) are zero-padded to that size and the padded outputs dropped, so it "
            "compiles once; outputs equal eager to 1e-4" + note,
        )


def ema_weights(args: argparse.Namespace) -> Path | None:
    """The weights file a script loads: ``args.checkpoint``, or with ``--ema`` (:meth:`Parser.add_ema_argument`) its
    run's EMA weights (``swinlite.weights.ema_counterpart``), named on stderr when that is another file (the user
    sees which file the results are of). Call it after parsing: it imports swinlite, and torch with it.

    Raises:
        ValueError: ``--ema`` and no EMA weights beside the checkpoint (ema_counterpart's message).
    """
    if not args.ema:
        return args.checkpoint
    from swinlite.weights import ema_counterpart

    weights = ema_counterpart(args.checkpoint)
    if weights != args.checkpoint:
        print(f"EMA weights: {weights}", file=sys.stderr)
    return weights


def import_without_torch(name: str) -> ModuleType:
    """``swinlite.<name>`` for a module that imports no torch (``files``, ``predictions``, ``onnx_predict``),
    without running ``swinlite/__init__.py``, which loads torch and timm: the ONNX Runtime paths of the scripts.

    Unless swinlite is already imported, the package is registered bare (found, not executed); the rest of swinlite
    cannot be imported in that process afterwards.
    """
    if "swinlite" not in sys.modules:
        spec = importlib.util.find_spec("swinlite")
        if spec is None:
            raise ModuleNotFoundError("No module named 'swinlite'", name="swinlite")
        sys.modules["swinlite"] = importlib.util.module_from_spec(spec)  # its __path__, no code run
    return importlib.import_module(f"swinlite.{name}")


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """The one-line message for an optional dependency that is not installed, or None for any other module."""
    package = (error.name or "").split(".")[0]
    extra = OPTIONAL.get(package)
    if extra is None:
        return None
    install = f'pip install -e ".[{extra}]" (or pip install {PIP_NAMES.get(package, package)})'
    return f"this script needs the optional package {package!r}: {install}"


def other_task_key(error: Exception) -> str | None:
    """For an unknown config key (``swinlite.engine.config.UnknownKeyError``) that another training script's task
    has, the message that says so, instead of a "did you mean" among this task's keys (train_detection.py's
    ``train.label_smoothing`` suggested ``train.best_of``); None for any other error. The package is loaded by then
    (it raised the error), torch with it."""
    config = sys.modules.get("swinlite.engine.config")
    if config is None or not isinstance(error, config.UnknownKeyError):
        return None
    this, owners = None, []
    for script, (task, module, name) in TRAIN_SCRIPTS.items():
        cls = getattr(importlib.import_module(module), name)
        if cls is error.config:
            this = script
        elif error.key in config.valid_keys(cls()):
            owners.append((task, script))
    if this is None or not owners:
        return None
    tasks, scripts = " and ".join(t for t, _ in owners), ", ".join(s for _, s in owners)
    return f"{error.key} is a {tasks} setting ({scripts}); {this} has no such key"


def _warning_line(message, category, filename, lineno, line=None) -> str:
    """A Python warning as one ``warning: ...`` line (no file, line number or source line)."""
    return "warning: " + " ".join(str(message).split()) + "\n"


@contextlib.contextmanager
def script_output() -> Iterator[None]:
    """While a script runs: stdout writes file names that are not UTF-8 with escapes (it never fails printing after
    the work is done), and a warning prints as one ``warning: ...`` line; both as before afterwards."""
    stdout = sys.stdout
    errors = stdout.errors if hasattr(stdout, "reconfigure") else None  # a TextIOWrapper, as the console's
    if errors is not None:
        stdout.reconfigure(errors="backslashreplace")
    formatwarning, warnings.formatwarning = warnings.formatwarning, _warning_line
    try:
        yield
    finally:
        warnings.formatwarning = formatwarning
        if errors is not None:
            stdout.reconfigure(errors=errors)


def traceback_wanted() -> bool:
    """Whether ``SWINLITE_TRACEBACK`` asks for the traceback of a user error: any value but empty, ``0``, ``false``,
    ``no`` or ``off`` (any case)."""
    return os.environ.get("SWINLITE_TRACEBACK", "").strip().lower() not in ("", "0", "false", "no", "off")


def check_one_process() -> None:
    """Refuse a script that runs on one process started as one of several (``torchrun --nproc_per_node=2``: its
    ``WORLD_SIZE``): each process ran the whole work and wrote the same files (two summaries, a race on one folder).
    The message names the environment as the cause: a ``WORLD_SIZE`` left in a plain ``python`` environment (a
    Kubernetes PyTorchJob pod sets it in every container) refuses it too. Only under ``torchrun`` (which sets
    ``TORCHELASTIC_RUN_ID``) do the processes but each machine's first (``LOCAL_RANK`` 0) exit with code 2 without a
    word; a process started by hand always prints its line."""
    world = os.environ.get("WORLD_SIZE", "1").strip()
    if not world.isdigit() or int(world) <= 1:
        return
    if "TORCHELASTIC_RUN_ID" in os.environ and os.environ.get("LOCAL_RANK", "0").strip() != "0":
        sys.exit(2)
    script = Path(sys.argv[0]).name or "this script"
    fail(f"the environment says this is one of {world} processes (WORLD_SIZE={world}, as torchrun sets it): "
         f"{script} runs on one: start it with python alone, with WORLD_SIZE unset or 1")  # fmt: skip


def run(
    main: Callable[[list[str] | None], object],
    argv: list[str] | None = None,
    passive_threads: bool = True,
    one_process: bool = False,
) -> int:
    """Run a script's ``main``: user errors (:data:`USER_ERRORS`, a missing optional package) print one line and exit
    with code 2; returns ``main``'s exit code (0 when it returns none).

    Set ``SWINLITE_TRACEBACK=1`` to see the traceback instead (:func:`traceback_wanted`).

    Args:
        main: the script's ``main(argv)``.
        argv: its arguments (None: the command line's).
        passive_threads: idle OpenMP threads sleep instead of spinning (set before torch loads): on shared CPUs
            spinning threads waste the cores others (and the data loader) need. Off for timing runs.
        one_process: the script runs on one process: refused first, under ``torchrun`` or a ``WORLD_SIZE`` above 1
            (:func:`check_one_process`; every script but the training ones, which ``torchrun`` runs on several).
    """
    if one_process:
        check_one_process()
    if passive_threads:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with script_output():
        try:
            code = main(argv)
        except ModuleNotFoundError as e:
            message = missing_extra(e)
            if message is None or traceback_wanted():
                raise
            fail(message)
        except USER_ERRORS as e:
            if traceback_wanted():
                raise
            fail(other_task_key(e) or str(e))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
    return code if isinstance(code, int) else 0


def not_empty(expected: str) -> Callable[[str], str]:
    """An argparse ``type`` that refuses an empty value (``--data-dir "$DATA"`` with DATA unset), which the scripts
    took for the option not given: the demo's data and config were used instead, ``.`` as the output folder."""

    def check(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"empty; expected {expected}")
        return value

    return check


def add_train_arguments(parser: Parser, config_help: str, data_help: str) -> None:
    """The options every training script takes: ``--config``, ``--data-dir``, ``--output-dir``, ``--resume``,
    ``--overwrite``, ``--print-config`` and ``key=value`` overrides (parse with ``parse_intermixed_args``); an empty
    ``--config``, ``--data-dir`` or ``--output-dir`` is an error."""
    parser.add_argument("--config", type=not_empty("a YAML file"), help=config_help)
    parser.add_argument("--data-dir", type=not_empty("a dataset folder"), help=data_help)
    parser.add_argument(
        "--output-dir",
        type=not_empty("a folder for the run"),
        help="where metrics, curves and checkpoints go (sets train.output_dir)",
    )
    parser.add_argument("--resume", action="store_true", help="continue the run in the output dir from resume.pt")
    parser.add_argument("--overwrite", action="store_true", help="start over in an output dir that holds a run")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, applied last")


def train_overrides(args: argparse.Namespace, dataset: str) -> list[str]:
    """The ``key=value`` overrides the options of :func:`add_train_arguments` stand for, then the user's, which are
    applied last (as ``--help`` says): ``--data-dir`` sets ``data.data_dir``, and ``data.dataset=dataset`` unless
    the ``--config`` file sets a data.dataset other than the task's demo (:data:`DEMO_DATASETS`): ``--data-dir DIR
    --config configs/demo.yaml`` trains DIR, ``--config`` with ``data.dataset: folder`` keeps folder;
    ``--output-dir`` sets ``train.output_dir``.

    Raises:
        ValueError: the ``--config`` file cannot be read (missing, not YAML), as loading the config would say.
    """
    options = []
    if args.data_dir:
        options.append(f"data.data_dir={args.data_dir}")
        if args.config is None or config_dataset(Path(args.config)) in (None, DEMO_DATASETS[dataset]):
            options.append(f"data.dataset={dataset}")
    if args.output_dir:
        options.append(f"train.output_dir={args.output_dir}")
    return [*options, *args.overrides]


def config_module() -> ModuleType:
    """``swinlite.engine.config``, the reader and writer of config files: the package's once it is loaded, before
    that its file run alone (it imports PyYAML and the standard library only; importing it by name runs
    ``swinlite/__init__.py``, which loads torch and timm, and ``--help`` would wait for them)."""
    if "swinlite.engine.config" in sys.modules:
        return sys.modules["swinlite.engine.config"]
    name = "_swinlite_engine_config"
    if name not in sys.modules:
        package = importlib.util.find_spec("swinlite")
        if package is None:
            raise ModuleNotFoundError("No module named 'swinlite'", name="swinlite")
        spec = importlib.util.spec_from_file_location(name, Path(package.origin).parent / "engine" / "config.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # where dataclasses looks its module up
        spec.loader.exec_module(module)  # PyYAML missing: run() names the extra
    return sys.modules[name]


def config_dataset(path: Path) -> object:
    """The ``data.dataset`` a config file sets, as written (None when it sets none), read without torch."""
    return config_module().read_yaml(path).get("data", {}).get("dataset")


def config_file_lines(path: Path) -> str:
    """A config file's keys as indented ``section.key = value`` lines, each value as the config loader reads it,
    written as YAML (``model.pretrained = true``), for a help text (no torch)."""
    config = config_module()
    try:
        tree = config.read_yaml(path)
    except ValueError as e:  # the help (built for every run of a script) names it, the run refuses it
        return f"      ({e})"
    lines = [f"{s}.{key} = {config.flow_yaml(value)}" for s, keys in tree.items() for key, value in keys.items()]
    return "\n".join(f"      {line}" for line in lines)


def configs_epilog(demo: tuple[Path, str], data: Path, defaults: str, options: str) -> str:
    """The help epilog of a training script whose config depends on ``--data-dir``: which file applies when, with
    its keys; ``demo`` is (file, what it trains), ``defaults`` says where every other key's default lives."""
    root = demo[0].parents[1]
    return (
        "which settings apply (key=value arguments are applied last, on top of them):\n"
        f"  without --data-dir and --config: {demo[0].relative_to(root)} ({demo[1]})\n"
        f"{config_file_lines(demo[0])}\n"
        f"  with --data-dir, without --config: {data.relative_to(root)} (needs the ImageNet weights of the tag: "
        "fetched once, then cached)\n"
        f"{config_file_lines(data)}\n"
        "  with --config FILE: that file's keys\n"
        f"Every other key keeps its default from {defaults};\n"
        "--print-config shows every key as it will apply to your command, and exits. Options users look for:\n"
        + options
    )


def check_size(size: tuple[int, int], patch: tuple[int, int], name: str) -> None:
    """Refuse a --size below one patch before anything is written: every image would fail, blamed on the image.

    Raises:
        ValueError: naming --size and the smallest size the model takes.
    """
    if size[0] < patch[0] or size[1] < patch[1]:
        raise ValueError(
            f"--size {size[0]} {size[1]} is smaller than one patch of {name}: expected H >= {patch[0]}, W >= {patch[1]}"
        )


def check_test_options(parser: Parser, args: argparse.Namespace) -> None:
    """The test options of ``segment.py`` and ``evaluate_segmentation.py``, as they are parsed: ``--ratios`` must be
    positive finite scales (inf was an OverflowError traceback, nan "cannot convert float NaN to integer"), and
    ``--stride`` (slide mode's window step) positive, and refused with ``--mode whole``, where it would be ignored
    (with the whole mode a checkpoint or file records, ``swinlite.seg_views.stride_unused`` refuses it later; this
    check runs before torch loads, which importing swinlite would do)."""
    if args.ratios and not all(0 < ratio < math.inf for ratio in args.ratios):
        parser.error(f"--ratios must be positive finite scales of the test size, got {' '.join(map(str, args.ratios))}")
    if args.stride and min(args.stride) < 1:
        parser.error(f"--stride must be positive, got {' '.join(map(str, args.stride))}")
    if args.stride and args.mode == "whole":
        parser.error("--stride is the windows' step of --mode slide, and --mode whole predicts each image whole: "
                     "drop --stride, or pass --mode slide")  # fmt: skip


def check_at_least(parser: argparse.ArgumentParser, args: argparse.Namespace, **lows: int) -> None:
    """``parser.error`` naming the first option of ``lows`` (``batch_size=1``: ``--batch-size``) given below its
    least value, and the value given; an option left at None is not given."""
    for name, low in lows.items():
        value = getattr(args, name)
        if value is not None and value < low:
            parser.error(f"--{name.replace('_', '-')} must be at least {low}, got {value}")


def check_onnx_options(
    parser: Parser,
    args: argparse.Namespace,
    others: Sequence[tuple[str, object]] = (),
    how: str = "in ONNX Runtime on the CPU",
) -> None:
    """``--onnx`` (``predict.py``, ``detect.py``, ``segment.py``) runs the exported file ``how``: every option given
    with it that it does not take is refused, all named in one error (naming the first alone left the others to a
    rerun, one at a time): ``--ema`` (the file holds the weights it was exported from), ``--device``, ``--amp``, and
    the script's ``others`` (flag, value: given when truthy)."""
    options = [*others, ("--ema", args.ema), ("--device", args.device is not None), ("--amp", args.amp != "none")]
    given = [flag for flag, value in options if value]
    if args.onnx is None or not given:
        return
    named = given[0] if len(given) == 1 else f"{', '.join(given[:-1])} and {given[-1]}"
    verb = "does" if len(given) == 1 else "do"
    hint = " (scripts/export_onnx.py --ema exports a run's EMA weights)" if args.ema else ""
    parser.error(f"--onnx runs the exported file {how}: {named} {verb} not apply{hint}")


def check_model_file(path: Path | None, option: str) -> None:
    """A missing ``--checkpoint`` / ``--onnx`` file, said before the output folder's checks, which come before the
    model is read (into a folder of an earlier run's outputs, a mistyped path asked for ``--overwrite`` first)."""
    if path is not None and not path.exists():
        raise ValueError(f"{option} {path} does not exist")
