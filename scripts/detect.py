"""Run a detection checkpoint of scripts/train_detection.py on images or folders of images.

Writes OUT/detections.json (COCO results with the image path and the category name added: one entry per box
scoring at least --score-thresh, box as [x, y, width, height] in pixels) and OUT/images/<name>.png with the
boxes (and, for Mask R-CNN, the masks) drawn. Unreadable images are listed and skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as scripts/train.py: no spinning threads on shared CPUs

import torch  # noqa: E402
from torchvision.io import encode_png  # noqa: E402
from torchvision.transforms.v2.functional import pil_to_tensor  # noqa: E402

from swinlite.detection.evaluation import to_coco_results  # noqa: E402
from swinlite.detection.predictor import draw_detections, load_detector  # noqa: E402
from swinlite.device import resolve_device  # noqa: E402
from swinlite.images import list_images as collect_images  # noqa: E402
from swinlite.images import load_rgb  # noqa: E402
from swinlite.io import atomic_write_bytes  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="best.safetensors or last.safetensors of a detection run")
    parser.add_argument("--input", required=True, nargs="+", help="image files and/or folders (searched recursively)")
    parser.add_argument("--output-dir", required=True, help="for detections.json and images/")
    parser.add_argument("--score-thresh", type=float, default=0.5, help="lowest score kept (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    return parser.parse_args(argv)


@torch.no_grad()
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        device = resolve_device(args.device)
        model, categories, _ = load_detector(args.checkpoint, device)
        images = collect_images(args.input)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.output_dir)
    results, failed = [], []
    for index, path in enumerate(images):
        try:
            pixels = pil_to_tensor(load_rgb(path))  # [3, H, W] uint8
        except Exception as e:  # PIL raises many exception types for bad files
            failed.append(f"{path}: {type(e).__name__}: {e}")
            continue
        prediction = {k: v.cpu() for k, v in model([pixels.to(device).float() / 255])[0].items()}
        for result in to_coco_results(prediction, index, categories):
            if result["score"] >= args.score_thresh:
                name = categories.names[categories.ids.index(result["category_id"])]
                results.append({"image": str(path), "category_id": result["category_id"], "category": name,
                                "bbox": result["bbox"], "score": result["score"]})  # fmt: skip
        drawn = draw_detections(pixels, prediction, categories, args.score_thresh)
        atomic_write_bytes(out / "images" / f"{index:05d}_{path.stem}.png", encode_png(drawn).numpy().tobytes())
    atomic_write_bytes(out / "detections.json", json.dumps(results, indent=1).encode())
    print(
        f"{len(results)} detections on {len(images) - len(failed)} images: {out / 'detections.json'}, {out / 'images'}"
    )
    for line in failed:
        print(f"warning: skipped unreadable image {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
