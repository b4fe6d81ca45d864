r"""Export a swinlite classifier or multi-scale feature extractor to ONNX (dynamic batch), and check it.

Examples:
    python scripts/export_onnx.py --checkpoint runs/demo/best.safetensors --output demo.onnx
    python scripts/export_onnx.py --model swinlite_tiny_patch4_window7_224 --checkpoint swin_t.pth \
        --output swin_t.onnx
    python scripts/export_onnx.py --model swinlite_tiny_patch4_window7_224 --features --size 800 1344 \
        --out-norm --output swin_t_features.onnx

Weights written by scripts/train.py need no --model: the model, its classes and preprocessing come
from the file (--ema: the run's EMA weights) and go into the ONNX model's metadata_props (keys model,
classes, preprocessing, weights, swinlite; values JSON). Other layouts (official, timm, torchvision,
...) need --model; without --checkpoint the model keeps its initial weights.

The graph is taken with torch.export.export (non-strict) and converted with torch.onnx's dynamo
exporter. Input "images" [batch, 3, H, W]; outputs "logits" [batch, classes] or "stage0".."stage3"
(NCHW). The batch is dynamic; H and W are fixed to --size (the window padding and masks are
computed per size). The check (skip with --no-check) runs the file in ONNX Runtime on a batch of
another size and compares it with the PyTorch model the weights were loaded into; NaN or inf fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import Parser, run


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_argument("--checkpoint", type=Path, help="weights file (written by scripts/train.py, or any layout)")
    parser.add_argument("--model", help="swinlite model name, for files that do not record theirs (or no file)")
    parser.add_argument("--ema", action="store_true", help="export the run's EMA weights (the file beside it)")
    parser.add_argument("--output", required=True, type=Path, help="the .onnx file to write")
    parser.add_argument("--features", action="store_true", help="export the feature levels instead of the classifier")
    parser.add_argument("--out-indices", type=int, nargs="+", default=[0, 1, 2, 3], help="levels for --features")
    parser.add_argument("--out-norm", action="store_true", help="a LayerNorm per returned level (detection style)")
    parser.add_argument("--size", type=int, nargs=2, metavar=("H", "W"), help="input size (default: the model's)")
    parser.add_argument("--num-classes", type=int, help="classifier outputs, for --model without a recording file")
    parser.add_argument("--no-check", action="store_true", help="skip the ONNX Runtime comparison")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest |ONNX - PyTorch| allowed by the check")
    args = parser.parse_args(argv)
    if args.checkpoint is None and args.model is None:
        parser.error("pass --checkpoint (weights written by scripts/train.py need nothing else) or --model")
    if args.ema and args.checkpoint is None:
        parser.error("--ema selects the EMA weights of a --checkpoint")
    if args.size and min(args.size) < 1:
        parser.error(f"--size must be positive, got {args.size}")
    return args


def main(argv: list[str] | None = None) -> float | None:
    args = parse_args(argv)
    import torch

    from swinlite.export import build_exportable, export_metadata, export_onnx, export_program, onnx_max_abs_error
    from swinlite.io import check_output
    from swinlite.weights import ema_counterpart

    kwargs = {} if args.num_classes is None else {"num_classes": args.num_classes}
    if args.out_norm:
        kwargs["out_norm"] = True
    checkpoint = ema_counterpart(args.checkpoint) if args.ema else args.checkpoint
    check_output(args.output, [args.checkpoint, checkpoint])
    if checkpoint is None:
        print("note: no --checkpoint: exporting the model's initial weights", file=sys.stderr)
    model = build_exportable(args.model, args.features, checkpoint, args.out_indices, **kwargs)
    size = args.size or (model.model if args.features else model).pretrained_cfg["input_size"][1:]
    names = [f"stage{i}" for i in args.out_indices] if args.features else ["logits"]
    program = export_program(model, torch.randn(2, 3, *size))
    export_onnx(program, args.output, names, export_metadata(model, checkpoint))
    print(f"wrote {args.output} (input images [batch, 3, {size[0]}, {size[1]}], outputs {', '.join(names)})")
    if args.no_check:
        return None
    error = onnx_max_abs_error(args.output, model, torch.randn(3, 3, *size))
    print(f"ONNX Runtime vs PyTorch at batch 3: max abs error {error:.3g}")
    if not error <= args.tolerance:
        raise ValueError(f"max abs error {error:.3g} is above --tolerance {args.tolerance}")
    return error


if __name__ == "__main__":
    sys.exit(run(main))
