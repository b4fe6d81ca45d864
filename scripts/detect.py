"""Run a detection checkpoint of scripts/train_detection.py on images or folders of images.

Writes OUT/detections.json (one entry per box scoring at least --score-thresh: {image: its path, category_id,
category: its name, bbox: [x, y, width, height] in pixels, score}; COCO-style boxes keyed by image path, not COCO's
results format: no image_id, and no masks, which are drawn, not listed), OUT/images/<n>_<name>.png with the same boxes
(and, for Mask R-CNN, masks in their class's colour) drawn (n: the image's place among the inputs, from 0; a name
beyond the filesystem's 255 bytes is cut, ending in ~ and a hash of the whole), and OUT/sources.json, which maps each
drawing's file name to the image it was drawn from (written before the first drawing, naming every drawing the run may
write, and at the end those it wrote: a run killed in between leaves drawings --overwrite replaces). The detector itself
keeps at most model.detections_per_img boxes an image (default 100) scoring at least model.score_thresh (default 0.05),
the settings it was evaluated with: a lower --score-thresh finds no more. OUT may not lie inside an input folder (its
drawings would be read as input next time), nor an input inside OUT/images (--overwrite empties it). An OUT holding an
earlier run's outputs (of this script, or of evaluate_detection.py) is refused unless --overwrite, which removes them
all once this run has its first drawing to write (a run that draws nothing leaves them): OUT then holds this run's
alone; one holding another task's or extract_features.py's / visualize.py's outputs is refused either way. Unreadable
images, and images too thin for the detector's resize, are named and skipped; if no image is left that is an error. A
path that is not UTF-8 is kept exactly in detections.json (the JSON string decodes to Python's surrogate-escaped file
name: os.fsencode gives back its bytes) and printed with escapes. --amp bf16 (fp16: CUDA only) runs the detector under
autocast, as evaluate_detection.py --amp; the summary line names it.

--onnx FILE runs a detector exported by scripts/export_onnx.py in ONNX Runtime with NumPy and Pillow only (torch is
not imported), with the categories and sizes recorded in the file, and writes the same detections.json, drawings and
sources.json. An image resized thinner than the file serves (one pixel above the coarsest stride: no export serves
less) is named and skipped, where --checkpoint detects on it; one resized larger is an error before any work.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import (
    Parser,
    check_drawing_inputs,
    check_model_file,
    check_onnx_options,
    ema_weights,
    output_lock,
    run,
)


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_predictor_arguments("a detector", "detections.json and images/")
    parser.add_argument("--score-thresh", type=float, default=0.5, help="lowest score kept (default: %(default)s)")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace detect.py's and evaluate_detection.py's earlier outputs"
    )
    args = parser.parse_args(argv)
    check_onnx_options(parser, args)
    if not 0 <= args.score_thresh <= 1:
        parser.error(f"--score-thresh must be in 0..1, got {args.score_thresh}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_drawing_inputs(args.input, args.checkpoint, args.onnx)
    with output_lock(args.output_dir, "detect.py"):  # from the folder's checks to the last file
        return detect_onnx(args) if args.onnx is not None else detect_torch(args)


def detect_torch(args) -> int:
    """The --checkpoint path: PyTorch."""
    import torch
    from PIL import Image
    from torchvision.transforms.v2.functional import pil_to_tensor

    from swinlite.detection.config import DetModelConfig
    from swinlite.detection.predictor import draw_detections, load_detector, unprocessable
    from swinlite.device import autocast_dtype, resolve_device
    from swinlite.engine.loop import StepSettings, autocast
    from swinlite.files import DrawingRecord, atomic_write_png, check_output_dir, decoded, list_images, numbered_name
    from swinlite.predictions import detection_entries

    out = args.output_dir
    device = resolve_device("auto" if args.device is None else args.device)  # not --device ""
    amp = StepSettings(device, autocast_dtype(args.amp, device))
    images = list_images(args.input)
    check_model_file(args.checkpoint, "--checkpoint")  # before the folder; the model is read after it
    weights = ema_weights(args)
    earlier = check_output_dir("detection", out, [args.checkpoint, weights, *args.input, *images], args.overwrite)
    model, categories, meta = load_detector(weights, device)
    model_thresh = meta["detector"].get("score_thresh", DetModelConfig().score_thresh)
    results, skipped, best, record = [], [], None, DrawingRecord(out, earlier, images, "detect.py")
    for index, path, image in decoded(images, skipped):
        pixels = pil_to_tensor(image)  # [3, H, W] uint8
        problem = unprocessable(model, *pixels.shape[1:])
        if problem:
            skipped.append(f"{path}: {problem}")
            continue
        with torch.no_grad(), autocast(amp):
            prediction = {k: v.cpu() for k, v in model([pixels.to(device).float() / 255])[0].items()}
        boxes, labels, scores = prediction["boxes"].float().numpy(), prediction["labels"], prediction["scores"]
        results += detection_entries(path, boxes, labels.tolist(), scores.tolist(), categories.ids,
                                     categories.names, args.score_thresh)  # fmt: skip
        best = best_score(best, scores.tolist())
        drawn = draw_detections(pixels, prediction, categories, args.score_thresh).permute(1, 2, 0)  # [H, W, 3]
        name = numbered_name(index, path)
        record.add(name)
        atomic_write_png(out / "images" / name, Image.fromarray(drawn.numpy()))
    return finish(out, results, skipped, len(images), best, args.score_thresh, model_thresh, record.drawn, args.amp)


def best_score(best: float | None, scores: list[float]) -> float | None:
    """The highest of ``best`` and an image's box ``scores``; None while the model has kept no box."""
    return max(scores, default=None) if best is None else max([best, *scores])


