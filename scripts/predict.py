r"""Label images with a trained classifier and write the top-k classes per image to a CSV file.

Examples:
    python scripts/predict.py --checkpoint runs/demo/best.safetensors --output preds.csv data/digits/val
    python scripts/predict.py --checkpoint runs/x/best.safetensors --ema --topk 3 --output p.csv a.jpg photos/
    python scripts/predict.py --model swinlite_tiny_patch4_window7_224.ms_in1k --output p.csv photos/
    python scripts/predict.py --onnx demo.onnx --output preds.csv data/digits/val   # ONNX Runtime, no torch

PATH arguments are images or folders of images (which files of a folder are read: PATH below). Files that do not
decode, and images too elongated for the centre crop's resize, are skipped and named on stderr (--onnx too). The CSV
(UTF-8) has the columns path, class, prob, then class_2, prob_2, ... up to --topk, the classes ranked by their logits
(equal ones: the lower index first); bytes of a file name that are not UTF-8 are written as \xNN, and a backslash as
\x5c (two files never print as one path). --output must end in .csv and must not be one of the inputs (the
checkpoint, an image); it is written whole once every image is labelled, replacing a file there. Preprocessing is the
run's evaluation transform, recorded in the checkpoint, so predictions on the run's val folder score its val top-1.
With --model alone the timm model's pretrained weights are used (ImageNet class names from timm's ImageNetInfo); --model
with --checkpoint reads a file of another layout (official, timm, torchvision, ...; one that convert_checkpoint.py
--model converted records its model, and needs no --model, as the model.safetensors of a folder timm's save_for_hf
wrote, whose config.json records its model, preprocessing and classes). --amp bf16 (fp16: CUDA only) runs the model
under autocast, as evaluate.py --amp (the probabilities within bf16's rounding of fp32's); the summary line names it
(not with --onnx or --compile).

--onnx FILE runs a file of scripts/export_onnx.py in ONNX Runtime with NumPy and Pillow only (torch is not
imported): the classes and preprocessing come from the file's metadata, the preprocessing is timm's evaluation
transform in NumPy/Pillow, and the CSV is the one the PyTorch path writes. An ONNX file without swinlite metadata
needs --classes (a UTF-8 text file, one name per line, in output order; a byte order mark is dropped, a name given
twice is an error) and --preprocessing (timm's data config as JSON, e.g. '{"input_size": [3, 224, 224],
"interpolation": "bicubic", "crop_pct": 0.9, "crop_mode": "center", "mean": [0.485, 0.456, 0.406], "std": [0.229,
0.224, 0.225]}'); either flag also overrides the file's (--preprocessing key by key; a key not among these six is an
error). A file of a fixed batch (torch.onnx.export without dynamic_axes fixes it, often to 1) is fed that many images
at a time; a --batch-size other than that batch is an error.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import (
    WEIGHTS_HINT,
    Parser,
    check_at_least,
    check_model_file,
    check_onnx_options,
    ema_weights,
    files_module,
    run,
    user_path,
)

BATCH_SIZE = 32  # images per forward pass by default


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_images_argument("paths", metavar="PATH")
    parser.add_argument(
        "--checkpoint",
        type=user_path("a weights file"),
        help="weights file (written by scripts/train.py, or any layout)",
    )
    parser.add_argument("--model", help="timm model name: pretrained weights alone, or the model of a raw --checkpoint")
    parser.add_ema_argument()
    parser.add_argument(
        "--onnx", type=user_path("an ONNX file"), help="an exported .onnx file, run in ONNX Runtime (no torch)"
    )
    parser.add_argument(
        "--classes",
        type=user_path("a text file of class names"),
        help="--onnx: class names, one per line (default: the file's)",
    )
    parser.add_argument("--preprocessing", help="--onnx: timm data config as JSON (default: the file's)")
    parser.add_argument("--output", required=True, type=user_path("a .csv file"), help="CSV file to write (.csv)")
    parser.add_argument("--topk", type=int, default=1, help="classes per image (default: 1; at most the classes)")
    parser.add_argument(
        "--batch-size", type=int, help=f"images per forward pass (default: {BATCH_SIZE}; --onnx: a file's fixed batch)"
    )
    parser.add_argument(
        "--num-workers", type=int, default=0, help="image decoding processes (default: 0; not with --onnx)"
    )
    parser.add_argument("--device", help="auto, cpu, cuda, cuda:1, ... (default: auto; not with --onnx)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_amp_argument()
    parser.add_compile_argument("; fp32 only (no --amp)")
    args = parser.parse_args(argv)
    if args.output.suffix.lower() != ".csv":  # a CSV under another name (preds.json) misleads its reader
        parser.error(f"--output must end in .csv (predict.py writes CSV), got {args.output}")
    others = [("--checkpoint", args.checkpoint), ("--model", args.model), ("--compile", args.compile),
              ("--num-workers", args.num_workers)]  # fmt: skip
    check_onnx_options(parser, args, others, "alone")
    if args.onnx is None and (args.classes is not None or args.preprocessing is not None):
        parser.error("--classes and --preprocessing describe an --onnx file")
    if args.onnx is None and args.checkpoint is None and args.model is None:
        parser.error("pass --checkpoint, --onnx, or --model for a timm model's pretrained weights")
    if args.compile and args.amp != "none":
        parser.error("--compile runs the model in fp32; drop --amp")
    check_at_least(parser, args, topk=1, batch_size=1, num_workers=0)
    if args.onnx is None:  # --onnx: the file may fix its batch (onnx_predict.batch_size)
        args.batch_size = args.batch_size or BATCH_SIZE
    return args


def build_model(args, weights: Path | None):
    """The model from ``weights`` (the checkpoint or its EMA counterpart) or timm's pretrained weights, in eval mode."""
    from swinlite.inference import check_rgb_model
    from swinlite.weights import load_model, pretrained_model

    if weights is None:
        return pretrained_model(args.model, hint=WEIGHTS_HINT)
    model = load_model(weights, args.model)
    check_rgb_model(model, weights)
    return model


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files_module().check_image_paths(args.paths)  # the paths read, before torch loads; read and checked again later
    check_model_file(args.checkpoint, "checkpoint")
    if args.onnx is not None:
        return predict_onnx(args)
    from torch.utils.data import DataLoader
    from tqdm import tqdm

    from swinlite import inference
    from swinlite.device import autocast_dtype, resolve_device
    from swinlite.images import ImageFiles, list_images
    from swinlite.io import check_output

    device = resolve_device("auto" if args.device is None else args.device)  # not --device ""
    amp = autocast_dtype(args.amp, device)
    files = list_images(args.paths)
    weights = ema_weights(args)
    check_output(args.output, [args.checkpoint, weights, *args.paths, *files])  # folders too: not inside them
    model = build_model(args, weights)
    classes = inference.class_names(model)
    topk = clamp_topk(args.topk, classes)
    dataset = ImageFiles(files, inference.eval_transform(model))
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers, collate_fn=list)
    if args.compile:
        import torch
        from timm.data import resolve_model_data_config

        from swinlite.optimize import FixedBatch

        shape = (min(args.batch_size, len(files)), *resolve_model_data_config(model)["input_size"])  # [B, 3, H, W]
        model = FixedBatch(model.eval().to(device), torch.zeros(shape, device=device))
        print(model.report(), file=sys.stderr)
    predictions, skipped = [], []
    with tqdm(total=len(files), unit="img", desc="predict", disable=args.no_progress or None) as bar:
        for done, result in inference.predict(model, loader, topk, device, amp):
            (predictions if isinstance(result, inference.Prediction) else skipped).append(result)
            bar.update(done - bar.n)
    return finish(predictions, skipped, classes, topk, args.output, len(files), args.amp)


