"""Train a torchvision detector (Faster/Mask R-CNN, RetinaNet, FCOS) on a swinlite backbone from COCO-format data.

Run with no arguments for the embedded demo (scikit-learn digits on 64x64 canvases, built into data/det_digits,
results in runs/det_demo). ``--data-dir DIR`` takes the COCO 2017 layout: DIR/annotations/instances_{train,val}2017.json
with images in DIR/{train,val}2017/; data.train_ann, data.train_images, data.val_ann and data.val_images point
anywhere else. Under ``torchrun --nproc_per_node=N`` the same command trains with DistributedDataParallel.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import Parser, run

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
    parser.add_argument("--config", default=str(DEMO_CONFIG), help="YAML file of overrides (default: %(default)s)")
    parser.add_argument("--data-dir", help="a COCO 2017 layout root (sets data.data_dir and data.dataset=coco)")
    parser.add_argument("--output-dir", help="where metrics, curves and checkpoints go (sets train.output_dir)")
    parser.add_argument("--resume", action="store_true", help="continue the run in the output dir from resume.pt")
    parser.add_argument("--overwrite", action="store_true", help="start over in an output dir that holds a run")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, applied last")
    return parser.parse_intermixed_args(argv)  # key=value may come before and after the options


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = list(args.overrides)
    if args.data_dir:
        overrides = [f"data.data_dir={args.data_dir}", "data.dataset=coco", *overrides]
    if args.output_dir:
        overrides.append(f"train.output_dir={args.output_dir}")
    from swinlite.detection.task import DetectionTask  # the package loads only now, after the arguments
    from swinlite.engine.cli import run_from_cli

    return run_from_cli(DetectionTask, args.config, overrides, args.resume, args.overwrite, args.print_config)


if __name__ == "__main__":
    sys.exit(run(main))
