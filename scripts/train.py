"""Train a swinlite (or any timm) model on an ImageFolder: ``root/train/<class>/*`` and ``root/val/<class>/*``.

  python scripts/train.py                          the digits demo (configs/demo.yaml, built into data/digits)
  python scripts/train.py --data-dir DIR           fine-tune ImageNet Swin-T at 224 on your photos
                                                   (configs/finetune_imagefolder.yaml)
  python scripts/train.py --config FILE [...]      your own recipe

Under ``torchrun --nproc_per_node=N`` the same command trains with DistributedDataParallel.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import Parser, run

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DEMO_CONFIG = CONFIGS / "demo.yaml"
FOLDER_CONFIG = CONFIGS / "finetune_imagefolder.yaml"


def _config_lines(path: Path) -> str:
    """A config file's keys as ``section.key = value`` lines (read with PyYAML only: --help loads no torch)."""
    import yaml  # an optional package: imported under the runner, which names the extra when it is missing

    tree = yaml.safe_load(path.read_text()) if path.is_file() else {}
    lines = [f"{section}.{key} = {value}" for section, keys in (tree or {}).items() for key, value in keys.items()]
    return "\n".join(f"      {line}" for line in lines) or "      (file missing)"


def _epilog() -> str:
    return (
        "which settings apply (key=value arguments are applied last, on top of them):\n"
        f"  without --data-dir and --config: {DEMO_CONFIG.relative_to(CONFIGS.parent)} (the digits demo)\n"
        f"{_config_lines(DEMO_CONFIG)}\n"
        f"  with --data-dir, without --config: {FOLDER_CONFIG.relative_to(CONFIGS.parent)} (needs the ImageNet "
        "weights of the tag: fetched once, then cached)\n"
        f"{_config_lines(FOLDER_CONFIG)}\n"
        "  with --config FILE: that file's keys\n"
        "Every other key keeps its default from swinlite/classification/config.py and swinlite/engine/sections.py;\n"
        "--print-config shows every key as it will apply to your command, and exits. Options users look for:\n"
        "train.ema_decay=0.9998, model.kwargs.drop_path_rate=0.2, model.kwargs={window_size: 12, img_size: 384},\n"
        "train.best_of=raw|ema|both, train.save_every_steps=N, train.compile=true, train.channels_last=true,\n"
        "train.tensorboard=true, train.amp=bf16."
    )


def parse_args(argv: list[str] | None = None) -> object:
    parser = Parser(__doc__, epilog=_epilog())
    parser.add_argument(
        "--config",
        help="YAML file of overrides (default: configs/finetune_imagefolder.yaml with --data-dir, "
        "else configs/demo.yaml)",
    )
    parser.add_argument(
        "--data-dir", help="your dataset root holding train/ and val/ (sets data.data_dir and data.dataset=folder)"
    )
    parser.add_argument("--output-dir", help="where metrics, curves and checkpoints go (sets train.output_dir)")
    parser.add_argument("--resume", action="store_true", help="continue the run in the output dir from resume.pt")
    parser.add_argument("--overwrite", action="store_true", help="start over in an output dir that holds a run")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, applied last")
    return parser.parse_intermixed_args(argv)  # key=value may come before and after the options


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = args.config or (FOLDER_CONFIG if args.data_dir else DEMO_CONFIG)
    overrides = list(args.overrides)
    if args.data_dir:
        overrides = [f"data.data_dir={args.data_dir}", "data.dataset=folder", *overrides]
    if args.output_dir:
        overrides.append(f"train.output_dir={args.output_dir}")
    from swinlite.classification import ClassificationTask  # the package loads only now, after the arguments
    from swinlite.engine.cli import run_from_cli

    return run_from_cli(ClassificationTask, config, overrides, args.resume, args.overwrite, args.print_config)


if __name__ == "__main__":
    sys.exit(run(main))
