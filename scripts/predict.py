r"""Label images with a trained classifier and write the top-k classes per image to a CSV file.

Examples:
    python scripts/predict.py --checkpoint runs/demo/best.safetensors --output preds.csv data/digits/val
    python scripts/predict.py --checkpoint runs/x/best.safetensors --ema --topk 3 --output p.csv a.jpg photos/
    python scripts/predict.py --model swinlite_tiny_patch4_window7_224.ms_in1k --output p.csv photos/

PATH arguments are images or folders; a folder gives its image files (.jpg .jpeg .png .ppm .bmp .pgm
.tif .tiff .webp, any case; searched recursively), a file named explicitly is read whatever its extension.
Files that do not decode are skipped and named on stderr. The CSV (UTF-8) has the columns path, class,
prob, then class_2, prob_2, ... up to --topk; bytes of a file name that are not UTF-8 are written as \xNN.
--output must not be one of the inputs (the checkpoint, an image). Preprocessing is the run's evaluation
transform, recorded in the checkpoint, so predictions on the run's val folder score its val top-1. With
--model alone the timm model's pretrained weights are used (ImageNet class names from timm's
ImageNetInfo); --model with --checkpoint reads a file of another layout (official, timm, torchvision, ...).
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import Parser, run


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_argument("paths", nargs="+", metavar="PATH", help="images and folders of images")
    parser.add_argument("--checkpoint", type=Path, help="weights file (written by scripts/train.py, or any layout)")
    parser.add_argument("--model", help="timm model name: pretrained weights alone, or the model of a raw --checkpoint")
    parser.add_argument("--ema", action="store_true", help="use the run's EMA weights (the file beside --checkpoint)")
    parser.add_argument("--output", required=True, type=Path, help="CSV file to write")
    parser.add_argument("--topk", type=int, default=1, help="classes per image (default: 1; at most the classes)")
    parser.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default: 32)")
    parser.add_argument("--num-workers", type=int, default=0, help="image decoding processes (default: 0)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default: auto)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_compile_argument()
    args = parser.parse_args(argv)
    if args.checkpoint is None and args.model is None:
        parser.error("pass --checkpoint, or --model for a timm model's pretrained weights")
    if args.ema and args.checkpoint is None:
        parser.error("--ema selects the EMA weights of a --checkpoint")
    if args.topk < 1 or args.batch_size < 1 or args.num_workers < 0:
        parser.error("--topk and --batch-size must be at least 1, --num-workers at least 0")
    return args


def build_model(args, weights: Path | None):
    """The model from ``weights`` (the checkpoint or its EMA counterpart) or timm's pretrained weights, in eval mode."""
    from swinlite.weights import load_model, pretrained_model

    if weights is None:
        return pretrained_model(args.model, hint="or pass a local weights file: --model NAME --checkpoint FILE")
    if weights != args.checkpoint:
        print(f"EMA weights: {weights}", file=sys.stderr)
    return load_model(weights, args.model)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from torch.utils.data import DataLoader
    from tqdm import tqdm

    from swinlite import inference
    from swinlite.device import resolve_device
    from swinlite.images import ImageFiles, list_images
    from swinlite.io import check_output, printable_path
    from swinlite.weights import ema_counterpart

    device = resolve_device(args.device)
    files = list_images(args.paths)
    weights = ema_counterpart(args.checkpoint) if args.ema else args.checkpoint
    check_output(args.output, [args.checkpoint, weights, *files])
    model = build_model(args, weights)
    classes = inference.class_names(model)
    topk = min(args.topk, len(classes))
    if topk < args.topk:
        print(
            f"note: --topk {args.topk} but the model has {len(classes)} classes: writing the top-{topk}",
            file=sys.stderr,
        )
    dataset = ImageFiles(files, inference.eval_transform(model))
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers, collate_fn=list)
    if args.compile:
        import torch
        from timm.data import resolve_model_data_config

        from swinlite.optimize import FixedBatch

        shape = (min(args.batch_size, len(files)), *resolve_model_data_config(model)["input_size"])  # [B, 3, H, W]
        model = FixedBatch(model.eval().to(device), torch.zeros(shape, device=device))
    predictions, skipped = [], []
    with tqdm(total=len(files), unit="img", desc="predict", disable=args.no_progress or None) as bar:
        for done, result in inference.predict(model, loader, topk, device):
            (predictions if isinstance(result, inference.Prediction) else skipped).append(result)
            bar.update(done - bar.n)
    for why in skipped:
        print(f"skipped {printable_path(why)}", file=sys.stderr)
    if not predictions:
        raise ValueError(f"none of the {len(files)} files is a readable image")
    inference.write_csv(predictions, classes, topk, args.output)
    print(f"{len(predictions)} images labelled (top-{topk}), {len(skipped)} skipped -> {printable_path(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
