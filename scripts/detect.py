"""Run a detection checkpoint of scripts/train_detection.py on images or folders of images.

Writes OUT/detections.json (COCO results with the image path and the category name added: one entry per box
scoring at least --score-thresh, box as [x, y, width, height] in pixels) and OUT/images/<n>_<name>.png with the
boxes (and, for Mask R-CNN, the masks) drawn. OUT may not lie inside an input folder (its drawings would be
read as input next time). Unreadable images, and images too thin for the detector's resize, are named and
skipped; if no image is left that is an error. A path that is not UTF-8 is kept exactly in detections.json
(the JSON string decodes to Python's surrogate-escaped file name: os.fsencode gives back its bytes) and printed
with escapes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import Parser, run

OUTPUTS = ("detections.json", "images")


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_argument("--checkpoint", required=True, type=Path, help="best.safetensors or last.safetensors")
    parser.add_argument("--input", required=True, nargs="+", type=Path, help="image files and/or folders (recursive)")
    parser.add_argument("--output-dir", required=True, type=Path, help="for detections.json and images/")
    parser.add_argument("--score-thresh", type=float, default=0.5, help="lowest score kept (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default: auto)")
    args = parser.parse_args(argv)
    if not 0 <= args.score_thresh <= 1:
        parser.error(f"--score-thresh must be in 0..1, got {args.score_thresh}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    from torchvision.io import encode_png
    from torchvision.transforms.v2.functional import pil_to_tensor

    from swinlite.detection.evaluation import to_coco_results
    from swinlite.detection.predictor import draw_detections, load_detector, unprocessable
    from swinlite.device import resolve_device
    from swinlite.images import list_images, load_rgb
    from swinlite.io import atomic_write_bytes, check_output, json_bytes

    out = args.output_dir
    device = resolve_device(args.device)
    check_output(out, [args.checkpoint, *args.input], option="--output-dir", folder=True, names=OUTPUTS)
    images = list_images(args.input)
    model, categories, _ = load_detector(args.checkpoint, device)
    results, skipped = [], []
    for index, path in enumerate(images):
        try:
            pixels = pil_to_tensor(load_rgb(path))  # [3, H, W] uint8
        except Exception as e:  # PIL raises many exception types for bad files
            skipped.append(f"{path}: unreadable ({type(e).__name__}: {e})")
            continue
        problem = unprocessable(model, *pixels.shape[1:])
        if problem:
            skipped.append(f"{path}: {problem}")
            continue
        with torch.no_grad():
            prediction = {k: v.cpu() for k, v in model([pixels.to(device).float() / 255])[0].items()}
        for result in to_coco_results(prediction, index, categories):
            if result["score"] >= args.score_thresh:
                name = categories.names[categories.ids.index(result["category_id"])]
                results.append({"image": str(path), "category_id": result["category_id"], "category": name,
                                "bbox": result["bbox"], "score": result["score"]})  # fmt: skip
        drawn = draw_detections(pixels, prediction, categories, args.score_thresh)
        atomic_write_bytes(out / "images" / f"{index:05d}_{path.stem}.png", encode_png(drawn).numpy().tobytes())
    for line in skipped:
        print(f"warning: skipped {line}", file=sys.stderr)
    if len(skipped) == len(images):
        raise ValueError(f"none of the {len(images)} images could be used (each is named above); nothing written")
    atomic_write_bytes(out / "detections.json", json_bytes(results, indent=1))
    done = len(images) - len(skipped)
    print(f"{len(results)} detections on {done} images: {out / 'detections.json'}, {out / 'images'}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
