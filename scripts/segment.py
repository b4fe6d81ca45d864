"""Label images with a segmentation checkpoint of scripts/train_segmentation.py.

For each image (files and folders, recursive) writes OUT/labels/<n>_<name>.png, the class of every pixel at the
image's own size as a palette PNG (its pixel values are the class indices, its colours the classes'; 16-bit
grayscale beyond 256 classes), and OUT/overlays/<n>_<name>.png, the image with each class painted over it at
--alpha; OUT/classes.csv lists index, class and colour. Everything comes from the checkpoint: classes, palette,
normalisation and test settings (--mode, --ratios, --flip change the latter). OUT may not lie inside an input folder
(its PNGs would be read as input next time). Unreadable images are named and skipped; if none is left that is an
error.

Example:
    python scripts/segment.py --checkpoint runs/seg_demo/best.safetensors \\
        --input data/seg_shapes/images/validation --output-dir seg/
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from _cli import Parser, run

OUTPUTS = ("labels", "overlays", "classes.csv")


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_argument("--checkpoint", required=True, type=Path, help="best.safetensors or last.safetensors")
    parser.add_argument("--input", required=True, nargs="+", type=Path, help="image files and/or folders (recursive)")
    parser.add_argument("--output-dir", required=True, type=Path, help="for labels/, overlays/ and classes.csv")
    parser.add_argument(
        "--mode", choices=("whole", "slide"), help="whole image or sliding windows (default: the run's)"
    )
    parser.add_argument(
        "--ratios", type=float, nargs="+", help="scales of the test size, averaged (default: the run's)"
    )
    parser.add_argument("--flip", action="store_true", help="also the mirrored image, averaged")
    parser.add_argument(
        "--alpha", type=float, default=0.5, help="opacity of the overlay colours (default: %(default)s)"
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default: auto)")
    args = parser.parse_args(argv)
    if not 0 <= args.alpha <= 1 or (args.ratios and min(args.ratios) <= 0):
        parser.error("--alpha must be in 0..1 and --ratios positive")
    return args


def _classes_csv(classes, palette) -> bytes:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["index", "class", "r", "g", "b"])
    writer.writerows([i, name, *colour] for i, (name, colour) in enumerate(zip(classes, palette, strict=True)))
    return text.getvalue().encode()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.stdout.reconfigure(errors="backslashreplace")  # paths that are not UTF-8 print, never fail after the work
    from dataclasses import replace

    import torch
    from PIL import Image
    from torchvision.transforms.v2.functional import pil_to_tensor

    from swinlite.device import resolve_device
    from swinlite.images import list_images, load_rgb
    from swinlite.io import atomic_write, atomic_write_bytes, check_output
    from swinlite.segmentation.inference import predict_scores
    from swinlite.segmentation.predictor import label_image, load_segmenter, overlay
    from swinlite.segmentation.transforms import build_eval_transform

    out = args.output_dir
    device = resolve_device(args.device)
    check_output(out, [args.checkpoint, *args.input], option="--output-dir", folder=True, names=OUTPUTS)
    images = list_images(args.input)
    model, info = load_segmenter(args.checkpoint, device)
    test = replace(info.test, mode=args.mode or info.test.mode, ratios=tuple(args.ratios or info.test.ratios),
                   flip=args.flip or info.test.flip)  # fmt: skip
    normalize, palette = build_eval_transform(info.mean, info.std), info.labels.palette
    skipped = []
    for index, path in enumerate(images):
        try:
            pixels = pil_to_tensor(load_rgb(path))  # [3, H, W] uint8
        except Exception as e:  # PIL raises many exception types for bad files
            skipped.append(f"{path}: unreadable ({type(e).__name__}: {e})")
            continue
        with torch.no_grad():
            labels = predict_scores(model, normalize(pixels)[None].to(device), test).argmax(1)[0].cpu()  # [H, W]
        name = f"{index:05d}_{path.stem}.png"
        drawn = Image.fromarray(overlay(pixels, labels, palette, args.alpha).permute(1, 2, 0).numpy())
        for folder, picture in (("labels", label_image(labels.numpy(), palette)), ("overlays", drawn)):
            atomic_write(out / folder / name, lambda f, p=picture: p.save(f, format="PNG"))
    for line in skipped:
        print(f"warning: skipped {line}", file=sys.stderr)
    if len(skipped) == len(images):
        raise ValueError(f"none of the {len(images)} images could be used (each is named above); nothing written")
    atomic_write_bytes(out / "classes.csv", _classes_csv(info.labels.classes, palette))
    print(f"{len(images) - len(skipped)} images segmented: {out / 'labels'}, {out / 'overlays'}, {out / 'classes.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