def clamp_topk(topk: int, classes: list[str]) -> int:
    """``topk``, at most the number of classes (with a note when less)."""
    if topk > len(classes):
        print(f"note: --topk {topk} but the model has {len(classes)} classes: writing the top-{len(classes)}",
              file=sys.stderr)  # fmt: skip
    return min(topk, len(classes))


def finish(
    predictions: list, skipped: list[str], classes: list[str], topk: int, output: Path, count: int, amp: str = "none"
) -> int:
    """Name the skipped files, write the CSV (swinlite.predictions, torch-free), print the summary (with the
    ``--amp`` dtype the model ran in, where not none)."""
    from _cli import import_without_torch

    files, written = import_without_torch("files"), import_without_torch("predictions")
    for why in skipped:
        print(f"warning: skipped {files.printable_path(why)}", file=sys.stderr)
    if not predictions:
        raise ValueError(f"none of the {count} files is a readable image")
    written.write_csv(predictions, classes, topk, output)
    precision = f", --amp {amp}" if amp != "none" else ""
    print(f"{len(predictions)} images labelled (top-{topk}{precision}), {len(skipped)} skipped -> "
          f"{files.printable_path(output)}")  # fmt: skip
    return 0


def predict_onnx(args) -> int:
    """The --onnx path: ONNX Runtime, NumPy and Pillow; torch is never imported."""
    import json

    import numpy as np
    from _cli import import_without_torch

    files, onnx_predict = import_without_torch("files"), import_without_torch("onnx_predict")
    Prediction = import_without_torch("predictions").Prediction
    paths = files.list_images(args.paths)
    files.check_output(args.output, [args.onnx, args.classes, *args.paths, *paths])
    classes = None if args.classes is None else files.read_names(args.classes)
    try:
        preprocessing = None if args.preprocessing is None else json.loads(args.preprocessing)
    except json.JSONDecodeError as e:
        raise ValueError(f"--preprocessing must be a JSON object (timm's data config): {e}") from None
    model = onnx_predict.open_model(args.onnx)
    classes, preprocessing = onnx_predict.classifier_settings(model, classes, preprocessing)
    batch_size = onnx_predict.batch_size(model, args.batch_size, BATCH_SIZE)
    topk = clamp_topk(args.topk, classes)
    predictions, skipped = [], []
    for start in range(0, len(paths), batch_size):
        good, batch = [], []
        for _, path, image in files.decoded(paths[start : start + batch_size], skipped):
            try:
                batch.append(onnx_predict.preprocess(image, preprocessing))  # [3, H, W]
            except ValueError as e:  # too elongated to resize: skipped, as swinlite.images.ImageFiles skips it
                skipped.append(f"{path}: {e}")
                continue
            good.append(path)
        if good:
            indices, probs = onnx_predict.top_k(onnx_predict.class_logits(model, np.stack(batch)), topk)
            predictions += [Prediction(p, i, q) for p, i, q in zip(good, indices.tolist(), probs.tolist(), strict=True)]
    return finish(predictions, skipped, classes, topk, args.output, len(paths))


if __name__ == "__main__":
    sys.exit(run(main, one_process=True))
