"""COCO AP through pycocotools: 100 on hand-made perfect predictions, lower on shifted boxes; result format; the
results two processes gather."""

import contextlib
import copy
import dataclasses
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from detkit import edit_coco
from pycocotools import mask as mask_utils
from rankforks import forked_pair, report_and_exit

from swinlite.detection.config import DetConfig, DetDataConfig
from swinlite.detection.data import Categories, CocoDetection, CocoSplit, categories_of, load_split, split_paths
from swinlite.detection.evaluation import coco_ap, scoring_ground_truth, to_coco_results, unmasked_objects
from swinlite.detection.task import DetectionTask, predict
from swinlite.engine.distributed import DistInfo
from swinlite.engine.loop import SINGLE, StepSettings
from swinlite.engine.task import RunContext
from swinlite.images import LeftOut

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the file's quirks warn; test_data checks those


def _gt(coco: Path) -> CocoSplit:
    """The val split with the ground truth evaluation scores against in place of the file's."""
    split = load_split(*split_paths(DetDataConfig(data_dir=str(coco)), "val"))
    truth = scoring_ground_truth(CocoDetection(split, categories_of(split), evaluation=True))
    assert 7 not in _by_file_id(truth)  # its empty box: no detection can match it, left out rather than a certain miss
    return dataclasses.replace(split, coco=truth)


def _by_file_id(truth) -> dict[int, dict]:
    """The scored objects by the annotation file's ids (scoring_ground_truth numbers them 1, 2, ... for COCOeval)."""
    return {ann["file_id"]: ann for ann in truth.anns.values()}


def _predictions(split, shift: float) -> list[dict]:
    """Every non-crowd, non-empty object as a detection with score 1, its box moved right by ``shift`` pixels."""
    results = []
    for ann in split.coco.anns.values():
        x, y, w, h = ann["bbox"]
        if not ann["iscrowd"] and w > 0 and h > 0:
            box = [x + shift, y, w, h]
            results.append({"image_id": ann["image_id"], "category_id": ann["category_id"], "bbox": box, "score": 1.0})
    return results


def test_perfect_predictions_score_100_and_shifted_ones_less(coco: Path):
    split = _gt(coco)  # images 1-4 and 6 (5's file is missing); the crowd object is ignored, not a miss
    perfect = coco_ap(split.coco, _predictions(split, 0.0), split.image_ids).ap
    assert perfect["map"] == pytest.approx(100.0) and perfect["map50"] == pytest.approx(100.0)
    assert math.isnan(perfect["map_large"])  # no object is larger than 96^2 px: COCO's -1, here NaN
    shifted = coco_ap(split.coco, _predictions(split, 3.0), split.image_ids).ap
    assert 0 < shifted["map"] < 90 and shifted["map75"] < shifted["map50"]
    assert coco_ap(split.coco, [], split.image_ids).ap["map"] == 0.0


def test_only_the_images_given_are_scored(coco: Path):
    """The objects of the ground truth's other images (left out of the prediction) are no misses: both objects of
    image 1 found exactly score 100 on image 1. Scored on every image, one of category 3's three objects and one of
    category 7's two are found: precision 1 up to recall 1/3 and 1/2, 34 and 51 of COCOeval's 101 recall points."""
    split = _gt(coco)
    on_image_1 = [result for result in _predictions(split, 0.0) if result["image_id"] == 1]
    assert len(on_image_1) == 2 and coco_ap(split.coco, on_image_1, [1]).ap["map"] == pytest.approx(100.0)
    assert coco_ap(split.coco, on_image_1, split.image_ids).ap["map"] == pytest.approx(100 * (34 + 51) / 2 / 101)


def test_a_detection_on_a_crowd_region_counts_neither_way(coco: Path):
    """COCOeval ignores a detection matched to an ``iscrowd`` region: scored against the split's crowd regions too,
    every object found exactly plus the crowd region of image 2 (category 7, as objects 2 and 6) still scores 100."""
    split = _gt(coco)
    file = load_split(*split_paths(DetDataConfig(data_dir=str(coco)), "val")).coco
    on_crowds = [{"image_id": ann["image_id"], "category_id": ann["category_id"], "bbox": ann["bbox"], "score": 1.0}
                 for ann in file.anns.values() if ann["iscrowd"]]  # fmt: skip
    assert len(on_crowds) == 1
    found = coco_ap(split.coco, _predictions(split, 0.0) + on_crowds, split.image_ids).ap
    assert found["map"] == pytest.approx(100.0) and found["map50"] == pytest.approx(100.0)


