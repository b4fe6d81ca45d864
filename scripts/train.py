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

from _cli import Parser, add_train_arguments, configs_epilog, run, train_overrides

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DEMO_CONFIG = CONFIGS / "demo.yaml"
FOLDER_CONFIG = CONFIGS / "finetune_imagefolder.yaml"


def _epilog() -> str:
    return configs_epilog(
        (DEMO_CONFIG, "the digits demo"),
        FOLDER_CONFIG,
        "swinlite/classification/config.py and swinlite/engine/sections.py",
        "train.ema_decay=0.9998 train.ema_warmup=true (0.9998 without warm-up: long runs only),\n"
        "model.kwargs.drop_path_rate=0.2, model.kwargs.window_size=12 model.kwargs.img_size=384 (each sets one entry;\n"
        "model.kwargs={...} replaces the whole mapping, {} clears it), train.best_of=raw|ema|both,\n"
        "train.save_every_steps=N, train.compile=true, train.channels_last=true, train.tensorboard=true,\n"
        "train.amp=bf16.",
    )


def parse_args(argv: list[str] | None = None) -> object:
    parser = Parser(__doc__, epilog=_epilog())
    add_train_arguments(
        parser,
        "YAML file of overrides (default: configs/finetune_imagefolder.yaml with --data-dir, else configs/demo.yaml)",
        "your dataset root holding train/ and val/ (sets data.data_dir, and data.dataset=folder unless the --config "
        "file names one other than the demo's digits)",
    )
    return parser.parse_intermixed_args(argv)  # key=value may come before and after the options


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = args.config or (FOLDER_CONFIG if args.data_dir else DEMO_CONFIG)
    from swinlite.classification import ClassificationTask  # the package loads only now, after the arguments
    from swinlite.engine.cli import run_from_cli

    overrides = train_overrides(args, "folder")
    return run_from_cli(ClassificationTask, config, overrides, args.resume, args.overwrite, args.print_config)


if __name__ == "__main__":
    sys.exit(run(main))
