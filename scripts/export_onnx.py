r"""Export a swinlite classifier, feature extractor, FPN backbone, whole detector or segmenter to one ONNX file for
every input size of a range, and check it against PyTorch in ONNX Runtime.

Examples:
    python scripts/export_onnx.py --checkpoint runs/demo/best.safetensors --output demo.onnx
    python scripts/export_onnx.py --checkpoint runs/demo/best.safetensors --output demo_int8.onnx --quantize dynamic
    python scripts/export_onnx.py --model swinlite_tiny_patch4_window7_224 --checkpoint swin_t.pth \
        --output swin_t.onnx
    python scripts/export_onnx.py --model swinlite_tiny_patch4_window7_224 --checkpoint swin_t.pth --features \
        --output swin_t_features.onnx
    python scripts/export_onnx.py --checkpoint runs/det_demo/best.safetensors --output det_demo.onnx
    python scripts/export_onnx.py --checkpoint runs/seg_demo/best.safetensors --output seg_demo.onnx

Input "images" [batch, 3, H, W] with a dynamic batch and H, W anywhere in --min-size..--max-size (default: one patch,
for --features and --fpn one pixel more than the coarsest level's stride, to 2048; a --min-size below that default is
refused before the export, naming it; --fixed-size exports the --size only, one file per size as before). The window
padding, shifts and masks are computed in the graph from the input's size, and the export is refused if the traced
graph assumes anything that fails at some size of the range; sizes outside it are refused by scripts/predict.py --onnx
with an error naming the range. Outputs: "logits" [batch, classes]; with --features
"stage<i>" (NCHW; --out-norm: through the per-level norms of weights that hold them, a detection or segmentation
backbone's; an ImageNet checkpoint has none; a detection or segmentation checkpoint with --features exports its
backbone's levels as its FPN or head reads them (a RetinaNet's or FCOS's stage1..stage3), through the run's trained
per-level norms unless --no-out-norm (a note on stderr says so; --no-out-norm: every raw level, or the --out-indices
given), converted on load as convert_checkpoint.py converts it, normalized by its run's mean and std, at the detector's
test size or the segmenter's crop); with --fpn (a detection checkpoint) the FPN maps "fpn0".."fpn<n>" (input normalized
by the detector's mean and std, which the metadata's preprocessing records). A detection checkpoint alone exports the
whole detector (Faster R-CNN, Mask R-CNN, RetinaNet or FCOS; one image per call): inputs "image" [3, h, w] (0..1,
resized by the detector's rule; h and w from one pixel more than its coarsest stride to its max size,
--min-size/--max-size do not apply) and "original_size" [2] (int64), outputs "boxes" [N, 4] (x1, y1, x2, y2 in the
original image), "scores" [N], "labels" [N] (1-based class index) and for Mask R-CNN "masks" [N, 1, 28, 28] (within each
box); scripts/detect.py --onnx runs it (docs/deployment.md). A segmentation checkpoint exports its UperNet: input
"images" [batch, 3, H, W] normalised (H and W from one pixel more than the coarsest stride to --max-size, by default
2048 or its test settings' longest side if larger), output "logits" [batch, classes, H, W]; scripts/segment.py --onnx
runs it with the checkpoint's classes, palette and test settings (rescale, windows, flips).

Weights written by scripts/train.py, train_detection.py or train_segmentation.py need no --model: the model, its classes
and preprocessing (for a detector: category ids and names, test and max size, mean, std; for a segmenter: its palette,
mean, std and test settings) come from the file (--ema: the run's EMA weights) and go into the ONNX model's
metadata_props (JSON values, with "task", "input_sizes" and "swinlite", the exporting version; --features adds
"out_indices", the levels it holds, and "out_norm", whether they pass through per-level norms). Other layouts need
--model, but for a file convert_checkpoint.py --model converted (it records its model) and the model.safetensors of a
folder timm's save_for_hf wrote (its config.json records it); --model alone exports the model's published pretrained
weights (timm's file, as with --checkpoint FILE; as in predict.py, a name without any is an error). The graph is
taken with torch.export (non-strict) and converted by
torch.onnx's dynamo exporter; the file names its input's dynamic dims "batch", "height" and "width". The check (skip
with --no-check) runs the file in ONNX Runtime at three sizes of the range (--size, else the model's size brought into
the range, at batch 3; one of other remainders, 7/8 of its height and 3/2 of its width (224x224: 197x339), at batch 2;
the range's smallest at batch 1; where the first is the smallest, it runs at batch 1 and the second transposed joins
them, or a corner of the range where sizes cut to it coincide; --fixed-size: its size at batch 3) and compares it with
PyTorch: NaN or inf fails, and so does a difference above --tolerance. A detector's check pairs its detections by label,
score and box instead (docs/deployment.md) and an INT8 file's looks for finite outputs only: --tolerance is refused for
those, as with --no-check. The file is written and checked under a hidden name beside --output and renamed to --output
once it passes, replacing a file of that name (--overwrite is for the scripts' output folders): a file that fails its
check, or an export killed before the end, leaves --output as it was (an earlier file is kept). --quantize dynamic
writes ONNX Runtime's dynamic INT8 quantization of every MatMul (the linear layers and the attention products) instead
(checked for finite outputs; its accuracy: docs/deployment.md).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from _cli import WEIGHTS_HINT, Parser, check_model_file, ema_weights, run, user_path

QUANTIZATIONS = ("dynamic",)
MAX_SIZE = 2048  # swinlite.export.MAX_SIZE, --max-size's default, for parsing without torch


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_argument(
        "--checkpoint",
        type=user_path("a weights file"),
        help="weights file (written by scripts/train*.py, or any layout)",
    )
    parser.add_argument(
        "--model", help="swinlite model name: for files that do not record theirs; alone, its pretrained weights"
    )
    parser.add_ema_argument()
    parser.add_argument("--output", required=True, type=user_path("an .onnx file"), help="the .onnx file to write")
    parser.add_argument(
        "--features",
        action="store_true",
        help="export the feature levels instead of the classifier (of a detection or segmentation checkpoint: its "
        "backbone's)",
    )
    parser.add_argument("--fpn", action="store_true", help="export a detection checkpoint's FPN backbone alone")
    parser.add_argument(
        "--out-indices",
        type=int,
        nargs="+",
        help="levels for --features, strictly increasing, negative ones from the last (default: every level of the "
        "model, all its stages as timm's features_only gives them: 0 1 2 3 for a four-stage Swin; of a detection or "
        "segmentation checkpoint through its norms, the levels its FPN or head reads: 1 2 3 for RetinaNet, FCOS)",
    )
    parser.add_argument(
        "--out-norm",
        action=argparse.BooleanOptionalAction,
        help="with --features: per-level LayerNorms (default: on for a detection or segmentation checkpoint, its "
        "trained ones, as its FPN or head reads the levels; off otherwise; --no-out-norm: the raw levels)",
    )
    parser.add_argument(
        "--size",
        type=int,
        nargs=2,
        metavar=("H", "W"),
        help="example size, traced and checked at (default: the model's; for --features or --fpn of a detection or "
        "segmentation checkpoint the detector's test_size or the segmenter's crop_size)",
    )
    parser.add_argument(
        "--min-size",
        type=int,
        help="smallest height and width served (default, and the least it takes: one patch; for --features, --fpn "
        "and a segmenter one pixel more than the coarsest level's stride)",
    )
    parser.add_argument(
        "--max-size",
        type=int,
        help=f"largest height and width served (default: {MAX_SIZE}, or a segmenter's test size if larger)",
    )
    parser.add_argument("--fixed-size", action="store_true", help="serve --size only (one file per size)")
    parser.add_argument("--quantize", choices=QUANTIZATIONS, help="dynamic: every MatMul in INT8 (ONNX Runtime)")
    parser.add_argument("--num-classes", type=int, help="classifier outputs, for --model without a recording file")
    parser.add_argument("--no-check", action="store_true", help="skip the ONNX Runtime comparison")
    parser.add_argument(
        "--tolerance",
        type=float,
        help="largest |ONNX - PyTorch| the check of an fp32 backbone or segmenter file allows (default: 1e-4)",
    )
    args = parser.parse_args(argv)
    if args.checkpoint is None and args.model is None:
        parser.error("pass --checkpoint (weights written by scripts/train.py need nothing else) or --model")
    if args.size and min(args.size) < 1:
        parser.error(f"--size must be positive, got {args.size}")
    if args.fixed_size and (args.min_size is not None or args.max_size is not None):
        parser.error("--fixed-size serves --size only: --min-size and --max-size set a range, drop them or it")
    if args.fpn and args.checkpoint is None:
        parser.error("--fpn exports the FPN backbone of a detection --checkpoint")
    if args.features and args.fpn:
        parser.error("--features and --fpn are two different exports: pick one")
    if args.out_indices is not None and not args.features:
        parser.error("--out-indices selects the levels of --features: add --features, or drop --out-indices")
    _refuse_ignored_flags(parser, args)
    if args.tolerance is not None and not (math.isfinite(args.tolerance) and args.tolerance > 0):
        parser.error(f"--tolerance must be a positive finite number, got {args.tolerance}")
    if args.tolerance is not None and (args.no_check or args.quantize):
        why = "--no-check skips the check" if args.no_check else "an INT8 file's check looks for finite outputs only"
        parser.error(f"--tolerance bounds the check of an fp32 file: {why}; drop --tolerance")
    return args


def _refuse_ignored_flags(parser: Parser, args: argparse.Namespace) -> None:
    """Refuse, before anything is read, the options the chosen export would ignore without a word: --out-norm or
    --no-out-norm without --features (a classifier, --fpn, a whole detector or segmenter has no per-level norms to
    choose), and --model or --num-classes with --fpn (its detection checkpoint records its Swin and has no
    classifier)."""
    if args.out_norm is not None and not args.features:
        norm = "--out-norm" if args.out_norm else "--no-out-norm"
        parser.error(f"--out-norm/--no-out-norm apply to --features exports (the levels' per-level norms): add "
                     f"--features, or drop {norm}")  # fmt: skip
    options = {"--model": args.model, "--num-classes": args.num_classes}
    given = [flag for flag, value in options.items() if value is not None]
    if args.fpn and given:
        parser.error(f"{', '.join(given)}: not for --fpn, whose detection checkpoint records its Swin and has no "
                     f"classifier: drop {'it' if len(given) == 1 else 'them'}")  # fmt: skip


def main(argv: list[str] | None = None) -> float | None:
    args = parse_args(argv)
    check_model_file(args.checkpoint, "checkpoint")  # before torch loads; read and checked again later
    import onnx  # noqa: F401  (the export extra's packages, named before any weights are read or traced)
    import onnxruntime  # noqa: F401
    import onnxscript  # noqa: F401

    from swinlite.io import check_output, read_metadata

    checkpoint = ema_weights(args)
    check_output(args.output, [args.checkpoint, checkpoint])
    # (--model alone: its published weights, an ImageNet classifier's, fetched once every option is checked)
    task = None if checkpoint is None else read_metadata(checkpoint).get("task")
    if args.fpn and task != "detection":
        what = f"a {task} checkpoint" if task else "not one"
        raise ValueError(f"--fpn exports the FPN backbone of a detection checkpoint; {checkpoint} is {what}")
    whole = {"detection": "detector", "segmentation": "segmenter"}.get(task)
    if whole is not None and args.features:
        _refuse_run_features_flags(args, task)
    elif whole is not None and not args.fpn:
        _refuse_backbone_flags(args, task, whole)
    _check_size_options(args)  # after a detector's refusal of them: a size error would advise them to its user
    return export(args, checkpoint or published_weights(args.model), task)


def published_weights(name: str) -> Path:
    """The file of ``name``'s published pretrained weights (in the Hugging Face cache, fetched if need be): what
    --model NAME alone exports, as --checkpoint FILE would, and as NAME alone means in predict.py, extract_features.py
    and visualize.py; a name without published weights is swinlite.weights.pretrained_model's one error, never an
    export of random initial weights. A cached file is not loaded here: the export builds the model and checks the
    weights once (Swin-T's were loaded twice); one to download is fetched and loaded by pretrained_model."""
    from swinlite.hub import cached_weights, has_weights
    from swinlite.weights import check_model_name, pretrained_model

    check_model_name(name, "swinlite_*")  # before any download: only swinlite models export
    cached = cached_weights(name) if has_weights(name) else None
    if cached is None:  # fetched (and loaded, to check them), or one error
        pretrained_model(name, WEIGHTS_HINT)
        cached = cached_weights(name)
    return cached


def export(args, checkpoint: Path, task: str | None) -> float | None:
    """The export ``task``'s checkpoint asks for (a detector, a segmenter, else the backbone), checked."""
    from swinlite.export import TOLERANCE

    args.tolerance = TOLERANCE if args.tolerance is None else args.tolerance
    if task == "detection" and not (args.fpn or args.features):
        from swinlite.detection.export import export_detector

        return export_detector(checkpoint, args.output, args.quantize, not args.no_check)
    if task == "segmentation" and not args.features:
        from swinlite.segmentation.export import export_segmenter

        sizes = (args.min_size, args.max_size)
        return export_segmenter(checkpoint, args.output, sizes, args.quantize, not args.no_check, args.tolerance)
    return export_backbone(args, checkpoint)


def _refuse_backbone_flags(args, task: str, whole: str) -> None:
    """ValueError naming the given options that only a backbone export takes (a detector's sizes follow its resize,
    and its check pairs detections by label, score and box, each with its own bound: no one --tolerance applies)."""
    given = {"--model": args.model, "--size": args.size, "--fixed-size": args.fixed_size,
             "--num-classes": args.num_classes is not None}  # fmt: skip
    if task == "detection":
        given |= {"--min-size": args.min_size is not None, "--max-size": args.max_size is not None,
                  "--tolerance": args.tolerance is not None}  # fmt: skip
    flags = [flag for flag, value in given.items() if value]
    if flags:
        raise ValueError(
            f"{', '.join(flags)}: not for a {task} checkpoint, which exports its whole {whole} (--features: its "
            "backbone's levels)"
        )


def _check_size_options(args) -> None:
    """ValueError for a --min-size or --max-size below 1, or a --min-size not below the --max-size given. A --min-size
    below the default smallest size or not below the default largest is refused where the export knows them
    (``swinlite.export.served_range``: one patch or one pixel above the coarsest stride; 2048, a segmenter's test size
    if larger)."""
    if args.max_size is not None and args.max_size < 1:
        raise ValueError(f"--max-size must be positive, got {args.max_size}")
    if args.min_size is not None and args.min_size < 1:
        raise ValueError(f"--min-size must be positive, got {args.min_size}")
    if args.min_size is not None and args.max_size is not None and args.min_size >= args.max_size:
        raise ValueError(
            f"--min-size must be in 1..--max-size ({args.max_size}) and below it, got {args.min_size} (one size: "
            "--fixed-size --size H W)"
        )


def _refuse_run_features_flags(args, task: str) -> None:
    """ValueError naming the options that contradict ``--features`` of a run's file: its file records its Swin (the
    backbone's levels have no classifier)."""
    given = {"--model": args.model, "--num-classes": args.num_classes is not None}
    flags = [flag for flag, value in given.items() if value]
    if flags:
        raise ValueError(f"{', '.join(flags)}: not for --features of a {task} checkpoint, which records its Swin")


def export_backbone(args, checkpoint: Path) -> float | None:
    """The classifier, feature extractor or FPN backbone: export, convert, quantize, check, all at a hidden path
    beside --output that becomes --output once checked (swinlite.export.checked_output)."""
    import torch

    from swinlite import export
    from swinlite.inference import check_rgb_model

    model = build(args, checkpoint)
    check_rgb_model(export.swin_of(model), checkpoint)  # the ONNX predictors feed RGB images
    maps = isinstance(model, export.FeatureExtractor | export.FPNFeatures)  # else a classifier: from one patch
    size_range = export.served_range(export.default_size_range(model), args.min_size, args.max_size, maps=maps)
    nominal = example_size(args, export.input_size(model, checkpoint), size_range)
    served = ((nominal[0],) * 2, (nominal[1],) * 2) if args.fixed_size else (size_range, size_range)
    metadata = export.export_metadata(model, checkpoint, served)  # before the export: a headless classifier refused
    program = export.export_program(model, torch.randn(2, 3, *nominal), size_range, args.fixed_size)
    names = output_names(args, model)
    with export.checked_output(args.output) as path:
        export.write_onnx(program, path, names, metadata, args.quantize)
        error = None if args.no_check else check(args, path, model, nominal, size_range)
    what = f"H={nominal[0]}, W={nominal[1]}" if args.fixed_size else f"H and W in {size_range[0]}..{size_range[1]}"
    print(f"wrote {args.output} (input images [batch, 3, H, W], {what}; outputs {', '.join(names)})")
    return error


def example_size(args, model_size: tuple[int, int], size_range: tuple[int, int]) -> tuple[int, int]:
    """The size to trace and check at: --size, else the model's input size, brought into a range that does not hold
    it (--min-size 64 --max-size 96 for a 224 model was refused: the example must lie in the range).

    Raises:
        ValueError: a --size outside the range of a ranged export.
    """
    low, high = size_range
    if args.size and not args.fixed_size and not all(low <= side <= high for side in args.size):
        raise ValueError(f"--size {args.size[0]} {args.size[1]} must lie in the range served, {low}..{high}")
    if args.size or args.fixed_size:
        return tuple(args.size or model_size)
    return tuple(min(max(side, low), high) for side in model_size)


def build(args, checkpoint: Path):
    """The module to export, in eval mode."""
    from swinlite.export import RUN_SETTINGS, FPNFeatures, build_exportable, run_features
    from swinlite.io import read_metadata

    if args.fpn:
        from swinlite.detection.predictor import load_detector

        return FPNFeatures(load_detector(checkpoint)[0].backbone).eval()
    metadata = read_metadata(checkpoint)
    kwargs = {} if args.num_classes is None else {"num_classes": args.num_classes}
    if args.out_norm:
        kwargs["out_norm"] = True
    try:  # a refused load shows none of its notes (swinlite.weights.load_strict): the refusal is one line
        if metadata.get("task") in RUN_SETTINGS:  # --features: a run's Swin, converted on load
            note_run_norms(args, metadata)
            return run_features(checkpoint, args.out_norm, args.out_indices)
        return build_exportable(args.model, args.features, checkpoint, args.out_indices, **kwargs)
    except ValueError as e:  # fresh norms would export other features than the file's: refused by the strict load
        if args.out_norm and "out_norms." in str(e):
            raise ValueError(
                f"--out-norm adds a LayerNorm per level, and {checkpoint} holds none (an ImageNet classifier's "
                "weights, a run trained with model.kwargs.out_norm=false): export its levels without --out-norm "
                "(timm's features_only), or weights that hold them (a detection or segmentation backbone's)"
            ) from None
        raise


def note_run_norms(args, metadata: dict) -> None:
    """Say on stderr that --features of a run's file exports its levels through the run's trained per-level norms
    when the user did not choose (--out-norm / --no-out-norm): the levels its FPN or head reads, not timm's raw
    features_only levels, which --features means for other files."""
    from swinlite.export import run_norms_note, run_out_norm

    if args.out_norm is None and run_out_norm(metadata):
        print(run_norms_note(metadata, f"--features of a {metadata['task']} checkpoint"), file=sys.stderr)


def output_names(args, model) -> list[str]:
    if args.fpn:
        return [f"fpn{i}" for i in range(len(model.backbone.strides))]
    return [f"stage{i}" for i in model.out_indices] if args.features else ["logits"]  # negative ones resolved


def check(args, path: Path, model, nominal: tuple[int, int], size_range: tuple[int, int]) -> float:
    """ONNX Runtime on the file at ``path`` against PyTorch at the check sizes; the largest difference (INT8: only
    finite outputs)."""
    from swinlite.export import check_onnx, check_sizes

    sizes = [nominal] if args.fixed_size else check_sizes(nominal, size_range)
    return check_onnx(path, model, sizes, args.quantize is not None, args.tolerance)


if __name__ == "__main__":
    sys.exit(run(main, one_process=True))
