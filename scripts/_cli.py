"""Command-line plumbing of every script: a user error is one ``error: ...`` line and exit code 2.

It imports nothing heavy, so every script answers ``--help`` before torch and timm load; each script
parses its arguments first and imports the package afterwards. A script is::

    def main(argv: list[str] | None = None) -> ...:
        args = Parser(__doc__) ... .parse_args(argv)
        ...  # imports of swinlite, torch, ... here

    if __name__ == "__main__":
        sys.exit(run(main))

:func:`run` (``swinlite.script``'s, the one a script outside this repository imports) is the one place that
decides what a user sees: user errors (:data:`USER_ERRORS`) and missing
optional packages as one line, Python warnings as ``warning: ...`` lines, paths that are not UTF-8 printed
with escapes.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import NoReturn


def package_module(name: str) -> ModuleType:
    """``swinlite.<name>`` for a module that imports no torch (``script``, ``engine.config``: the standard library
    and PyYAML; ``files``: NumPy and Pillow too): the package's once it is loaded, before that its file run alone under
    a private name (importing it by name runs ``swinlite/__init__.py``, which loads torch and timm, and ``--help``
    would wait for them); the rest of the package can be imported afterwards, unlike :func:`import_without_torch`'s."""
    if f"swinlite.{name}" in sys.modules:
        return sys.modules[f"swinlite.{name}"]
    private = "_swinlite_" + name.replace(".", "_")
    if private not in sys.modules:
        package = importlib.util.find_spec("swinlite")
        if package is None:
            raise ModuleNotFoundError("No module named 'swinlite'", name="swinlite")
        path = Path(package.origin).parent.joinpath(*name.split(".")).with_suffix(".py")
        spec = importlib.util.spec_from_file_location(private, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[private] = module  # where dataclasses looks its module up
        spec.loader.exec_module(module)  # PyYAML missing: run() names the extra
    return sys.modules[private]


# What a user sees of a script's errors and warnings: swinlite.script's, one implementation for every script.
_script = package_module("script")
USER_ERRORS, OPTIONAL, TRAIN_SCRIPTS = _script.USER_ERRORS, _script.OPTIONAL, _script.TRAIN_SCRIPTS
fail, run = _script.fail, _script.run

AMP = ("none", "bf16", "fp16")  # the keys of swinlite.device.AUTOCAST_DTYPES, for --help without torch
# swinlite.files.IMAGE_EXTENSIONS, the files of a folder the scripts read, for --help without torch (numpy and PIL).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

# How a user of --model NAME alone (its pretrained weights: swinlite.weights.pretrained_model) gets weights otherwise.
WEIGHTS_HINT = "or pass a local weights file: --model NAME --checkpoint FILE"

# Each training script's --data-dir dataset -> its task's built-in demo, the data.dataset --data-dir replaces in a
# --config file (configs/demo.yaml, det_demo.yaml, seg_demo.yaml): any other one the file sets is the user's choice.
DEMO_DATASETS = {"folder": "digits", "coco": "digits", "ade20k": "shapes"}


class Parser(argparse.ArgumentParser):
    """argparse with the module docstring as description, and its errors as one line (no usage block). Options are
    taken whole, never by a prefix: the scripts have both ``--output`` (a file) and ``--output-dir`` (a folder), and
    ``--output`` to a script of the other was read as it."""

    def __init__(self, doc: str | None, **kwargs) -> None:
        kwargs = {"formatter_class": argparse.RawDescriptionHelpFormatter, "allow_abbrev": False} | kwargs
        super().__init__(description=doc, **kwargs)
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

    def add_predictor_arguments(self, exported: str, outputs: str) -> None:
        """A training run's predictor (detect.py, segment.py): ``--checkpoint`` or ``--onnx`` (``exported``: what
        scripts/export_onnx.py wrote), ``--ema``, ``--input`` images, ``--output-dir`` (``outputs``: what it holds),
        ``--device`` and ``--amp``; ``--onnx`` with the torch-only ones is refused by :func:`check_onnx_options`."""
        source = self.add_mutually_exclusive_group(required=True)
        source.add_argument(
            "--checkpoint", type=user_path("a weights file"), help="best.safetensors or last.safetensors"
        )
        source.add_argument(
            "--onnx",
            type=user_path("an ONNX file"),
            help=f"{exported} exported by scripts/export_onnx.py (ONNX Runtime)",
        )
        self.add_ema_argument()
        self.add_images_argument("--input", required=True)
        self.add_argument(
            "--output-dir", required=True, type=user_path("a folder for the outputs"), help=f"for {outputs}"
        )
        self.add_argument("--device", help="auto, cpu, cuda, cuda:1, ... (default: auto; not with --onnx)")
        self.add_amp_argument()

    def add_images_argument(self, *names: str, **kwargs) -> None:
        """The images a script reads, as ``swinlite.files.list_images`` lists them, with a help that says which files
        of a folder that is (:data:`IMAGE_EXTENSIONS`); each a path (:func:`user_path`)."""
        self.add_argument(
            *names,
            nargs="+",
            type=user_path("an image or a folder of images"),
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


def user_path(expected: str) -> Callable[[str], Path]:
    """The argparse ``type`` of every path option. An empty value is refused (``--data-dir "$DATA"`` with DATA unset):
    the scripts took it for the option not given (the demo's data and config were used instead) or for ``.`` (the
    output folder). A leading ``~`` is expanded as a shell expands it in an argument of its own: ``--output-dir=~/x``
    reaches the script unexpanded (bash expands ``~`` after ``=`` only where the text before it is a shell name), and
    made a folder named ``~`` in the working directory."""

    def parse(value: str) -> Path:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"empty; expected {expected}")
        try:
            return Path(value).expanduser()
        except RuntimeError:  # ~name of no user, or no home folder to expand ~ to
            raise argparse.ArgumentTypeError(
                f"{value!r}: no home folder found for its ~; expected {expected}"
            ) from None

    return parse


def add_train_arguments(parser: Parser, config_help: str, data_help: str) -> None:
    """The options every training script takes: ``--config``, ``--data-dir``, ``--output-dir``, ``--resume``,
    ``--overwrite``, ``--print-config`` and ``key=value`` overrides (parse with ``parse_intermixed_args``); an empty
    ``--config``, ``--data-dir`` or ``--output-dir`` is an error, a leading ``~`` expanded (:func:`user_path`)."""
    parser.add_argument("--config", type=user_path("a YAML file"), help=config_help)
    parser.add_argument("--data-dir", type=user_path("a dataset folder"), help=data_help)
    parser.add_argument(
        "--output-dir",
        type=user_path("a folder for the run"),
        help="where metrics, curves and checkpoints go (sets train.output_dir)",
    )
    parser.add_argument("--resume", action="store_true", help="continue the run in the output dir from resume.pt")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in an output dir that holds a run, or scripts' results of other weights (eval.json, ...)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print a new run's config as YAML and exit (not with --resume: OUT/config.yaml holds the run's)",
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, applied last")


def train_overrides(args: argparse.Namespace, dataset: str) -> list[str]:
    """The ``key=value`` overrides the options of :func:`add_train_arguments` stand for, then the user's, which are
    applied last (as ``--help`` says): ``--data-dir`` sets ``data.data_dir``, and ``data.dataset=dataset`` unless
    the ``--config`` file sets a data.dataset other than the task's demo (:data:`DEMO_DATASETS`): ``--data-dir DIR
    --config configs/demo.yaml`` trains DIR, ``--config`` with ``data.dataset: folder`` keeps folder (a ``dataset``
    of a task of your own has no demo: a data.dataset the file sets is kept); ``--output-dir`` sets
    ``train.output_dir``.

    A ``--config`` file that cannot be read (missing, not YAML) is left to loading the config, which refuses it: under
    a launch of several processes, there the others learn of it (one refused here alone left them waiting
    train.dist_timeout).
    """
    options = []
    if args.data_dir:
        options.append(f"data.data_dir={args.data_dir}")
        if args.config is None or config_dataset(args.config) in (None, DEMO_DATASETS.get(dataset)):
            options.append(f"data.dataset={dataset}")
    if args.output_dir:
        options.append(f"train.output_dir={args.output_dir}")
    return [*options, *args.overrides]


def config_module() -> ModuleType:
    """``swinlite.engine.config``, the reader and writer of config files (it imports PyYAML and the standard library
    only), by :func:`package_module`."""
    return package_module("engine.config")


def config_dataset(path: Path) -> object:
    """The ``data.dataset`` a config file sets, as written (None when it sets none, or the file cannot be read),
    read without torch."""
    try:
        tree = config_module().read_yaml(path)
    except ValueError:  # loading the config says why, where the processes of a launch tell each other (checked_alike)
        return None
    return tree.get("data", {}).get("dataset")


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


def files_module() -> ModuleType:
    """``swinlite.files`` (NumPy and Pillow, no torch) by :func:`package_module`: its checks of the paths a script
    reads, made right after parsing, before torch loads (a missing path was said after seconds of imports), in the
    words of the checks that read them later, which stay (a path can vanish in between)."""
    return package_module("files")


def check_model_file(path: Path | None, option: str) -> None:
    """A model file (``--checkpoint``, ``--onnx``; ``option``: what the error names it by, as the script's later check
    does) that is missing or not a file (``swinlite.files.check_model_path``), said before torch loads and before the
    output folder's checks, which come before the model is read (into a folder of an earlier run's outputs, a mistyped
    path asked for ``--overwrite`` first)."""
    if path is not None:
        meant = None if option == "--onnx" else "best.safetensors"  # a run folder's weights; it holds no ONNX file
        files_module().check_model_path(path, option, meant)


def check_drawing_inputs(images: list[Path], checkpoint: Path | None, onnx: Path | None) -> None:
    """The images and the model file (``--checkpoint``, else ``--onnx``) detect.py and segment.py read: a missing one
    said before torch loads (each is read and checked again later)."""
    files_module().check_image_paths(images)
    check_model_file(checkpoint or onnx, "--checkpoint" if onnx is None else "--onnx")


@contextmanager
def output_lock(folder: Path, script: str, option: str = "--output-dir") -> Iterator[bool]:
    """Hold ``folder``'s lock (``swinlite.lock.OutputLock``, as training and extract_features.py hold theirs) for the
    block: enter it before the output folder's checks and leave it after the last file is written. Another run into
    the folder (a training run, this script or another) is refused, naming it, and changes nothing; a lock left by a
    run that died is taken over with a warning. A ``folder`` that is a file is not locked: the script's output
    check refuses it, naming what it expected. A run that wrote nothing leaves none of the folders taking the lock
    made. Yields whether ``folder`` was made for the run. Loaded without torch (the ``--onnx`` paths import none).

    Raises:
        ValueError: another run holds the lock (``option`` in the message), or the folder cannot be made.
    """
    if folder.exists() and not folder.is_dir():
        yield False
        return
    made = [path for path in (folder, *folder.parents) if not path.exists()]  # what taking the lock creates
    try:
        with package_module("lock").OutputLock(folder, f"{script} run", option) as lock:
            if lock.taken_over:
                warnings.warn(lock.taken_over, stacklevel=3)
            yield bool(made)
    finally:
        _remove_empty(made)


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) while they are empty: a run that wrote nothing leaves no folder it made."""
    for folder in folders:
        if folder.is_dir() and any(folder.iterdir()):
            return
        if folder.is_dir():
            folder.rmdir()