def test_a_detector_of_what_training_sees_scores_100_whatever_boxes_reach_outside_the_image(coco: Path):
    """The file's boxes were scored as written: an object wholly outside its image was a miss whatever the detector
    did, one reaching outside (annotation 6) unmatched by a detection of its visible part at IoU above 0.6; and one
    ignored object without a mask (7, an empty box) stopped the mask AP of the whole split."""
    outside = {"id": 8, "image_id": 4, "category_id": 3, "bbox": [60.0, 50.0, 10.0, 10.0], "area": 100.0,
               "segmentation": [[60.0, 50.0, 70.0, 50.0, 70.0, 60.0]], "iscrowd": 0}  # fmt: skip
    edit_coco(coco, "val", lambda d: [d["annotations"].append(outside), d["annotations"][6].pop("segmentation")])
    split = load_split(*split_paths(DetDataConfig(data_dir=str(coco)), "val"))
    dataset = CocoDetection(split, categories_of(split), evaluation=True)
    found = [
        {"image_id": image_id, "category_id": obj["category_id"], "bbox": [x0, y0, x1 - x0, y1 - y0], "score": 1.0}
        for image_id, objects in zip(split.image_ids, dataset.objects, strict=True)
        for obj in objects
        for x0, y0, x1, y1 in [obj["box"]]
    ]  # the training targets, detected exactly
    truth = scoring_ground_truth(dataset)
    assert _by_file_id(truth)[6]["bbox"] == [36.0, 6.0, 12.0, 24.0] and not {7, 8} & set(_by_file_id(truth))
    assert coco_ap(truth, found, split.image_ids).ap["map"] == pytest.approx(100.0)
    assert coco_ap(split.coco, found, split.image_ids).ap["map"] < 90  # the file as written
    assert unmasked_objects(truth, split.image_ids) == []


def test_an_object_of_id_0_is_matched_as_any_other(coco: Path):
    """COCOeval records a detection's match by its object's id, 0 meaning none: a file numbering its annotations from
    0 had the detection of object 0 counted a false positive and the object a miss (AP 100 -> 72.1 here; a user's
    file 65.8 -> 56.9), in evaluate_detection.py and every training run's val_map."""
    edit_coco(coco, "val", lambda d: [ann.update(id=ann["id"] - 1) for ann in d["annotations"]])  # 0, 1, ...
    split = _gt(coco)
    assert 0 in _by_file_id(split.coco) and 0 not in split.coco.anns
    assert coco_ap(split.coco, _predictions(split, 0.0), split.image_ids).ap["map"] == pytest.approx(100.0)


@pytest.mark.parametrize("iou_type", ["bbox", "segm"])
def test_no_detection_scores_as_cocoeval_scores_detections_that_match_nothing(coco: Path, iou_type):
    """0 where an object of that size was missed, NaN where the images hold none (it was 0 for every size)."""
    split = _gt(coco)
    missed = coco_ap(split.coco, [], split.image_ids, iou_type).ap
    stray = {"image_id": 3, "category_id": 3, "bbox": [1.0, 1.0, 4.0, 4.0], "score": 0.5}  # the negative image
    if iou_type == "segm":
        stray["segmentation"] = [[1.0, 1.0, 5.0, 1.0, 5.0, 5.0, 1.0, 5.0]]
    want = coco_ap(split.coco, [stray], split.image_ids, iou_type).ap  # COCOeval itself: a false positive only
    assert missed.keys() == want.keys() and missed["map"] == 0.0 and math.isnan(missed["map_large"])
    assert all(missed[k] == want[k] or math.isnan(missed[k]) and math.isnan(want[k]) for k in want), (missed, want)
    assert math.isnan(coco_ap(split.coco, [], [3], iou_type).ap["map"])  # the negative image alone: no object


def test_detector_output_becomes_coco_results_with_the_original_ids():
    categories = Categories([3, 7], ["square", "bar"])
    masks = torch.zeros(1, 1, 10, 12)
    masks[0, 0, 2:5, 3:9] = 0.9
    output = {"boxes": torch.tensor([[3.0, 2.0, 9.0, 5.0]]), "labels": torch.tensor([2]), "scores": torch.tensor([0.8]),
              "masks": masks}  # fmt: skip
    (result,) = to_coco_results(output, image_id=42, categories=categories)
    assert result["image_id"] == 42 and result["category_id"] == 7 and result["score"] == pytest.approx(0.8)
    assert result["bbox"] == [3.0, 2.0, 6.0, 3.0]  # xywh
    assert result["segmentation"]["size"] == [10, 12]


