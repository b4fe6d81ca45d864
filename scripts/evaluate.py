"""Evaluate a checkpoint on an ImageFolder split: top-1/top-5, loss, per-class accuracy and a confusion-matrix PNG.

Accepts weights written by scripts/train.py (model, classes and preprocessing are read from the file) and
swinlite, timm, official Microsoft or torchvision Swin checkpoints (pass --model for those).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as scripts/train.py: no spinning threads on shared CPUs

import torch  # noqa: E402

from swinlite.train.distributed import resolve_device  # noqa: E402
from swinlite.train.evaluation import format_report, plot_confusion, prepare_evaluation, run_evaluation  # noqa: E402

_AMP = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help=".safetensors, .pt or .pth weights file")
    parser.add_argument("--data-dir", required=True, help="dataset root holding <split>/<class>/*")
    parser.add_argument("--model", help="timm model name (default: the one recorded in the checkpoint)")
    parser.add_argument("--split", default="val", help="sub-folder of --data-dir to evaluate (default: %(default)s)")
    parser.add_argument("--img-size", type=int, help="input size (default: the checkpoint's, else the model's)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--amp", default="none", choices=sorted(_AMP), help="autocast dtype")
    parser.add_argument(
        "--output-dir", help="for eval.json and confusion_matrix.png (default: the checkpoint's folder)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        setup = prepare_evaluation(
            args.checkpoint, args.data_dir, args.model, args.split, args.batch_size, args.num_workers, args.img_size
        )
        result = run_evaluation(setup, resolve_device(args.device), _AMP[args.amp])
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.output_dir or Path(args.checkpoint).parent)
    out.mkdir(parents=True, exist_ok=True)
    print(format_report(result, setup.classes))
    plot_confusion(result.confusion, setup.classes, out / "confusion_matrix.png")
    summary = {"top1": result.top1, "top5": result.top5, "loss": result.loss, "classes": setup.classes}
    summary["per_class_top1"] = result.per_class_accuracy.tolist()
    (out / "eval.json").write_text(json.dumps(summary, indent=2))
    print(f"confusion matrix: {out / 'confusion_matrix.png'}\nsummary:          {out / 'eval.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
