"""Train a swinlite (or any timm) model on an ImageFolder: ``root/train/<class>/*`` and ``root/val/<class>/*``.

Run with no arguments for the embedded demo (scikit-learn digits, built into data/digits, results in runs/demo).
Under ``torchrun --nproc_per_node=N`` the same command trains with DistributedDataParallel.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# On shared CPUs, spinning OpenMP threads waste the cores others (and our own loader) need; set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from swinlite.models.pretrained import WeightsUnavailableError  # noqa: E402
from swinlite.train.config import Config, flatten, load_config, to_dict  # noqa: E402
from swinlite.train.runner import train  # noqa: E402

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="config keys with their built-in defaults, which --config files override\n"
        "(set any with key=value, e.g. train.epochs=12 optim.lr=5e-4; see swinlite/train/config.py):\n  "
        + "\n  ".join(f"{k} = {v}" for k, v in flatten(to_dict(Config())).items()),
    )
    parser.add_argument("--config", default=str(DEMO_CONFIG), help="YAML file of overrides (default: %(default)s)")
    parser.add_argument(
        "--data-dir", help="your dataset root holding train/ and val/ (sets data.data_dir and data.dataset=folder)"
    )
    parser.add_argument("--output-dir", help="where metrics, curves and checkpoints go (sets train.output_dir)")
    parser.add_argument("--resume", action="store_true", help="continue the run in the output dir from resume.pt")
    parser.add_argument("--overwrite", action="store_true", help="start over in an output dir that holds a run")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, applied last")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = list(args.overrides)
    if args.data_dir:
        overrides = [f"data.data_dir={args.data_dir}", "data.dataset=folder", *overrides]
    if args.output_dir:
        overrides.append(f"train.output_dir={args.output_dir}")
    try:
        cfg = load_config(args.config, overrides)
        train(cfg, resume=args.resume, overwrite=args.overwrite)
    except (ValueError, WeightsUnavailableError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
