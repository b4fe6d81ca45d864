r"""Draw a swinlite model: its relative position bias tables and the feature levels of one image (PNG).

Examples:
    python scripts/visualize.py --checkpoint runs/demo/best.safetensors --image digit.png --output plots/
    python scripts/visualize.py --model swinlite_tiny_patch4_window7_224 --checkpoint swin_t.pth \
        --image cat.jpg --output plots/

Weights written by scripts/train.py need no --model; other layouts do (but for one that convert_checkpoint.py --model
converted: it records its model; and the model.safetensors of a folder timm's save_for_hf wrote: its config.json does);
--model alone draws the model's published pretrained weights (timm's, as predict.py; a name without any is an error).
Writes plots/bias_stage{i}.png
(per stage a grid of heat maps, blocks down, heads across; entry (dy, dx) is the bias between tokens
that far apart: Swin's learned table, or Swin-V2's continuous position bias 16*sigmoid(MLP(dy, dx)))
and, with --image, plots/features.png (the image resized to --size, as the model sees it, and each level's channel
mean). Every picture is drawn before the first file is written, and each file is written whole (a temporary file
renamed). A folder holding an earlier run's PNGs is refused unless --overwrite, which removes them first: the folder
never mixes two runs. Nor does it mix with others': --output is refused where it is a training run's folder (its
--overwrite would leave plots of the old weights; runs/demo_plots beside it) or holds another script's outputs
(extract_features.py's, an evaluation's), even with --overwrite.

A detection or segmentation run's weights (--ema: its EMA weights) draw its Swin backbone: features.png shows its
levels as its FPN or UperNet head reads them, through the run's trained per-level norms (a note on stderr says so;
--no-out-norm: the raw levels), normalized by the run's mean and std, at the detector's test size or the segmenter's
crop unless --size (as export_onnx.py --features exports them). --model is refused with such a file, which records
its Swin, and --no-out-norm with any other. A run's resume.pt (any task's) is its resume state, not its weights,
and is refused: give its best.safetensors or last.safetensors.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import WEIGHTS_HINT, Parser, check_model_file, check_size, ema_weights, output_lock, run, user_path


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_argument(
        "--checkpoint",
        type=user_path("a weights file"),
        help="weights file (written by scripts/train.py, or any layout)",
    )
    parser.add_ema_argument()
    parser.add_argument(
        "--model", help="swinlite model name: for files that do not record theirs; alone, its pretrained weights"
    )
    parser.add_argument("--image", type=user_path("an image"), help="an image for the feature-level plot")
    parser.add_argument(
        "--size",
        type=int,
        nargs=2,
        metavar=("H", "W"),
        help="--image's input size, at least one patch (default: the model's)",
    )
    parser.add_argument(
        "--output", required=True, type=user_path("a folder for the PNG files"), help="folder for the PNG files"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the PNGs of an earlier run in --output")
    parser.add_argument(
        "--no-out-norm",
        action="store_true",
        help="--image's levels of a detection or segmentation checkpoint raw, without the run's per-level norms",
    )
    args = parser.parse_args(argv)
    if args.checkpoint is None and args.model is None:
        parser.error("pass --checkpoint (weights written by scripts/train.py need nothing else) or --model")
    if args.image is not None and not args.image.is_file():
        parser.error(f"--image {str(args.image)!r} is not a file")
    if args.size and args.image is None:  # the bias maps do not depend on the input size
        parser.error("--size is the input size of --image's feature plot (features.png): pass --image, or drop --size")
    if args.no_out_norm and args.image is None:  # the bias maps do not depend on the levels' norms
        parser.error("--no-out-norm chooses the levels of --image's feature plot (features.png): pass --image, or drop "
                     "--no-out-norm")  # fmt: skip
    if args.size and min(args.size) < 1:
        parser.error(f"--size must be positive, got {args.size}")
    return args


def load_swin(args, checkpoint: Path | None):
    """(the model to draw, the levels of its feature plot: None for every level): a detection or segmentation run's
    backbone (swinlite.features_of_runs: the levels its FPN or head reads; its note on stderr), a classifier's
    checkpoint strictly, or timm's pretrained weights of --model."""
    from swinlite.features_of_runs import check_run_options, run_levels, run_task
    from swinlite.weights import load_model, pretrained_model

    task = run_task(checkpoint)
    check_run_options(task, checkpoint, args.model, args.no_out_norm)
    if task is None:
        model = load_model(checkpoint, args.model) if checkpoint else pretrained_model(args.model, WEIGHTS_HINT)
        return model, None
    levels = run_levels(checkpoint, args.no_out_norm)
    if levels.note and args.image is not None:  # the bias maps alone show no levels
        print(levels.note, file=sys.stderr)
    return levels.model, levels.levels


def main(argv: list[str] | None = None) -> list[Path]:
    args = parse_args(argv)
    check_model_file(args.checkpoint, "checkpoint")  # before torch loads; read and checked again later
    from swinlite import SwinTransformer
    from swinlite.files import check_folder_alone, earlier_outputs, remove_outputs, unreadable
    from swinlite.images import load_rgb
    from swinlite.inference import check_rgb_model
    from swinlite.io import check_output
    from swinlite.visualize import bias_pngs, features_png, write_pngs
    from swinlite.weights import check_model_name

    if args.model is not None:
        check_model_name(args.model, "swinlite_*")
    checkpoint = ema_weights(args)
    model, levels = load_swin(args, checkpoint)
    if not isinstance(model, SwinTransformer):
        raise ValueError(f"{checkpoint} holds a {type(model).__name__}; visualize.py draws swinlite models")
    if args.image is not None:  # before any work: the feature plot feeds it an RGB image
        check_rgb_model(model, checkpoint or args.model)
    if args.size:  # before any work: a size below one patch failed in the forward pass, naming no option
        check_size(tuple(args.size), model.patch_size, model.pretrained_cfg["architecture"])
    names = [f"bias_stage{i}.png" for i in range(len(model.layers))] + ["features.png"]
    with output_lock(args.output, "visualize.py", "--output") as new:  # from the folder's checks to the last file
        check_output(args.output, [args.checkpoint, checkpoint, args.image], folder=True, names=names)
        check_folder_alone(args.output, "visualize.py", "plots")
        # all of an earlier run's PNGs, features.png too when this run draws none: kept, they would pass for
        # this model's
        stages = sorted(p.name for p in args.output.glob("bias_stage*.png")) if args.output.is_dir() else []
        earlier = earlier_outputs(args.output, dict.fromkeys([*names, *stages]), args.overwrite, option="--output")
        image = None
        if args.image is not None:
            try:
                image = load_rgb(args.image)
            except Exception as e:  # PIL raises many types for broken files; its messages do not name the file
                raise ValueError(f"--image {args.image}: {unreadable(e)}") from None
        pngs = bias_pngs(model)  # every picture drawn before the first file is written: a failure leaves nothing
        if image is not None:
            size = tuple(args.size) if args.size else tuple(model.pretrained_cfg["input_size"][1:])
            pngs["features.png"] = features_png(model, image, size, levels)
        remove_outputs(earlier)
        paths = write_pngs(pngs, args.output, made=new)  # a failed run leaves no PNG in a folder made for it
        print("wrote " + ", ".join(str(p) for p in paths))
        return paths


if __name__ == "__main__":
    sys.exit(run(main, one_process=True))
