r"""Export a swinlite classifier or multi-scale feature extractor to ONNX (dynamic batch), and check it.

Examples:
    python scripts/export_onnx.py --model swinlite_tiny_patch4_window7_224 --checkpoint swin_t.pth \
        --output swin_t.onnx
    python scripts/export_onnx.py --model swinlite_tiny_patch4_window7_224 --features --size 800 1344 \
        --out-norm --output swin_t_features.onnx

The graph is taken with torch.export.export (non-strict) and converted with torch.onnx's dynamo
exporter. Input "images" [batch, 3, H, W]; outputs "logits" [batch, classes] or "stage0".."stage3"
(NCHW). The batch is dynamic; H and W are fixed to --size (the window padding and masks are
computed per size). With --check (default) the file is run in ONNX Runtime on a batch of another
size and compared with PyTorch.
"""

import argparse
from pathlib import Path

import timm
import torch

import swinlite  # noqa: F401  (registers the models)
from swinlite.export import build_exportable, export_onnx, export_program, onnx_max_abs_error


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", required=True, help="registered swinlite model, e.g. swinlite_tiny_patch4_window7_224"
    )
    parser.add_argument("--checkpoint", help="weights in any layout swinlite.convert_state_dict reads")
    parser.add_argument("--output", required=True, type=Path, help="the .onnx file to write")
    parser.add_argument("--features", action="store_true", help="export the feature levels instead of the classifier")
    parser.add_argument("--out-indices", type=int, nargs="+", default=[0, 1, 2, 3], help="levels for --features")
    parser.add_argument("--out-norm", action="store_true", help="a LayerNorm per returned level (detection style)")
    parser.add_argument("--size", type=int, nargs=2, metavar=("H", "W"), help="input size (default: the model's)")
    parser.add_argument("--num-classes", type=int, help="classifier outputs (default: the model's)")
    parser.add_argument("--no-check", action="store_true", help="skip the ONNX Runtime comparison")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest |ONNX - PyTorch| allowed by --check")
    args = parser.parse_args(argv)
    if args.model not in timm.list_models("swinlite_*"):
        parser.error(f"--model must be one of {', '.join(timm.list_models('swinlite_*'))}; got {args.model!r}")
    if args.size and min(args.size) < 1:
        parser.error(f"--size must be positive, got {args.size}")
    return args


def main(argv: list[str] | None = None) -> float | None:
    args = parse_args(argv)
    kwargs = {} if args.num_classes is None else {"num_classes": args.num_classes}
    if args.out_norm:
        kwargs["out_norm"] = True
    model = build_exportable(args.model, args.features, args.checkpoint, args.out_indices, **kwargs)
    size = args.size or timm.get_pretrained_cfg(args.model).input_size[1:]
    names = [f"stage{i}" for i in args.out_indices] if args.features else ["logits"]
    export_onnx(export_program(model, torch.randn(2, 3, *size)), args.output, names)
    print(f"wrote {args.output} (input images [batch, 3, {size[0]}, {size[1]}], outputs {', '.join(names)})")
    if args.no_check:
        return None
    error = onnx_max_abs_error(args.output, model, torch.randn(3, 3, *size))
    print(f"ONNX Runtime vs PyTorch at batch 3: max abs error {error:.3g}")
    if error > args.tolerance:
        raise SystemExit(f"max abs error {error:.3g} is above --tolerance {args.tolerance}")
    return error


if __name__ == "__main__":
    main()
