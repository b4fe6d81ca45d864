"""Train a torchvision detector (Faster/Mask R-CNN, RetinaNet, FCOS) on a swinlite backbone from COCO-format data.

Run with no arguments for the embedded demo (scikit-learn digits on 64x64 canvases, built into data/det_digits,
results in runs/det_demo). ``--data-dir DIR`` takes the COCO 2017 layout: DIR/annotations/instances_{train,val}2017.json
with images in DIR/{train,val}2017/; data.train_ann, data.train_images, data.val_ann and data.val_images point
anywhere else. Under ``torchrun --nproc_per_node=N`` the same command trains with DistributedDataParallel.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# On shared CPUs, spinning OpenMP threads waste the cores others (and our own loader) need; set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from swinlite.detection.config import DetConfig, load_det_config  # noqa: E402
from swinlite.detection.runner import train_detector  # noqa: E402
from swinlite.train.config import flatten, to_dict  # noqa: E402

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "det_demo.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="config keys with their built-in defaults, which --config files override\n"
        "(set any with key=value, e.g. train.epochs=24 model.detector=maskrcnn; see swinlite/detection/config.py):\n  "
        + "\n  ".join(f"{k} = {v}" for k, v in flatten(to_dict(DetConfig())).items()),
    )
    parser.add_argument("--config", default=str(DEMO_CONFIG), help="YAML file of overrides (default: %(default)s)")
    parser.add_argument("--data-dir", help="a COCO 2017 layout root (sets data.data_dir and data.dataset=coco)")
    parser.add_argument("--output-dir", help="where metrics, curves and checkpoints go (sets train.output_dir)")
    parser.add_argument("--resume", action="store_true", help="continue the run in the output dir from resume.pt")
    parser.add_argument("--overwrite", action="store_true", help="start over in an output dir that holds a run")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, applied last")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = list(args.overrides)
    if args.data_dir:
        overrides = [f"data.data_dir={args.data_dir}", "data.dataset=coco", *overrides]
    if args.output_dir:
        overrides.append(f"train.output_dir={args.output_dir}")
    try:
        cfg = load_det_config(args.config, overrides)
        train_detector(cfg, resume=args.resume, overwrite=args.overwrite)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
