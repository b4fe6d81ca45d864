"""COCO box (and mask) mAP with pycocotools' ``COCOeval``, on predictions gathered as COCO result dicts."""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval, Params

from ..files import EVALUATIONS_BY_TASK
from ..images import LeftOut, nothing_scored
from .data import Categories, CocoDetection

# what scripts/evaluate_detection.py writes, beside the checkpoint unless --output-dir
EVALUATION_FILES = EVALUATIONS_BY_TASK["detection"]

# COCOeval.stats[0:6], in percent; the metrics.csv columns are "val_" + these (masks: "val_mask_" + these)
AP_NAMES = ("map", "map50", "map75", "map_small", "map_medium", "map_large")


def to_coco_results(
    prediction: dict[str, torch.Tensor], image_id: int, categories: Categories
) -> list[dict[str, object]]:
    """One image's detector output as COCO result dicts: ``bbox`` xywh, ``category_id`` the COCO id, ``score``,
    and, when the output has ``masks`` [N, 1, H, W] (probabilities), an RLE ``segmentation`` of mask > 0.5.

    Boxes and scores keep the model's float32 values: COCOeval scores these, and rounding (scores to 4 decimals, as
    detect.py writes them for reading) tied up to a hundred low scores per image and moved AP by ~0.001 points."""
    boxes = prediction["boxes"].float().cpu()
    xywh = torch.cat([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], dim=1).tolist()  # [N, 4]
    results = [
        {"image_id": image_id, "category_id": categories.ids[label - 1], "bbox": box, "score": score}
        for box, label, score in zip(xywh, prediction["labels"].tolist(), prediction["scores"].tolist(), strict=True)
    ]  # fmt: skip
    if "masks" in prediction:
        binary = (prediction["masks"][:, 0] > 0.5).cpu().numpy().astype(np.uint8)  # [N, H, W]
        for result, rle in zip(results, mask_utils.encode(np.asfortranarray(binary.transpose(1, 2, 0))), strict=True):
            rle["counts"] = rle["counts"].decode("ascii")
            result["segmentation"] = rle
    return results


def scoring_ground_truth(dataset: CocoDetection) -> COCO:
    """The ground truth COCOeval scores ``dataset``'s images against: the objects the detector trains on (each box
    clipped to its image, objects with no box area inside it left out, as :class:`~.data.CocoDetection` keeps them,
    with a warning) and the split's ``iscrowd`` regions as they are (detections on them count neither way).

    The file's own boxes would count an object outside its image as a miss whatever the detector does, and a box
    reaching outside it as unmatched by a detection of its visible part. The objects are numbered 1, 2, ... (the
    file's id kept as ``file_id``, which messages name): COCOeval records a detection's match by its object's id,
    0 meaning none, so an object of id 0 (0-based ids are common in exports) counted its detection a false positive
    and itself a miss.
    """
    split = dataset.split
    objects = [
        {k: v for k, v in obj.items() if k != "box"} | {"bbox": [x0, y0, x1 - x0, y1 - y0]}
        for image_objects in dataset.objects
        for obj in image_objects
        for x0, y0, x1, y1 in [obj["box"]]
    ]
    crowds = [ann for i in split.image_ids for ann in split.coco.imgToAnns.get(i, []) if ann["iscrowd"]]
    coco = COCO()
    coco.dataset = {
        "images": [split.coco.imgs[i] for i in split.image_ids],
        "categories": list(split.coco.cats.values()),
        "annotations": [ann | {"id": n, "file_id": ann["id"]} for n, ann in enumerate(objects + crowds, start=1)],
    }
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        coco.createIndex()
    return coco


