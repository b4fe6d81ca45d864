r"""Extract Swin's multi-scale features (stage0..stage3, NCHW) and pooled embeddings for many images.

Examples:
    python scripts/extract_features.py --checkpoint runs/demo/best.safetensors --input images/ --output feats/
    python scripts/extract_features.py --checkpoint runs/demo/best.safetensors --input cat.jpg --output feats/
    python scripts/extract_features.py --model swinlite_tiny_patch4_window7_224 --checkpoint swin_t.pth \
        --input images/ --output feats/ --size 224 224 --dtype float16 --batch-size 32

Weights written by scripts/train.py need no --model (the model and its normalization come from the file); other layouts
need --model (but for one that convert_checkpoint.py --model converted: it records it; and the model.safetensors of a
folder timm's save_for_hf wrote: its config.json does); --model alone extracts with the model's published pretrained
weights (timm's, as predict.py; a name without any is an error). Each image is resized
whole to --size (bicubic, the aspect ratio not kept, no crop: the maps cover the whole image), not by the classifier's
resize and centre crop. Writes feats/features/<relative image path>.safetensors per image (a name beyond the
filesystem's 255 bytes cut, ending in ~ and a hash of the whole; read them with swinlite.features.load_features: each
names its image), feats/embeddings.safetensors (pooled vectors and
the ordered paths, each its file's source: swinlite.features.load_embeddings), feats/failures.txt (images that did not
decode) and feats/settings.json (model, weights hash, size, dtype). Each feature file records the image it was made from
(real path, size, SHA-256 of its bytes). Rerunning over the same input skips images whose feature file is already whole
and whose image is unchanged: the same bytes, whatever its modification time (after Ctrl-C too: it says how many are
done; each run reads every image once more to hash it). A folder holding features of other images (another --input, an
image removed from it or whose bytes changed since, even at the same size and time), features written by a swinlite that
recorded no image hash, or features made with other settings is refused before anything is written: pass another
--output, or delete those features. --output is a folder of its own: not a training run's (its --overwrite would leave
features of the old weights; runs/demo_features beside it), nor one holding another script's outputs (visualize.py's, an
evaluation's). It may not lie inside the --input folder, and --size must be at least one patch.
A run holds a lock on --output (feats/.lock) until it ends: a second run into it is refused at once (the lock of a
run that was killed is taken over, with a warning).

A detection or segmentation run's weights (train_detection.py's, train_segmentation.py's; --ema: its EMA weights)
give its Swin backbone's levels as its FPN or UperNet head reads them: through the run's trained per-level norms (a
note on stderr says so), those it reads (a RetinaNet's or FCOS's stage1..stage3; --no-out-norm: every raw level,
which it never sees), normalized by the run's mean and std, at
the detector's test size or the segmenter's crop unless --size (as export_onnx.py --features exports them). Such a
backbone has no classifier: its pooled vector is the spatial mean of its last level as stored (stage3). The file
records its Swin: --model is refused with it, and --no-out-norm with any other file. A run's resume.pt (any task's)
is its resume state, not its weights, and is refused: give its best.safetensors or last.safetensors.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from _cli import (
    WEIGHTS_HINT,
    Parser,
    check_at_least,
    check_model_file,
    check_size,
    ema_weights,
    files_module,
    run,
    user_path,
)

DTYPES = ("float16", "float32")


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
    parser.add_argument(
        "--input",
        required=True,
        type=user_path("an image folder, an image file or a text file of paths"),
        help="image folder (searched recursively), one image file, or a text file of paths, one a line (a relative "
        "one: from the list's folder); a file is an image by its extension, or where Pillow opens it as one (.gif)",
    )
    parser.add_argument("--output", required=True, type=user_path("a folder for the features"), help="output folder")
    parser.add_argument("--size", type=int, nargs=2, metavar=("H", "W"), help="model input size (default: the model's)")
    parser.add_argument(
        "--dtype", choices=DTYPES, default="float32", help="dtype of the stored stage maps (default: float32)"
    )
    parser.add_argument("--batch-size", type=int, default=16, help="images per forward pass (default: 16)")
    parser.add_argument(
        "--num-workers",
        "--workers",  # its first name, kept
        type=int,
        default=0,
        help="image decoding processes, as the other scripts' --num-workers (default: 0: in the main process)",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default: auto)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_compile_argument()
    parser.add_argument(
        "--no-out-norm",
        action="store_true",
        help="a detection or segmentation checkpoint's raw levels, without the run's per-level norms",
    )
    args = parser.parse_args(argv)
    if args.checkpoint is None and args.model is None:
        parser.error("pass --checkpoint (weights written by scripts/train.py need nothing else) or --model")
    check_at_least(parser, args, batch_size=1, num_workers=0)
    if args.size and min(args.size) < 1:
        parser.error(f"--size must be positive, got {' '.join(map(str, args.size))}")
    return args


def build_model(args, checkpoint: Path | None):
    """(model, its name, its weights' SHA-256, the levels to store: None for every level): from ``checkpoint``
    (strictly; a detection or segmentation run's: its backbone and the levels its FPN or head reads,
    swinlite.features_of_runs) or timm's pretrained weights (the file in the Hugging Face cache);
    swinlite models only. A classifier's checkpoint is read once, and its bytes both hashed and loaded: hashing the
    file again later recorded a file replaced since (a training run's new best.safetensors) in settings.json, beside
    features of the weights it replaced."""
    from swinlite import SwinTransformer
    from swinlite.features_of_runs import check_run_options, hashed_run_levels, run_task
    from swinlite.hub import cached_weights
    from swinlite.io import file_sha256, read_weights_bytes
    from swinlite.weights import load_model, pretrained_model, read_info

    task = run_task(checkpoint)
    check_run_options(task, checkpoint, args.model, args.no_out_norm)
    if task is not None:  # its backbone, which run_backbone reads from the file: hashed first, unchanged after
        levels, sha256 = hashed_run_levels(checkpoint, args.no_out_norm)
        if levels.note:
            print(levels.note, file=sys.stderr)
        return levels.model, levels.name, sha256, levels.levels
    if checkpoint is None:
        model, name, weights = pretrained_model(args.model, WEIGHTS_HINT), args.model, cached_weights(args.model)
        sha256 = None if weights is None else file_sha256(weights)
    else:
        data = read_weights_bytes(checkpoint)
        model, info = load_model(checkpoint, args.model, data=data), read_info(checkpoint, data)
        # the model the file records (a run's, a converted one's, a save_for_hf folder's config.json), else --model
        name = info.model if info else args.model or model.pretrained_cfg.get("architecture")
        sha256 = hashlib.sha256(data).hexdigest()
    if not isinstance(model, SwinTransformer):
        raise ValueError(f"feature extraction needs a swinlite model (swinlite_*), got {name}")
    return model, name, sha256, None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files_module().check_image_source(args.input)  # the paths read, before torch loads; read and checked again later
    check_model_file(args.checkpoint, "checkpoint")
    import torch

    from swinlite.device import resolve_device
    from swinlite.extract import OUTPUT_FILES, ExtractionInterrupted, read_sources, run_extraction
    from swinlite.files import check_folder_alone, printable_path
    from swinlite.inference import check_rgb_model
    from swinlite.io import check_output
    from swinlite.weights import check_model_name

    device = resolve_device(args.device)
    if args.model is not None:
        check_model_name(args.model, "swinlite_*")
    images, _ = read_sources(args.input)
    # the folder (or list) too: features written inside the folder would be read back as images of another class
    checkpoint = ema_weights(args)
    check_output(args.output, [args.checkpoint, checkpoint, args.input, *images], folder=True, names=OUTPUT_FILES)
    check_folder_alone(args.output, "extract_features.py", "features")
    model, name, sha256, levels = build_model(args, checkpoint)
    check_rgb_model(model, checkpoint or name)  # before run_extraction writes settings.json
    size = tuple(args.size) if args.size else tuple(model.pretrained_cfg["input_size"][1:])
    check_size(size, model.patch_size, name)
    # what the weights are (sha256 is the file's: the checkpoint's, or timm's cached pretrained one), for messages
    weights = f"the checkpoint {printable_path(checkpoint)}" if checkpoint else f"timm's pretrained weights of {name}"
    try:
        summary = run_extraction(
            model,
            name,
            args.input,
            args.output,
            size,
            dtype={"float16": torch.float16, "float32": torch.float32}[args.dtype],
            batch_size=args.batch_size,
            workers=args.num_workers,
            device=str(device),
            progress=not args.no_progress,
            checkpoint_sha256=sha256,
            weights=weights,
            compile=args.compile,
            report=lambda line: print(line, file=sys.stderr, flush=True),
            levels=levels,
        )
    except ExtractionInterrupted as e:  # what a rerun continues from; a plain Ctrl-C is the runner's "interrupted"
        print(e, file=sys.stderr)
        return 130
    print(f"written {summary.written}, skipped (already whole) {summary.skipped}, failed {summary.failed}")
    if summary.failed:
        print(f"failures listed in {args.output / 'failures.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main, one_process=True))
