"""Train a torchvision detector (Faster/Mask R-CNN, RetinaNet, FCOS) on a swinlite backbone from COCO-format data.

Run with no arguments for the embedded demo (scikit-learn digits on 64x64 canvases, built into data/det_digits,
results in runs/det_demo). ``--data-dir DIR`` takes the COCO 2017 layout: DIR/annotations/instances_{train,val}2017.json
with images in DIR/{train,val}2017/; data.train_ann, data.train_images, data.val_ann and data.val_images point
anywhere else. Under ``torchrun --nproc_per_node=N`` the same command trains with DistributedDataParallel.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import Parser, add_train_arguments, run, train_overrides

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "det_demo.yaml"


def _epilog() -> str:
    """Every config key with its built-in default (the config module loads torch, which the help then needs)."""
    from swinlite.detection.config import DetConfig
    from swinlite.engine.config import flatten, to_dict

    keys = "\n  ".join(f"{k} = {v}" for k, v in flatten(to_dict(DetConfig())).items())
    return (
        "config keys with their built-in defaults, which --config files override\n(set any with key=value, e.g. "
        f"train.epochs=24 model.detector=maskrcnn; see swinlite/detection/config.py):\n  {keys}"
    )


class _Parser(Parser):
    def format_help(self) -> str:  # the key list is built only when the help is asked for
        self.epilog = _epilog()
        return super().format_help()


def parse_args(argv: list[str] | None = None) -> object:
    parser = _Parser(__doc__)
    add_train_arguments(
        parser,
        f"YAML file of overrides (default: {DEMO_CONFIG.relative_to(DEMO_CONFIG.parents[1])})",
        "a COCO 2017 layout root (sets data.data_dir and data.dataset=coco)",
    )
    return parser.parse_intermixed_args(argv)  # key=value may come before and after the options


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from swinlite.detection.task import DetectionTask  # the package loads only now, after the arguments
    from swinlite.engine.cli import run_from_cli

    overrides = train_overrides(args, "coco")
    config = args.config or DEMO_CONFIG
    return run_from_cli(DetectionTask, config, overrides, args.resume, args.overwrite, args.print_config)


if __name__ == "__main__":
    sys.exit(run(main))