def check_scorable(dataset: CocoDetection, split: str, option: str | None = None) -> None:
    """ValueError when no image of ``dataset`` holds an object to score: COCOeval's AP over none is NaN, which would
    read as a result (a training run could pick no best weights by it). The message says why: a file of no
    annotation, none on the images kept, or only ``iscrowd`` ones and ones with no box area in their image.

    Args:
        dataset: the split's images and objects.
        split: "val", "train": the file is "the <split> annotations (<file>)" ...
        option: ... or, where given, the option the user named the file by ("--ann": "--ann <file>").
    """
    if any(dataset.objects):
        return
    coco, ann_file = dataset.split.coco, dataset.split.ann_file
    source = f"{option} {ann_file}" if option else f"the {split} annotations ({ann_file})"
    if not coco.anns:
        why = "no annotation at all, so no object to score"
    elif not any(coco.imgToAnns.get(i) for i in dataset.split.image_ids):
        why = "no annotation on the images kept (those left out are named in a warning above), so no object to score"
    else:
        why = "no object to score on the images kept, only iscrowd or empty ones"
    raise ValueError(f"{source}: {why}; the AP would be NaN")


def check_scored(coco_gt: COCO, image_ids: list[int], left_out: list[LeftOut], split: str) -> None:
    """ValueError when an evaluation has nothing to score: no image (each left out as it was read, e.g. pixels that
    do not decode behind a header the scan read), or images that hold no object to score (those with objects left
    out). COCOeval's AP over either is NaN, which would read as a result: a report of nulls, a training run that
    never picks best weights (:func:`check_scorable` finds the same before any image is read).

    Args:
        coco_gt: the ground truth, :func:`scoring_ground_truth`.
        image_ids: the images scored (all those of the split but ``left_out``).
        left_out: the images the evaluation left out as it read them, for the message.
        split: "val", "train", named in the message.
    """
    if not any(not ann.get("iscrowd", 0) for i in image_ids for ann in coco_gt.imgToAnns.get(i, [])):
        raise nothing_scored(len(image_ids), left_out, split, "object to score", "AP")


def unmasked_objects(coco_gt: COCO, image_ids: list[int]) -> list[int]:
    """The file's ids of the ground-truth objects of ``image_ids`` without a segmentation in the file: mask AP needs
    one on every object (COCOeval compares masks, crowd regions included). An object whose segmentation was invalid
    is not one of them (:func:`coco_ap` ignores it for mask AP)."""
    objects = [ann for i in image_ids for ann in coco_gt.imgToAnns.get(i, [])]
    return [ann["file_id"] for ann in objects if "segmentation" not in ann and "mask_problem" not in ann]


def _invalid_masks_as_crowds(coco_gt: COCO, image_ids: list[int]) -> COCO:
    """``coco_gt`` for mask AP: each object of ``image_ids`` whose segmentation was invalid (``mask_problem``, see
    :func:`~.annotations.read_coco`) as an ``iscrowd`` region over its box, named in one warning. COCOeval counts a
    detection on a crowd region neither way and the region itself never as a miss: the object is ignored, not
    scored against a mask it does not have (a false positive for a right detection), nor left out (its detection
    then a false positive too). pycocotools on the file would rasterize the invalid polygon: a 2-point one as a box
    of other coordinates, a NaN one with gigabytes."""
    invalid = [ann for i in image_ids for ann in coco_gt.imgToAnns.get(i, []) if "mask_problem" in ann]
    if not invalid:
        return coco_gt
    named = ", ".join(f"{ann['file_id']}: {ann['mask_problem']}" for ann in invalid[:5])
    warnings.warn(
        f"mask AP ignores {len(invalid)} objects whose segmentation is invalid, as iscrowd regions over their boxes "
        f"(box AP scores them) (annotation id: why): {named}",
        stacklevel=3,
    )
    crowds = {ann["id"]: ann | {"iscrowd": 1, "segmentation": [_box_polygon(ann["bbox"])]} for ann in invalid}
    coco = COCO()
    coco.dataset = coco_gt.dataset | {"annotations": [crowds.get(a["id"], a) for a in coco_gt.dataset["annotations"]]}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        coco.createIndex()
    return coco


def _box_polygon(bbox: list[float]) -> list[float]:
    """A COCO box (x, y, w, h) as a polygon of its 4 corners."""
    x, y, w, h = bbox
    return [x, y, x + w, y, x + w, y + h, x, y + h]


