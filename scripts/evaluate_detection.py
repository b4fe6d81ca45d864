"""COCO mAP of a detection checkpoint of scripts/train_detection.py on COCO-format data.

Prints pycocotools' summary (box AP, and mask AP for Mask R-CNN) and writes OUT/eval.json (the AP values in
percent) and OUT/detections.json (the COCO results), beside the checkpoint unless --output-dir.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as scripts/train.py: no spinning threads on shared CPUs

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from swinlite.detection.config import DetDataConfig  # noqa: E402
from swinlite.detection.data import CocoDetection, collate, load_split, split_paths  # noqa: E402
from swinlite.detection.evaluation import coco_ap, ignore_empty_boxes  # noqa: E402
from swinlite.detection.predictor import load_detector  # noqa: E402
from swinlite.detection.task import predict  # noqa: E402
from swinlite.detection.transforms import build_eval_transform  # noqa: E402
from swinlite.device import resolve_device  # noqa: E402
from swinlite.engine.loop import StepSettings  # noqa: E402
from swinlite.io import atomic_write_bytes  # noqa: E402

_AMP = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="best.safetensors or last.safetensors of a detection run")
    parser.add_argument(
        "--data-dir", help="COCO 2017 layout root: annotations/instances_<split>2017.json, <split>2017/"
    )
    parser.add_argument("--split", default="val", help="train or val (default: %(default)s)")
    parser.add_argument("--ann", help="annotation file (instead of the --data-dir layout)")
    parser.add_argument("--images", help="image folder (instead of the --data-dir layout)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--amp", default="none", choices=sorted(_AMP), help="autocast dtype")
    parser.add_argument("--output-dir", help="for eval.json and detections.json (default: the checkpoint's folder)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.split not in ("train", "val"):
        print(f"error: --split must be train or val, got {args.split!r}", file=sys.stderr)
        return 2
    data = DetDataConfig(
        data_dir=args.data_dir or ".", **{f"{args.split}_ann": args.ann, f"{args.split}_images": args.images}
    )
    try:
        if not args.data_dir and not (args.ann and args.images):
            raise ValueError("give --data-dir, or both --ann and --images")
        device = resolve_device(args.device)
        model, categories, meta = load_detector(args.checkpoint, device)
        split = load_split(*split_paths(data, args.split))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ignored = ignore_empty_boxes(split.coco)
    if ignored:
        print(f"warning: {len(ignored)} objects with an empty box are ignored (ids {ignored[:10]})", file=sys.stderr)
    dataset = CocoDetection(split, categories, build_eval_transform())
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers, collate_fn=collate)
    results = predict(model, loader, categories, StepSettings(device, _AMP[args.amp]))
    report = {"checkpoint": str(args.checkpoint), "images": len(split.image_ids)}
    iou_types = ["bbox", "segm"] if meta["detector"]["detector"] == "maskrcnn" else ["bbox"]
    for iou_type in iou_types:
        ap = coco_ap(split.coco, results, split.image_ids, iou_type)
        print(f"{iou_type} ({len(split.image_ids)} images):\n{ap.summary}")
        report[iou_type] = ap.ap
    out = Path(args.output_dir) if args.output_dir else Path(args.checkpoint).parent
    atomic_write_bytes(out / "eval.json", json.dumps(report, indent=1).encode())
    atomic_write_bytes(out / "detections.json", json.dumps(results).encode())
    print(f"wrote {out / 'eval.json'} and {out / 'detections.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
