"""Label images with a segmentation checkpoint of scripts/train_segmentation.py.

For each image (files and folders, recursive) writes OUT/labels/<n>_<name>.png, the class of every pixel at the image's
own size as a palette PNG (its pixel values are the class indices, its colours the classes'; 16-bit grayscale beyond 256
classes), and OUT/overlays/<n>_<name>.png, the image with each class painted over it at --alpha (n: the image's place
among the inputs, from 0; a name beyond the filesystem's 255 bytes is cut, ending in ~ and a hash of the whole);
OUT/classes.csv lists index, class and colour, and OUT/sources.json maps each PNG's file name
to the image it was made from (written before the first PNG, naming every PNG the run may write, and at the end those it
wrote: a run killed in between leaves PNGs --overwrite replaces). Everything comes from the checkpoint: classes,
palette, normalisation and test settings (--mode, --ratios, --flip / --no-flip, --stride change the latter). OUT may not
lie inside an input folder (its PNGs would be read as input next time), nor an input inside OUT/labels or OUT/overlays
(--overwrite empties them). An OUT holding an earlier run's outputs (of this script, or of evaluate_segmentation.py) is
refused unless --overwrite, which removes them all once this run has its first label map to write (a run that writes
nothing leaves them): OUT then holds this run's alone; one holding another task's or extract_features.py's /
visualize.py's outputs is refused either way. Unreadable images are named and skipped; if none is left that is an error.
An image whose prediction would take more than half the machine's memory, 4 GiB at least (a view's tensors at its full
size beside every class's scores at the image's own size: docs/segmentation.md) is an error before any work (--ratios
100 took all the memory, and so did a 6000x8000 photo of 150 classes: the message gives the size to downscale it to, and
the budget). --amp bf16 (fp16: CUDA only) runs the
model under autocast, as evaluate_segmentation.py --amp (the logits are upsampled in fp32); the summary line names it.


--onnx FILE runs a segmenter exported by scripts/export_onnx.py in ONNX Runtime with NumPy and Pillow only (torch is
not imported), with the classes, palette and test settings recorded in the file, and writes the same files. An image
whose rescaled views (or windows) are larger than the file serves is an error before any work (export again with
--max-size); one with a view thinner than its smallest size is named and skipped (no export serves it: a segmenter's
starts one pixel above its coarsest stride).

Examples:
    python scripts/segment.py --checkpoint runs/seg_demo/best.safetensors \\
        --input data/seg_shapes/images/validation --output-dir seg/
    python scripts/segment.py --onnx seg_demo.onnx --input data/seg_shapes/images/validation --output-dir seg_onnx/
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

from _cli import (
    Parser,
    check_drawing_inputs,
    check_model_file,
    check_onnx_options,
    check_test_options,
    ema_weights,
    output_lock,
    run,
)


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_predictor_arguments("a segmenter", "labels/, overlays/ and classes.csv")
    parser.add_argument(
        "--mode", choices=("whole", "slide"), help="whole image or sliding windows (default: the run's)"
    )
    parser.add_argument(
        "--ratios", type=float, nargs="+", help="scales of the test size, averaged (default: the run's)"
    )
    parser.add_argument(
        "--flip",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also the mirrored image, averaged (default: the checkpoint's setting)",
    )
    parser.add_argument(
        "--stride", type=int, nargs=2, metavar=("H", "W"),
        help="slide mode: the windows' step, at most the crop size (default: the run's)",
    )  # fmt: skip
    parser.add_argument(
        "--alpha", type=float, default=0.5, help="opacity of the overlay colours (default: %(default)s)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace segment.py's and evaluate_segmentation.py's earlier outputs"
    )
    args = parser.parse_args(argv)
    check_onnx_options(parser, args)
    if not 0 <= args.alpha <= 1:
        parser.error(f"--alpha must be in 0..1, got {args.alpha}")
    check_test_options(parser, args)
    return args


def _classes_csv(classes, palette) -> bytes:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["index", "class", "r", "g", "b"])
    writer.writerows([i, name, *colour] for i, (name, colour) in enumerate(zip(classes, palette, strict=True)))
    return text.getvalue().encode()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_drawing_inputs(args.input, args.checkpoint, args.onnx)
    with output_lock(args.output_dir, "segment.py"):  # from the folder's checks to the last file
        return segment_onnx(args) if args.onnx is not None else segment_torch(args)


def segment_torch(args) -> int:
    """The --checkpoint path: PyTorch."""

    import torch
    from PIL import Image
    from torchvision.transforms.v2.functional import pil_to_tensor

    from swinlite.device import autocast_dtype, resolve_device
    from swinlite.engine.loop import StepSettings, autocast
    from swinlite.files import (
        DrawingRecord,
        check_output_dir,
        decoded,
        header_sizes,
        label_image,
        list_images,
        numbered_name,
    )
    from swinlite.seg_views import thin_problem
    from swinlite.segmentation.inference import large_check, patch_side, predict_scores
    from swinlite.segmentation.predictor import load_segmenter, overlay
    from swinlite.segmentation.transforms import build_eval_transform

    out = args.output_dir
    device = resolve_device("auto" if args.device is None else args.device)  # not --device ""
    amp = StepSettings(device, autocast_dtype(args.amp, device))
    images = list_images(args.input)
    check_model_file(args.checkpoint, "--checkpoint")  # before the folder; the model is read after it
    weights = ema_weights(args)
    earlier = check_output_dir("segmentation", out, [args.checkpoint, weights, *args.input, *images], args.overwrite)
    model, info = load_segmenter(weights, device)
    test = info.test.overridden(args.mode, args.ratios, args.flip, args.stride)  # checked before anything is removed
    too_large = large_check(model, test)
    for path, height, width in header_sizes(images):  # a view too large for memory: an error, first
        problem = too_large(height, width)
        if problem:
            raise ValueError(f"{path}: {problem}")
    normalize, palette = build_eval_transform(info.mean, info.std), info.labels.palette
    skipped, record = [], DrawingRecord(out, earlier, images, "segment.py")
    for index, path, image in decoded(images, skipped):
        problem = thin_problem(image.height, image.width, test.img_scale, test.ratios, patch_side(model))
        if problem:
            skipped.append(f"{path}: {problem}")
            continue
        pixels = pil_to_tensor(image)  # [3, H, W] uint8
        with torch.no_grad(), autocast(amp):
            labels = predict_scores(model, normalize(pixels)[None].to(device), test).argmax(1)[0].cpu()  # [H, W]
        drawn = Image.fromarray(overlay(pixels, labels, palette, args.alpha).permute(1, 2, 0).numpy())
        name = numbered_name(index, path)
        _write(out, record, name, label_image(labels.numpy(), palette), drawn)
    return finish(out, skipped, len(images), info.labels.classes, palette, record.drawn, args.amp)


def _write(out: Path, record, name: str, labels, drawn) -> None:
    """One image's label map and overlay (PIL images) as PNGs, each written atomically (both paths), once ``record``
    (a ``files.DrawingRecord``: before the first image's, it removes an earlier run's outputs and records the run)
    names them."""
    from _cli import import_without_torch

    files = import_without_torch("files")
    record.add(name)
    files.atomic_write_png(out / "labels" / name, labels)
    files.atomic_write_png(out / "overlays" / name, drawn)


def finish(
    out: Path, skipped: list[str], count: int, classes, palette, sources: dict[str, str], amp: str = "none"
) -> int:
    """Name the skipped images, write classes.csv and sources.json again (``sources``: each PNG's file name -> the
    image, those written; files.DrawingRecord wrote it first), print the summary (both paths; the ``--amp`` dtype the
    model ran in, where not none)."""
    from _cli import import_without_torch

    files = import_without_torch("files")
    for line in skipped:
        print(f"warning: skipped {line}", file=sys.stderr)
    if len(skipped) == count:
        raise ValueError(f"none of the {count} images could be used (each is named above); nothing written")
    files.atomic_write_bytes(out / "classes.csv", _classes_csv(classes, palette))
    files.atomic_write_bytes(out / "sources.json", files.json_bytes(sources, indent=1))
    precision = f" (--amp {amp})" if amp != "none" else ""
    print(f"{count - len(skipped)} images segmented{precision}: {out / 'labels'}, {out / 'overlays'}, "
          f"{out / 'classes.csv'}, {out / 'sources.json'}")  # fmt: skip
    return 0


def segment_onnx(args) -> int:
    """The --onnx path: ONNX Runtime, NumPy and Pillow; torch is never imported."""
    from _cli import import_without_torch

    files, onnx_predict = import_without_torch("files"), import_without_torch("onnx_predict")
    out = args.output_dir
    images = files.list_images(args.input)
    check_model_file(args.onnx, "--onnx")  # before the folder; the file is read after it
    earlier = files.check_output_dir("segmentation", out, [args.onnx, *args.input, *images], args.overwrite)
    model = onnx_predict.open_model(args.onnx)
    settings = onnx_predict.segmenter_settings(model, args.mode, args.ratios, args.flip, args.stride)
    thin = {}
    for path, height, width in files.header_sizes(images):  # first: an image the file cannot take is an error
        thin[path] = onnx_predict.segment_too_thin(model, settings, height, width)
        problem = None if thin[path] else onnx_predict.segment_problem(model, settings, height, width)
        if problem:
            raise ValueError(f"{path}: {problem}")
    skipped, record = [], files.DrawingRecord(out, earlier, images, "segment.py")
    for index, path, image in files.decoded(images, skipped):
        if thin.get(path):
            skipped.append(f"{path}: {thin[path]}")
            continue
        labels = onnx_predict.segment_scores(model, settings, image).argmax(0)  # [H, W]
        drawn = onnx_predict.draw_labels(image, labels, settings.palette, args.alpha)
        name = files.numbered_name(index, path)
        _write(out, record, name, files.label_image(labels, settings.palette), drawn)
    return finish(out, skipped, len(images), settings.classes, settings.palette, record.drawn)


if __name__ == "__main__":
    sys.exit(run(main, one_process=True))
