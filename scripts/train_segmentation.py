"""Train UperNet on a swinlite backbone for semantic segmentation (label maps), scored by mIoU.

  python scripts/train_segmentation.py                  the embedded demo (configs/seg_demo.yaml: shapes on
                                                        64x64 canvases, built into data/seg_shapes)
  python scripts/train_segmentation.py --data-dir DIR   ADE20K at DIR with mmsegmentation's Swin-T UperNet 160k
                                                        recipe (configs/seg_ade20k_upernet_swin_tiny.yaml)
  python scripts/train_segmentation.py --config FILE [...]

Layout (ADE20K's): DIR/images/{training,validation}/*.jpg and DIR/annotations/{training,validation}/*.png, a mask
of the same name per image whose pixel values are the labels. Your own classes: data.dataset=folder
data.classes=[background,road,...] (data.ignore_index, data.reduce_zero_label as your masks need);
data.train_images, data.train_masks, data.val_images, data.val_masks point anywhere else. Under
``torchrun --nproc_per_node=N`` the same command trains with DistributedDataParallel (SyncBatchNorm on GPUs).
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import Parser, add_train_arguments, configs_epilog, run, train_overrides

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DEMO_CONFIG = CONFIGS / "seg_demo.yaml"
ADE20K_CONFIG = CONFIGS / "seg_ade20k_upernet_swin_tiny.yaml"


def _epilog() -> str:
    return configs_epilog(
        (DEMO_CONFIG, "the shapes demo"),
        ADE20K_CONFIG,
        "swinlite/segmentation/config.py (mmsegmentation's recipe) and swinlite/engine/sections.py",
        "data.test_mode=slide, data.test_ratios=[0.5,0.75,1.0,1.25,1.5,1.75] data.test_flip=true,\n"
        "model.aux_weight=0, train.ema_decay=0.9998 train.ema_warmup=true (0.9998 without warm-up: long runs only),\n"
        "train.amp=bf16, train.save_every_steps=N.",
    )


def parse_args(argv: list[str] | None = None) -> object:
    parser = Parser(__doc__, epilog=_epilog())
    add_train_arguments(
        parser,
        "YAML file of overrides (default: configs/seg_ade20k_upernet_swin_tiny.yaml with --data-dir, "
        "else configs/seg_demo.yaml)",
        "a root in ADE20K's layout (sets data.data_dir, and data.dataset=ade20k unless the --config file names "
        "one other than the demo's shapes; your own classes: data.dataset=folder)",
    )
    return parser.parse_intermixed_args(argv)  # key=value may come before and after the options


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = args.config or (ADE20K_CONFIG if args.data_dir else DEMO_CONFIG)
    from swinlite.engine.cli import run_from_cli  # the package loads only now, after the arguments
    from swinlite.segmentation.task import SegmentationTask

    overrides = train_overrides(args, "ade20k")
    return run_from_cli(SegmentationTask, config, overrides, args.resume, args.overwrite, args.print_config)


if __name__ == "__main__":
    sys.exit(run(main))
