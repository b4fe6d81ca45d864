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

import yaml
from _cli import Parser, run

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DEMO_CONFIG = CONFIGS / "seg_demo.yaml"
ADE20K_CONFIG = CONFIGS / "seg_ade20k_upernet_swin_tiny.yaml"


def _config_lines(path: Path) -> str:
    """A config file's keys as ``section.key = value`` lines (read with PyYAML only: --help loads no torch)."""
    tree = yaml.safe_load(path.read_text()) if path.is_file() else {}
    lines = [f"{section}.{key} = {value}" for section, keys in (tree or {}).items() for key, value in keys.items()]
    return "\n".join(f"      {line}" for line in lines) or "      (file missing)"


def _epilog() -> str:
    return (
        "which settings apply (key=value arguments are applied last, on top of them):\n"
        f"  without --data-dir and --config: {DEMO_CONFIG.relative_to(CONFIGS.parent)} (the shapes demo)\n"
        f"{_config_lines(DEMO_CONFIG)}\n"
        f"  with --data-dir, without --config: {ADE20K_CONFIG.relative_to(CONFIGS.parent)} (needs the ImageNet "
        "weights of the tag: fetched once, then cached)\n"
        f"{_config_lines(ADE20K_CONFIG)}\n"
        "  with --config FILE: that file's keys\n"
        "Every other key keeps its default (mmsegmentation's recipe) from swinlite/segmentation/config.py and\n"
        "swinlite/engine/sections.py; --print-config shows every key as it will apply, and exits. Options users\n"
        "look for: data.test_mode=slide, data.test_ratios=[0.5,0.75,1.0,1.25,1.5,1.75] data.test_flip=true,\n"
        "model.aux_weight=0, train.ema_decay=0.9998, train.amp=bf16, train.save_every_steps=N."
    )


def parse_args(argv: list[str] | None = None) -> object:
    parser = Parser(__doc__, epilog=_epilog())
    parser.add_argument(
        "--config",
        help="YAML file of overrides (default: configs/seg_ade20k_upernet_swin_tiny.yaml with --data-dir, "
        "else configs/seg_demo.yaml)",
    )
    parser.add_argument("--data-dir", help="a root in ADE20K's layout (sets data.data_dir and data.dataset=ade20k)")
    parser.add_argument("--output-dir", help="where metrics, curves and checkpoints go (sets train.output_dir)")
    parser.add_argument("--resume", action="store_true", help="continue the run in the output dir from resume.pt")
    parser.add_argument("--overwrite", action="store_true", help="start over in an output dir that holds a run")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, applied last")
    return parser.parse_intermixed_args(argv)  # key=value may come before and after the options


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = args.config or (ADE20K_CONFIG if args.data_dir else DEMO_CONFIG)
    overrides = list(args.overrides)
    if args.data_dir:
        overrides = [f"data.data_dir={args.data_dir}", "data.dataset=ade20k", *overrides]
    if args.output_dir:
        overrides.append(f"train.output_dir={args.output_dir}")
    from swinlite.engine.cli import run_from_cli  # the package loads only now, after the arguments
    from swinlite.segmentation.task import SegmentationTask

    return run_from_cli(SegmentationTask, config, overrides, args.resume, args.overwrite, args.print_config)


if __name__ == "__main__":
    sys.exit(run(main))