def test_a_masks_pixels_of_probability_above_one_half_are_its_segmentation():
    masks = torch.zeros(3, 1, 10, 12)
    masks[:, 0, 2:5, 3:9] = torch.tensor([0.3, 0.5, 0.7])[:, None, None]  # [3, 3, 6]
    output = {"boxes": torch.tensor([[3.0, 2.0, 9.0, 5.0]] * 3), "labels": torch.tensor([1, 1, 1]),
              "scores": torch.tensor([0.8, 0.7, 0.6]), "masks": masks}  # fmt: skip
    results = to_coco_results(output, image_id=1, categories=Categories([3], ["square"]))
    expected = np.zeros((3, 10, 12), dtype=np.uint8)
    expected[2, 2:5, 3:9] = 1  # 0.3 and 0.5: empty
    decoded = mask_utils.decode([result["segmentation"] for result in results])  # [H, W, 3]
    np.testing.assert_array_equal(decoded.transpose(2, 0, 1), expected)


def test_coco_results_keep_the_model_floats():
    """Scores rounded to 4 decimals tied close detections (COCOeval's ranking then followed the list order) and
    boxes rounded to 2 moved the IoUs: AP differed from COCOeval on the model's output by ~0.001 points."""
    boxes = torch.tensor([[1.0, 2.0, 4.123456, 5.987654], [0.5, 0.25, 3.0, 3.0]])
    scores = torch.tensor([0.123449, 0.123441])
    output = {"boxes": boxes, "labels": torch.tensor([1, 1]), "scores": scores}
    results = to_coco_results(output, image_id=1, categories=Categories([3], ["square"]))
    assert [r["score"] for r in results] == scores.tolist()
    assert results[0]["bbox"] == [1.0, 2.0, *(boxes[0, 2:] - boxes[0, :2]).tolist()]


def test_missing_area_and_iscrowd_score_as_the_complete_file(coco: Path):
    """A KeyError in COCOeval before (after a whole training epoch)."""
    complete = _gt(coco)
    expected = coco_ap(complete.coco, _predictions(complete, 3.0), complete.image_ids).ap

    def strip(data: dict) -> None:
        for ann in data["annotations"]:
            del ann["area"]
            if not ann["iscrowd"]:
                del ann["iscrowd"]

    edit_coco(coco, "val", strip)
    bare = _gt(coco)
    assert coco_ap(bare.coco, _predictions(bare, 3.0), bare.image_ids).ap == pytest.approx(expected, nan_ok=True)


def test_mask_ap_on_objects_without_a_segmentation_is_nan_with_a_note(coco: Path):
    edit_coco(coco, "val", lambda d: [ann.pop("segmentation") for ann in d["annotations"][:3]])
    split = _gt(coco)
    assert unmasked_objects(split.coco, split.image_ids) == [1, 2, 3]
    with pytest.warns(UserWarning, match=r"mask AP not computed: 3 objects have no segmentation"):
        ap = coco_ap(split.coco, _predictions(split, 0.0), split.image_ids, "segm")
    assert all(math.isnan(v) for v in ap.ap.values()) and ap.summary.startswith("mask AP not computed")


def test_mask_ap_by_size_takes_the_masks_area_and_the_results_stay_as_they_were():
    """pycocotools took a mask detection's box area when the result also had a box (its loadRes takes the box branch):
    a thin L-shaped false positive, a mask of 99 px in a 50x50 box, was left out of AP_small as a "medium" detection,
    and AP_small read 100 instead of 50. loadRes also added id, area and iscrowd to the caller's dicts (which
    evaluate_detection.py then wrote to detections.json)."""
    from pycocotools import mask as mask_utils
    from pycocotools.coco import COCO

    def rle(mask: np.ndarray) -> dict:
        encoded = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
        return {"size": encoded["size"], "counts": encoded["counts"].decode("ascii")}

    square, ell = np.zeros((100, 100), bool), np.zeros((100, 100), bool)
    square[10:30, 10:30] = True  # the object: 400 px, small
    ell[50:100, 50], ell[99, 50:100] = True, True  # 99 px in a 50x50 box
    gt = COCO()
    gt.dataset = {"images": [{"id": 1, "width": 100, "height": 100}], "categories": [{"id": 1, "name": "thing"}],
                  "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "area": 400,
                                   "iscrowd": 0, "segmentation": rle(square)}]}  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
    one = {"image_id": 1, "category_id": 1}
    results = [one | {"bbox": [50, 50, 50, 50], "score": 0.95, "segmentation": rle(ell)},
               one | {"bbox": [10, 10, 20, 20], "score": 0.9, "segmentation": rle(square)}]  # fmt: skip
    before = copy.deepcopy(results)
    masks = coco_ap(gt, results, [1], "segm").ap
    assert masks["map_small"] == pytest.approx(50.0) and masks["map"] == pytest.approx(50.0)
    assert coco_ap(gt, results, [1]).ap["map_small"] == pytest.approx(100.0)  # boxes: the L's box is medium
    assert results == before


