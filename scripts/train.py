"""Train a swinlite (or any timm) model on an ImageFolder: ``root/train/<class>/*`` and ``root/val/<class>/*``.

  python scripts/train.py                          the digits demo (configs/demo.yaml, built into data/digits)
  python scripts/train.py --data-dir DIR           fine-tune ImageNet Swin-T at 224 on your photos
                                                   (configs/finetune_imagefolder.yaml)
  python scripts/train.py --config FILE [...]      your own recipe

Under ``torchrun --nproc_per_node=N`` the same command trains with DistributedDataParallel.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

# On shared CPUs, spinning OpenMP threads waste the cores others (and our own loader) need; set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DEMO_CONFIG = CONFIGS / "demo.yaml"
FOLDER_CONFIG = CONFIGS / "finetune_imagefolder.yaml"


def _config_lines(path: Path) -> str:
    """A config file's keys as ``section.key = value`` lines (read with PyYAML only: --help loads no torch)."""
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
        "Every other key keeps its default from swinlite/train/config.py; --print-config shows every key as it\n"
        "will apply to your command, and exits. Options users look for: train.ema_decay=0.9998,\n"
        "train.best_of=raw|ema|both, train.save_every_steps=N, train.compile=true, train.channels_last=true,\n"
        "train.tensorboard=true, train.amp=bf16."
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse also prints the usage)
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_epilog())
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
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = args.config or (FOLDER_CONFIG if args.data_dir else DEMO_CONFIG)
    overrides = list(args.overrides)
    if args.data_dir:
        overrides = [f"data.data_dir={args.data_dir}", "data.dataset=folder", *overrides]
    if args.output_dir:
        overrides.append(f"train.output_dir={args.output_dir}")
    try:  # the package loads only now, after the arguments are parsed; torch and timm after the config is read
        from swinlite.train.config import load_config, to_dict

        cfg = load_config(config, overrides)
        if args.print_config:
            print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
            return 0
        from swinlite.train.runner import train

        train(cfg, resume=args.resume, overwrite=args.overwrite)
    except (ValueError, FileNotFoundError) as e:  # FileNotFoundError: swinlite's WeightsUnavailableError
        print(f"error: {e}", file=sys.stderr)
        return 2
    except yaml.YAMLError as e:
        print(f"error: config file {config} is not valid YAML: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        from swinlite.train.distributed import StalledRankError

        if not isinstance(e, StalledRankError):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; continue with --resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
