"""Train a torchvision detector (Faster/Mask R-CNN, RetinaNet, FCOS) on a swinlite backbone from COCO-format data.

  python scripts/train_detection.py                  the embedded demo (configs/det_demo.yaml: scikit-learn digits
                                                     on 64x64 canvases, built into data/det_digits)
  python scripts/train_detection.py --data-dir DIR   Faster R-CNN on ImageNet Swin-T, mmdetection's 1x recipe
                                                     (configs/det_coco_fasterrcnn_swin_tiny_1x.yaml)
  python scripts/train_detection.py --config FILE [...]

``--data-dir DIR`` takes the COCO 2017 layout: DIR/annotations/instances_{train,val}2017.json with images in
DIR/{train,val}2017/; data.train_ann, data.train_images, data.val_ann and data.val_images point anywhere else.
Under ``torchrun --nproc_per_node=N`` the same command trains with DistributedDataParallel.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import Parser, add_train_arguments, configs_epilog, run, train_overrides

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DEMO_CONFIG = CONFIGS / "det_demo.yaml"
COCO_CONFIG = CONFIGS / "det_coco_fasterrcnn_swin_tiny_1x.yaml"


def _epilog() -> str:
    return configs_epilog(
        (DEMO_CONFIG, "the digits demo"),
        COCO_CONFIG,
        "swinlite/detection/config.py (mmdetection's Swin-T 1x recipe) and swinlite/engine/sections.py",
        "model.detector=maskrcnn, train.epochs=24 schedule.decay_epochs=[16,22] (mmdetection's 2x; the decay\n"
        "epochs stay 8 and 11 otherwise), train.save_every_steps=N,\n"
        "train.ema_decay=0.9998 train.ema_warmup=true (0.9998 without warm-up: long runs only).",
    )


def parse_args(argv: list[str] | None = None) -> object:
    parser = Parser(__doc__, epilog=_epilog())
    add_train_arguments(
        parser,
        "YAML file of overrides (default: configs/det_coco_fasterrcnn_swin_tiny_1x.yaml with --data-dir, "
        "else configs/det_demo.yaml)",
        "a COCO 2017 layout root (sets data.data_dir, and data.dataset=coco unless the --config file names one "
        "other than the demo's digits)",
    )
    return parser.parse_intermixed_args(argv)  # key=value may come before and after the options


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from swinlite.engine.cli import run_from_cli, show_config  # the package loads only now, after the arguments

    overrides = train_overrides(args, "coco")
    config = args.config or (COCO_CONFIG if args.data_dir else DEMO_CONFIG)
    if args.print_config:  # the config alone, without the task's [detection] extra (pycocotools)
        from swinlite.detection.config import DetConfig

        return show_config(DetConfig, config, overrides, args.resume, args.overwrite)
    from swinlite.detection.task import DetectionTask

    return run_from_cli(DetectionTask, config, overrides, args.resume, args.overwrite)


if __name__ == "__main__":
    sys.exit(run(main))