def finish(
    out: Path,
    results: list[dict],
    skipped: list[str],
    count: int,
    best: float | None,
    score_thresh: float,
    model_thresh: float | None,
    sources: dict[str, str],
    amp: str = "none",
) -> int:
    """Name the skipped images, write detections.json and sources.json again (``sources``: each drawing's file name
    -> the image, those drawn; files.DrawingRecord wrote it first), print the summary (both paths; the ``--amp`` dtype
    the model ran in, where not none). With no detection kept, a note: the best score the model gave against
    ``--score-thresh``, or, where the model kept no box at all (``best`` None: none scored its ``model.score_thresh``),
    that, naming ``model_thresh`` (None: not recorded, an ONNX file's)."""
    from _cli import import_without_torch

    files = import_without_torch("files")
    for line in skipped:
        print(f"warning: skipped {line}", file=sys.stderr)
    if len(skipped) == count:
        raise ValueError(f"none of the {count} images could be used (each is named above); nothing written")
    files.atomic_write_bytes(out / "detections.json", files.json_bytes(results, indent=1))
    files.atomic_write_bytes(out / "sources.json", files.json_bytes(sources, indent=1))
    precision = f" (--amp {amp})" if amp != "none" else ""
    print(f"{len(results)} detections on {count - len(skipped)} images{precision}: {out / 'detections.json'}, "
          f"{out / 'images'}, {out / 'sources.json'}")  # fmt: skip
    if not results and best is None:
        thresh = "its run's model.score_thresh" if model_thresh is None else f"model.score_thresh {model_thresh}"
        print(f"note: the model kept no box: none scored {thresh} or more", file=sys.stderr)
    elif not results:
        print(f"note: no detection scored --score-thresh {score_thresh} or more; the best scored {best:.4f}",
              file=sys.stderr)  # fmt: skip
    return 0


def detect_onnx(args) -> int:
    """The --onnx path: ONNX Runtime, NumPy and Pillow; torch is never imported."""
    from _cli import import_without_torch

    files, onnx_predict = import_without_torch("files"), import_without_torch("onnx_predict")
    predictions = import_without_torch("predictions")
    out = args.output_dir
    images = files.list_images(args.input)
    check_model_file(args.onnx, "--onnx")  # before the folder; the file is read after it
    earlier = files.check_output_dir("detection", out, [args.onnx, *args.input, *images], args.overwrite)
    model = onnx_predict.open_model(args.onnx)
    settings = onnx_predict.detector_settings(model)
    for path, height, width in files.header_sizes(images):  # first: an image larger than the file takes is an error
        if onnx_predict.too_thin(model, settings, height, width):  # skipped below, as a thin one without --onnx
            continue
        size = onnx_predict.resized_size(settings, height, width)
        problem = onnx_predict.size_problem(model, *size)
        if problem:
            raise ValueError(f"{path}: resized to {size[0]}x{size[1]} (HxW): {problem}")
    results, skipped, best, record = [], [], None, files.DrawingRecord(out, earlier, images, "detect.py")
    for index, path, image in files.decoded(images, skipped):
        problem = onnx_predict.too_thin(model, settings, image.height, image.width)
        if problem:
            skipped.append(f"{path}: {problem}")
            continue
        boxes, scores, labels, masks = onnx_predict.detect(model, settings, image)
        results += predictions.detection_entries(path, boxes, labels.tolist(), scores.tolist(),
                                                 settings.category_ids, settings.names, args.score_thresh)  # fmt: skip
        best = best_score(best, scores.tolist())
        keep = [i for i, kept in enumerate(predictions.kept_scores(scores.tolist(), args.score_thresh)) if kept]
        texts = [f"{settings.names[labels[i] - 1]} {scores[i]:.2f}" for i in keep]
        pasted = None
        if masks is not None and keep:  # as draw_detections: masks above 0.5
            pasted = onnx_predict.paste_masks(masks[keep], boxes[keep], image.height, image.width) > 0.5
        drawn = onnx_predict.draw_detections(image, boxes[keep], labels[keep], texts, pasted)
        name = files.numbered_name(index, path)
        record.add(name)
        files.atomic_write_png(out / "images" / name, drawn)
    model_thresh = None  # not in the file
    return finish(out, results, skipped, len(images), best, args.score_thresh, model_thresh, record.drawn)


if __name__ == "__main__":
    sys.exit(run(main, one_process=True))
