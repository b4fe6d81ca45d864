"""COCO mAP of a detection checkpoint of scripts/train_detection.py on COCO-format data.

Prints pycocotools' summary (box AP, and mask AP for Mask R-CNN) and writes OUT/eval.json (the AP values in percent;
null for an object size the data has none of; and the checkpoint, its kind of weights (ema or raw), the data, split and
--amp evaluated) and OUT/detections.json (the COCO results), beside the checkpoint unless --output-dir; a folder holding
an earlier run's outputs (of this script, or of detect.py; checked after the data's paths) is refused unless
--overwrite, which removes them all; one holding another task's or extract_features.py's / visualize.py's outputs is
refused either way. The data's categories must be the checkpoint's (the same ids and names; it may list fewer). Mask
R-CNN on data without a segmentation on every object gives box AP only, with a note; an object whose segmentation is
invalid counts in box AP as in pycocotools' on the file, and mask AP ignores it as an iscrowd region over its box, with
a warning.
An image that is missing, does not decode or is not the size its annotation says is left out of the AP and named.
Data without an object to score (none, or only iscrowd or empty ones) is an error: its AP would be NaN; so is an
evaluation that scores no image (every one left out, e.g. none decodes) or none with an object.
"""

from __future__ import annotations

import sys

from _cli import Parser, check_at_least, check_model_file, ema_weights, output_lock, run, user_path


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_argument(
        "--checkpoint", required=True, type=user_path("a weights file"), help="best.safetensors or last.safetensors"
    )
    parser.add_ema_argument()
    parser.add_argument(
        "--data-dir",
        type=user_path("a dataset folder"),
        help="COCO 2017 layout: annotations/instances_<split>2017.json, <split>2017/",
    )
    parser.add_argument("--split", default="val", choices=("train", "val"), help="(default: %(default)s)")
    parser.add_argument(
        "--ann", type=user_path("an annotation file"), help="annotation file (with --images, instead of --data-dir)"
    )
    parser.add_argument(
        "--images", type=user_path("an image folder"), help="image folder (with --ann, instead of --data-dir)"
    )
    parser.add_argument("--batch-size", type=int, default=4, help="(default: %(default)s)")
    parser.add_argument("--num-workers", type=int, default=2, help="(default: %(default)s)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default: auto)")
    parser.add_amp_argument()
    parser.add_argument(
        "--output-dir",
        type=user_path("a folder for the outputs"),
        help="for eval.json and detections.json (default: the checkpoint's)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace evaluate_detection.py's and detect.py's earlier outputs in it"
    )
    args = parser.parse_args(argv)
    if not args.data_dir and not (args.ann and args.images):
        parser.error("give --data-dir, or both --ann and --images")
    if args.data_dir and (args.ann or args.images):  # the layout's annotations paired by file name with other images
        given = " and ".join(o for o, v in (("--ann", args.ann), ("--images", args.images)) if v)
        parser.error(
            f"--data-dir and {given} were given: --ann and --images replace the --data-dir layout (its split's "
            "annotation file and image folder, which eval.json then records as read); give --data-dir, or both --ann "
            "and --images"
        )
    check_at_least(parser, args, batch_size=1, num_workers=0)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_model_file(args.checkpoint, "checkpoint")  # before torch loads; the data's paths are checked after it
    from torch.utils.data import DataLoader

    from swinlite.detection.config import DetDataConfig
    from swinlite.detection.data import (
        CocoDetection,
        check_data_root,
        check_split_paths,
        collate,
        load_split,
        split_paths,
        without_thin_images,
    )
    from swinlite.detection.evaluation import (
        check_scorable,
        check_scored,
        coco_ap,
        scoring_ground_truth,
        unmasked_objects,
    )
    from swinlite.detection.predictor import load_detector
    from swinlite.detection.task import predict, scored_ids
    from swinlite.detection.transforms import build_eval_transform
    from swinlite.device import autocast_dtype, resolve_device
    from swinlite.engine.loop import StepSettings
    from swinlite.files import check_output_dir, remove_outputs
    from swinlite.images import evaluated_data, left_out_report
    from swinlite.io import atomic_write_bytes, json_bytes

    device = resolve_device(args.device)
    amp = autocast_dtype(args.amp, device)
    data = DetDataConfig(
        data_dir=str(args.data_dir or "."), **{f"{args.split}_ann": args.ann, f"{args.split}_images": args.images}
    )
    ann_file, image_dir = split_paths(data, args.split, option="--data-dir")
    check_data_root(data, args.split, option="--data-dir")
    check_split_paths(ann_file, image_dir)  # the data's paths before the output folder (the model is read after it)
    weights = ema_weights(args)
    out = args.output_dir or weights.parent
    option = "--output-dir" if args.output_dir else "the checkpoint's folder (the default --output-dir)"
    inputs = [args.checkpoint, weights, ann_file, image_dir]
    with output_lock(out, "evaluate_detection.py"):  # from the folder's checks to the last file
        earlier = check_output_dir("detection", out, inputs, args.overwrite, option)
        model, categories, meta = load_detector(weights, device)
        transform = model.transform  # the images it cannot resize are left out, with a warning naming them
        split = load_split(ann_file, image_dir)  # every object of the file, as pycocotools scores it (any detector)
        split = without_thin_images(split, transform.min_size[-1], transform.max_size)
        dataset = CocoDetection(split, categories, build_eval_transform(), evaluation=True)  # checks the categories
        check_scorable(dataset, args.split, "--ann" if args.ann else None)  # the file as the user named it
        truth = scoring_ground_truth(dataset)  # the boxes clipped to their images, as training sees them
        iou_types = ["bbox"]
        if meta["detector"].get("detector") == "maskrcnn":
            unmasked = unmasked_objects(truth, split.image_ids)
            if unmasked:
                print(f"note: box AP only: {len(unmasked)} objects have no segmentation (ids {unmasked[:10]})",
                      file=sys.stderr)  # fmt: skip
            else:
                iou_types.append("segm")
        loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers, collate_fn=collate)
        results, left_out = predict(model, loader, categories, StepSettings(device, amp))  # left out: named as read
        image_ids = scored_ids(split, left_out)
        check_scored(truth, image_ids, left_out, args.split)  # every image failed to decode: an error, not a NaN report
        scan = [(split.image_path(i), reason) for i, reason in split.skipped]
        report = evaluated_data(weights, args.data_dir, args.split, args.amp, annotations=ann_file, image_dir=image_dir)
        report |= {"images": len(image_ids)} | left_out_report(scan, left_out)
        for iou_type in iou_types:
            ap = coco_ap(truth, results, image_ids, iou_type)
            print(f"{iou_type} ({len(image_ids)} images):\n{ap.summary}")
            report[iou_type] = ap.ap
        remove_outputs(earlier)  # only now: a failed evaluation leaves them as they were
        atomic_write_bytes(out / "detections.json", json_bytes(results))
        atomic_write_bytes(out / "eval.json", json_bytes(report, indent=1))  # last: a finished evaluation (NaN: null)
        print(f"wrote {out / 'eval.json'} and {out / 'detections.json'}")
        return 0


if __name__ == "__main__":
    sys.exit(run(main, one_process=True))