def test_a_computed_area_is_the_clipped_boxs_as_scored(coco: Path):
    """AP by object size took a box-only object's area from its box as the file writes it, while COCOeval scored the
    box clipped to the image: a 40x40 box half outside its 48x48 image was a "medium" object (1600 px) though the
    box scored is 20x40 (800 px, small). An ``area`` the file gives is COCO's and stays."""

    def half_outside(data: dict) -> None:
        ann = data["annotations"][5]  # annotation 6, image 4
        ann.update(bbox=[28.0, 4.0, 40.0, 40.0])
        del ann["area"], ann["segmentation"]
        data["annotations"][0]["area"] = 10000.0  # given (the 16x16 box's would be 256): kept, a large object

    edit_coco(coco, "val", half_outside)
    split = _gt(coco)
    scored = _by_file_id(split.coco)[6]
    assert scored["bbox"] == [28.0, 4.0, 20.0, 40.0] and scored["area"] == 20 * 40
    ap = coco_ap(split.coco, _predictions(split, 0.0), split.image_ids).ap
    assert ap["map_small"] == pytest.approx(100.0) and ap["map_large"] == pytest.approx(100.0)
    assert math.isnan(ap["map_medium"])  # no medium object: annotation 6 read as one before


def test_box_ap_on_a_file_with_invalid_polygons_is_pycocotools_own(coco: Path):
    """A box detector's AP equals COCOeval's run directly on the file: an object with an invalid polygon (a fragment
    of 2 points beside a valid one, a lone fragment, a NaN coordinate) was dropped from the ground truth, so its
    detection counted as a false positive (and its miss as nothing)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    def invalid_polygons(data: dict) -> None:
        data["annotations"][0]["segmentation"].append([4.0, 4.0, 5.0, 5.0])
        data["annotations"][1]["segmentation"] = [[26.0, 8.0, 27.0, 9.0]]
        data["annotations"][2]["segmentation"][0][3] = float("nan")
        data["annotations"][5]["bbox"] = [30.0, 6.0, 18.0, 24.0]  # inside the image: the file's box is the scored one
        del data["annotations"][6]  # the empty box, which COCOeval would keep

    path = edit_coco(coco, "val", invalid_polygons)
    split = load_split(path, coco / "val2017")  # a box detector's
    truth = scoring_ground_truth(CocoDetection(split, categories_of(split), evaluation=True))
    with contextlib.redirect_stdout(io.StringIO()):
        direct = COCO(str(path))
    results = _predictions(dataclasses.replace(split, coco=direct), 2.0)
    ours = coco_ap(truth, results, split.image_ids).ap
    with contextlib.redirect_stdout(io.StringIO()):
        evaluator = COCOeval(direct, direct.loadRes(copy.deepcopy(results)), "bbox")
        evaluator.params.imgIds = split.image_ids
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    assert 0 < ours["map"] < 100
    assert list(ours.values()) == pytest.approx([100 * s if s >= 0 else math.nan for s in evaluator.stats[:6]],
                                                nan_ok=True)  # fmt: skip


def _pycocotools_on_the_file(path: Path, results: list[dict], image_ids: list[int]) -> list[float]:
    """COCOeval's box AP, AP50, ... in percent (NaN for its -1), run directly on the annotation file."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        direct = COCO(str(path))
        evaluator = COCOeval(direct, direct.loadRes(copy.deepcopy(results)), "bbox")
        evaluator.params.imgIds = image_ids
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return [100 * s if s >= 0 else math.nan for s in evaluator.stats[:6]]