@dataclass
class CocoAP:
    """AP, AP50, AP75 and AP for small / medium / large objects in percent (NaN where no object has that size),
    and pycocotools' own 12-line summary."""

    ap: dict[str, float]
    summary: str


def coco_ap(coco_gt: COCO, results: list[dict], image_ids: list[int], iou_type: str = "bbox") -> CocoAP:
    """Evaluate ``results`` against ``coco_gt`` on ``image_ids`` as COCO does.

    Args:
        coco_gt: the ground truth, :func:`scoring_ground_truth` (``iscrowd`` objects included: COCOeval lets
            detections match them without counting them as misses).
        results: COCO result dicts (``to_coco_results``), left as they are: pycocotools' ``loadRes`` adds fields to
            the dicts it gets, so it gets copies; for "segm" without their ``bbox``, whose area pycocotools would
            take for the detection's (a mask's is smaller: AP by object size would count a detection as larger
            than it is; detectron2 drops the box for the same reason).
        image_ids: the images evaluated (detections on no others).
        iou_type: "bbox" or "segm"; "segm" on ground truth with objects that lack a segmentation gives NaN
            with a warning (``unmasked_objects``), so that a training run keeps its epoch; objects whose
            segmentation was invalid are ignored, with a warning (:func:`_invalid_masks_as_crowds`).
    """
    unmasked = unmasked_objects(coco_gt, image_ids) if iou_type == "segm" else []
    if unmasked:
        note = f"mask AP not computed: {len(unmasked)} objects have no segmentation (annotation ids {unmasked[:10]})"
        warnings.warn(note, stacklevel=2)
        return CocoAP(dict.fromkeys(AP_NAMES, math.nan), note)
    if iou_type == "segm":
        coco_gt = _invalid_masks_as_crowds(coco_gt, image_ids)
    if not results:  # pycocotools cannot load no results: every object is missed
        return CocoAP(_all_missed(coco_gt, image_ids, iou_type), "no detections")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # pycocotools prints its progress and summary
        evaluator = COCOeval(coco_gt, coco_gt.loadRes(_copies(coco_gt, results, iou_type)), iou_type)
        evaluator.params.imgIds = sorted(image_ids)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    stats = [float(100.0 * s) if s >= 0 else math.nan for s in evaluator.stats[:6]]  # -1: no object of that size
    summary = "\n".join(line for line in printed.getvalue().splitlines() if line.lstrip().startswith("Average"))
    return CocoAP(dict(zip(AP_NAMES, stats, strict=True)), summary)


def _copies(coco_gt: COCO, results: list[dict], iou_type: str) -> list[dict]:
    """What ``loadRes`` may change: copies of the results, for "segm" with the segmentation as RLE (polygons
    converted, as COCO converts the ground truth's) and without the box."""
    if iou_type == "bbox":
        return [{k: v for k, v in result.items() if k != "segmentation"} for result in results]
    return [{k: v for k, v in result.items() if k != "bbox"} | {"segmentation": coco_gt.annToRLE(result)}
            for result in results]  # fmt: skip


def _all_missed(coco_gt: COCO, image_ids: list[int], iou_type: str) -> dict[str, float]:
    """COCOeval's APs when nothing was detected: 0 where ``image_ids`` hold an object of that size (COCOeval's area
    ranges, ``iscrowd`` objects not counted), NaN where they hold none, as COCOeval gives them."""
    areas = [a["area"] for i in image_ids for a in coco_gt.imgToAnns.get(i, []) if not a.get("iscrowd", 0)]
    ranges = Params(iou_type).areaRng  # all, small, medium, large
    per_name = [ranges[0]] * 3 + ranges[1:]  # AP, AP50, AP75 over all sizes, then by size
    return {
        name: 0.0 if any(low <= area <= high for area in areas) else math.nan
        for name, (low, high) in zip(AP_NAMES, per_name, strict=True)
    }
