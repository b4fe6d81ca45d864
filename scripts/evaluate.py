"""Evaluate a checkpoint on an ImageFolder split: top-1/top-k, loss, per-class accuracy and a confusion-matrix PNG.

Weights written by scripts/train.py need nothing else: the model, classes and preprocessing are read
from the file, and a flag that contradicts it is an error (before the output folder is checked). swinlite, timm,
official Microsoft or torchvision Swin checkpoints are read too: pass --model for those (not for one that
convert_checkpoint.py --model converted: it records its model; nor for the model.safetensors of a folder timm's
save_for_hf wrote: its config.json does), and --class-order where their class folders order
otherwise sorted than naturally (which order the outputs follow depends on the code that trained them).
Loading is strict. eval.json records the checkpoint, the kind of weights it gave (ema or raw), --data-dir, --split,
--amp and --compile with the numbers; a folder holding an earlier run's outputs (this script's eval.json and
confusion_matrix.png) is refused unless --overwrite, which removes them all; one holding another task's or
extract_features.py's / visualize.py's outputs is refused either way (--overwrite never removes them).

Examples:
    python scripts/evaluate.py --checkpoint runs/demo/best.safetensors --data-dir data/digits
    python scripts/evaluate.py --checkpoint runs/x/best.safetensors --ema --data-dir DIR --split test
"""

from __future__ import annotations

import sys

from _cli import Parser, check_at_least, check_model_file, ema_weights, files_module, output_lock, run, user_path


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_argument(
        "--checkpoint", required=True, type=user_path("a weights file"), help=".safetensors, .pt or .pth weights file"
    )
    parser.add_argument(
        "--data-dir", required=True, type=user_path("a dataset folder"), help="dataset root holding <split>/<class>/*"
    )
    parser.add_ema_argument()
    parser.add_argument("--model", help="timm model name, for files that do not record theirs")
    parser.add_argument("--split", default="val", help="sub-folder of --data-dir to evaluate (default: %(default)s)")
    parser.add_argument(
        "--img-size",
        type=int,
        help="input size, for files that do not record theirs; a batch (of this size or the file's own) whose first "
        "stage alone would need more than the device's memory (a CUDA device's, else the machine's; half as much under "
        "--amp) is refused before any batch: lower the size or --batch-size",
    )
    parser.add_argument(
        "--class-order",
        choices=("sorted", "natural"),
        help="for files that record no class names, where the class folders' orders differ: the outputs' order, "
        "sorted (torchvision's ImageFolder: c1, c10, c2) or natural (timm's train.py: c1, c2, c10)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="(default: %(default)s)")
    parser.add_argument("--num-workers", type=int, default=2, help="(default: %(default)s)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default: auto)")
    parser.add_amp_argument()
    parser.add_compile_argument("; fp32 only (no --amp)")
    parser.add_argument(
        "--output-dir",
        type=user_path("a folder for the outputs"),
        help="for eval.json and confusion_matrix.png (default: the checkpoint's folder)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace this script's earlier outputs in it")
    args = parser.parse_args(argv)
    check_at_least(parser, args, batch_size=1, img_size=1, num_workers=0)
    if args.compile and args.amp != "none":
        parser.error("--compile runs the model in fp32; drop --amp")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # the paths read, before torch loads; read and checked again later
    files_module().check_folder(args.data_dir, "--data-dir", f"a folder holding {args.split}/<class>/*")
    check_model_file(args.checkpoint, "checkpoint")

    from swinlite.classification.evaluation import (
        format_report,
        plot_confusion,
        prepare_evaluation,
        run_evaluation,
    )
    from swinlite.device import autocast_dtype, device_memory, resolve_device
    from swinlite.files import check_output_dir, remove_outputs
    from swinlite.images import evaluated_data, left_out_report
    from swinlite.inference import batch_too_large
    from swinlite.io import atomic_write_bytes, json_bytes

    device = resolve_device(args.device)
    amp = autocast_dtype(args.amp, device)
    checkpoint = ema_weights(args)
    setup = prepare_evaluation(  # the flags against the checkpoint and the data, before the output folder's check
        checkpoint, args.data_dir, args.model, args.split, args.batch_size, args.num_workers, args.img_size,
        args.class_order,
    )  # fmt: skip
    memory = device_memory(device)
    what = "--img-size" if args.img_size else "the evaluated size"
    element_size = 4 if amp is None else 2
    too_large = memory and batch_too_large(setup.model, args.batch_size, setup.size, memory, element_size, what)
    if too_large:  # before any batch: --img-size 5000 swapped for minutes
        raise ValueError(too_large)
    out = args.output_dir or checkpoint.parent
    option = "--output-dir" if args.output_dir else "the checkpoint's folder (the default --output-dir)"
    inputs = [args.checkpoint, checkpoint, args.data_dir / args.split]
    with output_lock(out, "evaluate.py"):  # from the folder's checks to the last file
        earlier = check_output_dir("classification", out, inputs, args.overwrite, option)
        if args.compile:
            from dataclasses import replace

            from swinlite.optimize import FixedBatch

            first = next((batch[0] for batch in setup.loader if batch[0] is not None), None)  # None: no image read
            if first is None:
                raise ValueError(f"no image of {args.data_dir / args.split} could be read")
            example = first.new_zeros(args.batch_size, *first.shape[1:])  # a full batch: the eval transform's size
            compiled = FixedBatch(setup.model.eval().to(device), example.to(device))
            print(compiled.report(), file=sys.stderr)
            setup = replace(setup, model=compiled)
        result = run_evaluation(setup, device, amp)
        summary = evaluated_data(checkpoint, args.data_dir, args.split, args.amp) | {"compile": args.compile}
        summary |= {"top1": result.top1}
        summary |= {f"top{result.k}": result.topk} if result.k > 1 else {}  # top-k of k > 1, as training's columns
        summary |= {"loss": result.loss}
        summary |= {"classes": setup.classes, "per_class_top1": result.per_class_accuracy.tolist()}
        summary |= {"images": int(result.confusion.sum())} | left_out_report(setup.skipped, result.left_out)
        print(f"weights: {checkpoint}")
        print(format_report(result, setup.classes))
        remove_outputs(earlier)  # only now: a failed evaluation leaves them as they were
        plot_confusion(result.confusion, setup.classes, out / "confusion_matrix.png")
        atomic_write_bytes(out / "eval.json", json_bytes(summary, indent=2))  # last: a finished evaluation
        print(f"confusion matrix: {out / 'confusion_matrix.png'}\nsummary:          {out / 'eval.json'}")
        return 0


if __name__ == "__main__":
    sys.exit(run(main, one_process=True))