@pytest.mark.parametrize("detector", ["fasterrcnn", "maskrcnn"])
def test_an_object_with_an_invalid_mask_is_scored_in_box_ap_whatever_the_detector(tmp_path: Path, detector: str):
    """Mask R-CNN's evaluation read the val file as its training does, without the objects whose mask is invalid
    (here object 2's only polygon has 2 points): the right detection of object 2 was a false positive, box AP 50
    where pycocotools on the file, and a Faster R-CNN evaluation of it, give 100. Its mask AP ignores the object,
    as an iscrowd region over its box: neither a miss nor a false positive."""
    from PIL import Image

    anns = [{"id": 1, "image_id": 0, "category_id": 1, "bbox": [2, 3, 10, 8], "area": 80, "iscrowd": 0,
             "segmentation": [[2, 3, 12, 3, 12, 11, 2, 11]]},
            {"id": 2, "image_id": 0, "category_id": 1, "bbox": [20, 10, 15, 12], "area": 180, "iscrowd": 0,
             "segmentation": [[20, 10, 35, 10]]}]  # fmt: skip
    images = [{"id": 0, "file_name": "0.png", "width": 40, "height": 30}]
    files = {}
    for split in ("train", "val"):  # files of its own each: a val split of training images is refused
        (tmp_path / split).mkdir()
        Image.new("RGB", (40, 30)).save(tmp_path / split / "0.png")
        path = tmp_path / f"{split}.json"  # the val file, last
        path.write_text(json.dumps({"images": images, "annotations": anns, "categories": [{"id": 1, "name": "a"}]}))
        files |= {f"{split}_ann": str(path), f"{split}_images": str(tmp_path / split)}
    cfg = DetConfig(data=DetDataConfig(**files))
    cfg.model.detector = detector
    task = DetectionTask(RunContext(cfg, torch.device("cpu"), DistInfo(), tmp_path, None))
    task.build_datasets()
    masks = torch.zeros(2, 1, 30, 40)
    masks[0, 0, 3:11, 2:12], masks[1, 0, 10:22, 20:35] = 1.0, 1.0  # object 1's mask; object 2's box
    output = {"boxes": torch.tensor([[2.0, 3, 12, 11], [20, 10, 35, 22]]), "labels": torch.tensor([1, 1]),
              "scores": torch.tensor([0.8, 0.9]), "masks": masks}  # fmt: skip
    results = to_coco_results(output, 0, task.categories)
    box = coco_ap(task.val_truth, results, [0]).ap
    assert list(box.values()) == pytest.approx(_pycocotools_on_the_file(path, results, [0]), nan_ok=True)
    assert box["map"] == pytest.approx(100.0)
    with pytest.warns(UserWarning, match=r"mask AP ignores 1 objects whose segmentation is invalid.*: 2: polygon of 4"):
        mask = coco_ap(task.val_truth, results, [0], "segm").ap
    assert mask["map"] == pytest.approx(100.0)


class OneBoxEach(torch.nn.Module):
    """A detector finding one box per image, at the value of its first pixel."""

    def forward(self, images: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        return [{"boxes": image[0, 0, 0] + torch.tensor([[0.0, 0.0, 4.0, 2.0]]), "labels": torch.tensor([1]),
                 "scores": torch.tensor([0.5])} for image in images]  # fmt: skip


Batch = tuple[list[int], list[LeftOut]]  # image ids, the images left out
SHARDS: list[list[Batch]] = [[([1, 2], [])], [([3], [LeftOut(3, "gone.png", "unreadable")])]]  # rank 0's, rank 1's


def _predicted(batches: list[Batch], dist: DistInfo = SINGLE) -> tuple[list[dict], list[LeftOut]]:
    """predict over ``batches`` (each image's pixels its id)."""
    loader = [([torch.full((3, 8, 8), float(i)) for i in ids], [{"image_id": i} for i in ids], left)
              for ids, left in batches]  # fmt: skip
    return predict(OneBoxEach(), loader, Categories([3], ["square"]), StepSettings(torch.device("cpu")), dist)


def _predicting_rank(rank: int, port: int, reports: list[Path]) -> None:
    """One of two processes (gloo): predicts its shard of ``SHARDS`` and reports the results."""
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    report_and_exit(reports, rank, json.dumps(_predicted(SHARDS[rank], DistInfo(rank, 2))))


def test_two_processes_gather_every_shards_results_and_left_out_images(tmp_path: Path):
    """Every process scores all the results and names every image left out, as one process predicting all."""
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    forked_pair(_predicting_rank, (reports,), timeout=30)
    results, left_out = _predicted(SHARDS[0] + SHARDS[1])
    assert [r["image_id"] for r in results] == [1, 2, 3] and len(left_out) == 1
    for report in reports:
        assert json.loads(report.read_text()) == json.loads(json.dumps([results, left_out]))
