"""mIoU, mAcc, aAcc and per-class IoU of a segmentation checkpoint of scripts/train_segmentation.py on label maps.

Prints the per-class table and writes OUT/eval.json (mIoU, mAcc, aAcc and each class's IoU and accuracy in percent, null
where a class is absent; and the checkpoint, its kind of weights (ema or raw), the data, split and --amp evaluated) and
OUT/per_class_iou.csv, beside the checkpoint unless --output-dir; a folder holding an earlier run's outputs (of this
script, or of segment.py; checked after the data's folders, the checkpoint and the flags against it) is refused unless
--overwrite, which removes them all; one holding another task's or extract_features.py's / visualize.py's outputs is
refused either way. The data: --data-dir in ADE20K's layout (images/<split>/*, annotations/<split>/*.png, --split
validation or training), or --images and --masks folders. Masks are read as the checkpoint's run read them (classes,
ignore_index, reduce_zero_label); images and masks that do not pair up are named and left out, and so are images with a
view thinner than the backbone's patch at the test scales (one warning); label values outside the classes are an error,
as are an image whose prediction would take more than half the machine's memory, 4 GiB at least (a view's full-size
tensors beside the class scores at the image's own size, as segment.py refuses it: --ratios 100, or a 6000x8000 photo of
150 classes, took all the memory), masks without a pixel of a class, no image the test scales can predict and no pixel
scored (every image failing to decode): an mIoU of nothing would be NaN. The counts are summed over the whole split, as
mmsegmentation does. Prediction follows the checkpoint's test settings unless --mode, --ratios, --flip / --no-flip or
--stride.

Examples:
    python scripts/evaluate_segmentation.py --checkpoint runs/seg_demo/best.safetensors --data-dir data/seg_shapes
    python scripts/evaluate_segmentation.py --checkpoint best.safetensors --data-dir /data/ade20k \\
        --ratios 0.5 0.75 1.0 1.25 1.5 1.75 --flip          # multi-scale + flip
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from _cli import Parser, check_at_least, check_model_file, check_test_options, ema_weights, output_lock, run, user_path

SPLITS = {"validation": "val", "training": "train"}


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_argument(
        "--checkpoint", required=True, type=user_path("a weights file"), help="best.safetensors or last.safetensors"
    )
    parser.add_ema_argument()
    parser.add_argument(
        "--data-dir", type=user_path("a dataset folder"), help="ADE20K layout: images/<split>/, annotations/<split>/"
    )
    parser.add_argument(
        "--split",
        choices=tuple(SPLITS),
        help="(default: validation) of the --data-dir layout; not with --images, --masks",
    )
    parser.add_argument(
        "--images", type=user_path("an image folder"), help="image folder (with --masks, instead of --data-dir)"
    )
    parser.add_argument(
        "--masks", type=user_path("a mask folder"), help="mask folder, the images' names (with --images)"
    )
    parser.add_argument(
        "--mode", choices=("whole", "slide"), help="whole image or sliding windows (default: the run's)"
    )
    parser.add_argument(
        "--ratios", type=float, nargs="+", help="scales of the test size, averaged (default: the run's)"
    )
    parser.add_argument(
        "--flip",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also the mirrored image, averaged (default: the checkpoint's setting)",
    )
    parser.add_argument(
        "--stride", type=int, nargs=2, metavar=("H", "W"),
        help="slide mode: the windows' step, at most the crop size (default: the run's)",
    )  # fmt: skip
    parser.add_argument("--num-workers", type=int, default=2, help="(default: %(default)s)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default: auto)")
    parser.add_amp_argument()
    parser.add_argument(
        "--output-dir",
        type=user_path("a folder for the outputs"),
        help="for eval.json and per_class_iou.csv (default: the checkpoint's)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace evaluate_segmentation.py's and segment.py's earlier outputs in it",
    )
    args = parser.parse_args(argv)
    if not args.data_dir and not (args.images and args.masks):
        parser.error("give --data-dir, or both --images and --masks")
    if args.data_dir and (args.images or args.masks):  # pairs of one folder and the layout's other, by name
        given = " and ".join(o for o, v in (("--images", args.images), ("--masks", args.masks)) if v)
        parser.error(
            f"--data-dir and {given} were given: --images and --masks replace the --data-dir layout (its split's "
            "images and masks, which eval.json then records as read); give --data-dir, or both --images and --masks"
        )
    if args.split and not args.data_dir:  # else accepted, ignored, and eval.json recorded split null
        parser.error(
            f"--split {args.split} picks a split of the --data-dir layout, and --images and --masks name the folders "
            "themselves: drop --split, or give --data-dir"
        )
    if args.data_dir:
        args.split = args.split or "validation"
    check_at_least(parser, args, num_workers=0)
    check_test_options(parser, args)
    return args


def _finite_or_null(value):
    """NaN (a class absent from the split) as null: JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_model_file(args.checkpoint, "checkpoint")  # before torch loads; the data's paths are checked after it

    from torch.utils.data import DataLoader

    from swinlite.device import autocast_dtype, resolve_device
    from swinlite.engine.loop import StepSettings
    from swinlite.files import check_output_dir, remove_outputs
    from swinlite.images import evaluated_data, left_out_report
    from swinlite.io import atomic_write_bytes
    from swinlite.segmentation.config import SegDataConfig
    from swinlite.segmentation.data import (
        SegmentationDataset,
        check_data_root,
        check_labelled,
        check_not_too_large,
        check_split_folders,
        collate,
        scan_split,
        split_folders,
        warn_unmeasured,
        without_thin_pairs,
    )
    from swinlite.segmentation.evaluation import per_class_csv, per_class_table, scores
    from swinlite.segmentation.inference import check_counted, confusion_of, large_check, thin_check
    from swinlite.segmentation.predictor import load_segmenter
    from swinlite.segmentation.transforms import build_eval_transform

    device = resolve_device(args.device)
    amp = autocast_dtype(args.amp, device)
    images, masks, apart = args.images, args.masks, ()
    if args.data_dir:  # else --images and --masks (parse_args), with no other split to keep apart
        layout = SegDataConfig(data_dir=str(args.data_dir))
        check_data_root(layout, SPLITS[args.split], option="--data-dir")
        images, masks = split_folders(layout, SPLITS[args.split], option="--data-dir")
        other = next(s for s in SPLITS.values() if s != SPLITS[args.split])
        apart = split_folders(layout, other, option="--data-dir")  # a link into it: the other split's images scored
    check_split_folders(images, masks)  # the data's folders, the checkpoint and the flags against it: first
    weights = ema_weights(args)
    model, info = load_segmenter(weights, device)
    test = info.test.overridden(args.mode, args.ratios, args.flip, args.stride)  # checked before the data is read
    out = args.output_dir or weights.parent
    option = "--output-dir" if args.output_dir else "the checkpoint's folder (the default --output-dir)"
    with output_lock(out, "evaluate_segmentation.py"):  # from the folder's checks to the last file
        earlier = check_output_dir(
            "segmentation", out, [args.checkpoint, weights, images, masks], args.overwrite, option
        )
        split = scan_split(images, masks, info.labels, workers=max(args.num_workers, 1), apart=apart)
        for path, reason in split.skipped[:10]:
            print(f"warning: left out {path}: {reason}", file=sys.stderr)
        if len(split.skipped) > 10:
            print(f"warning: and {len(split.skipped) - 10} more images left out", file=sys.stderr)
        too_thin, what = thin_check(model, test), SPLITS[args.split] if not args.masks else "evaluated"
        split = without_thin_pairs(
            split, too_thin, images, "raise --ratios"
        )  # named in one warning; none left: an error
        check_not_too_large(split, large_check(model, test))  # a view too large for memory: an error, first
        check_labelled(split, what, masks, info.labels)  # training's check: an mIoU of no pixel is NaN
        warn_unmeasured(split, what, masks, info.labels)  # their rows print nan where no pixel is predicted as them
        dataset = SegmentationDataset(split.pairs, info.labels, build_eval_transform(info.mean, info.std),
                                      evaluation=True, too_thin=too_thin)  # fmt: skip
        loader = DataLoader(dataset, batch_size=1, num_workers=args.num_workers, collate_fn=collate)
        classes = info.labels.classes
        counts, evaluated, left_out = confusion_of(  # a pair unreadable now: left out
            model, loader, test, len(classes), info.labels.ignore_index, StepSettings(device, amp)
        )
        check_counted(counts, evaluated, left_out, what)  # every image left out as read: an error, not a NaN report
        result = scores(counts)
        print(f"{weights} on {evaluated} images of {images} ({test.mode}, ratios {list(test.ratios)}"
              f"{', flip' if test.flip else ''}):\n{per_class_table(result, classes)}")  # fmt: skip
        per_class = {c: {"iou": i, "acc": a} for c, i, a in zip(classes, result.iou, result.acc, strict=True)}
        report = evaluated_data(weights, args.data_dir, args.split, args.amp, image_dir=images, mask_dir=masks)
        report |= {"images": evaluated, "test": test.to_dict(), "miou": result.miou, "macc": result.macc,
                   "aacc": result.aacc, "per_class": per_class}  # fmt: skip
        links = [(link.path, link.reason) for link in split.links]  # the links the scan skipped, as evaluate.py's
        report |= left_out_report([*split.skipped, *links], left_out)
        remove_outputs(earlier)  # only now: a failed evaluation leaves them as they were
        atomic_write_bytes(out / "per_class_iou.csv", per_class_csv(result, classes))
        finished = json.dumps(_finite_or_null(report), indent=1, allow_nan=False).encode()
        atomic_write_bytes(out / "eval.json", finished)  # last: a finished evaluation
        print(f"mIoU {result.miou:.2f}, mAcc {result.macc:.2f}, aAcc {result.aacc:.2f}; wrote {out / 'eval.json'} and "
              f"{out / 'per_class_iou.csv'}")  # fmt: skip
        return 0


if __name__ == "__main__":
    sys.exit(run(main, one_process=True))
