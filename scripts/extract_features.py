r"""Extract Swin's multi-scale features (stage0..stage3, NCHW) and pooled embeddings for many images.

Example:
    python scripts/extract_features.py --model swinlite_tiny_patch4_window7_224 --checkpoint swin_t.pth \
        --input images/ --output feats/ --size 224 224 --dtype float16 --batch-size 32

Writes feats/features/<relative image path>.safetensors per image (read them with
swinlite.features.load_features), feats/embeddings.safetensors (pooled vectors and the ordered
paths: swinlite.features.load_embeddings) and feats/failures.txt (images that did not decode).
Rerunning skips images whose feature file is already whole.
"""

import argparse
from pathlib import Path

import timm
import torch

import swinlite  # noqa: F401  (registers the models)
from swinlite.convert import load_checkpoint
from swinlite.extract import DTYPES, run_extraction


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", required=True, help="registered swinlite model, e.g. swinlite_tiny_patch4_window7_224"
    )
    parser.add_argument(
        "--checkpoint", help="weights in any layout swinlite.convert_state_dict reads (.pth/.safetensors)"
    )
    parser.add_argument(
        "--input", required=True, type=Path, help="image folder (searched recursively) or a text file of paths"
    )
    parser.add_argument("--output", required=True, type=Path, help="output folder")
    parser.add_argument("--size", type=int, nargs=2, metavar=("H", "W"), help="model input size (default: the model's)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="dtype of the stored stage maps")
    parser.add_argument("--batch-size", type=int, default=16, help="images per forward pass")
    parser.add_argument("--workers", type=int, default=0, help="image decoding processes")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.model not in timm.list_models("swinlite_*"):
        parser.error(f"--model must be one of {', '.join(timm.list_models('swinlite_*'))}; got {args.model!r}")
    if args.batch_size < 1 or args.workers < 0 or (args.size and min(args.size) < 1):
        parser.error("--batch-size and --size must be positive, --workers non-negative")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    model = timm.create_model(args.model)
    if args.checkpoint:
        load_checkpoint(model, args.checkpoint)
    size = tuple(args.size) if args.size else tuple(model.pretrained_cfg["input_size"][1:])
    summary = run_extraction(
        model,
        args.model,
        args.input,
        args.output,
        size,
        dtype=DTYPES[args.dtype],
        batch_size=args.batch_size,
        workers=args.workers,
        device=args.device,
        progress=not args.no_progress,
    )
    print(f"written {summary.written}, skipped (already whole) {summary.skipped}, failed {summary.failed}")
    if summary.failed:
        print(f"failures listed in {args.output / 'failures.txt'}")


if __name__ == "__main__":
    main()
