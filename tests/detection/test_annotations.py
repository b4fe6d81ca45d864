"""COCO files checked before pycocotools sees them: structure errors, dropped annotations, COCO's defaults."""

import os
import resource
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from detkit import SIZE, edit_coco
from forkkit import forked
from pycocotools import mask as mask_utils

from swinlite.detection.annotations import read_coco, rle_counts, segmentation_problem
from swinlite.detection.data import CocoDetection, categories_of, load_split
from swinlite.detection.evaluation import coco_ap, scoring_ground_truth


def _val(coco: Path) -> Path:
    return coco / "annotations" / "instances_val2017.json"


def _ann(data: dict, ann_id: int) -> dict:
    return next(a for a in data["annotations"] if a["id"] == ann_id)


def _set(collection: str, index: int, **values):
    def edit(data: dict) -> None:
        data[collection][index] |= values

    return edit


def _drop_key(collection: str, index: int, key: str):
    return lambda data: data[collection][index].pop(key)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # silently wrong before: pycocotools' index kept one of each duplicate, and annotations of unlisted images
        # (or categories) were never trained on nor scored
        (lambda d: d["images"].append(dict(d["images"][0], file_name="x.png")), r"image ids listed more than once: 1 "),
        (lambda d: d["categories"].append({"id": 3, "name": "bar"}), r"category ids listed more than once: 3 \(2 "),
        (lambda d: d["annotations"].append(dict(d["annotations"][0])), r"annotation ids listed more than once: 1 "),
        (_set("annotations", 0, image_id=99), r"annotation 1: image_id 99 is not an image of the file"),
        (_set("annotations", 0, category_id=4), r"annotation 1: category_id 4 is not a category of the file"),
        # KeyError / TypeError tracebacks before
        (_drop_key("annotations", 0, "bbox"), r"annotation 1: bbox None is not \[x, y, width, height\]"),
        (_set("annotations", 0, bbox=["1", "2", "3", "4"]), r"bbox \['1', '2', '3', '4'\] is not \[x, y"),
        (_set("annotations", 0, bbox=None), r"annotation 1: bbox None is not"),
        (_set("annotations", 0, bbox=[1, 2, 3]), r"annotation 1: bbox \[1, 2, 3\] is not"),
        (_drop_key("images", 0, "file_name"), r"image 1: file_name None"),
        (_drop_key("images", 0, "width"), r"image 1: width None"),
        (_set("images", 0, height=0), r"image 1: height 0"),
        (_set("images", 0, width=47.5), r"image 1: width 47.5"),  # 48.0 is taken (the next test)
        (_drop_key("categories", 0, "name"), r"categories without a name: category 3: name None"),
        (_set("images", 0, id="1"), r"images without an integer 'id' \(by position\): image 0: id '1'"),
        (_set("annotations", 0, image_id="1"), r"annotation 1: image_id '1' is not an integer id"),
        (_set("categories", 0, id=3.0), r"category 0: id 3.0"),
        (_set("annotations", 0, iscrowd=2), r"annotation 1: iscrowd 2 is not 0 or 1"),
        (_set("annotations", 0, area="big"), r"annotation 1: area 'big' is not a number"),
        (lambda d: d.pop("annotations"), r"needs lists images, annotations, categories"),
        (lambda d: d["images"].append(7), r"1 images records are not objects: images\[6\] is int"),
    ],
)
def test_a_file_that_does_not_fit_coco_is_one_error_naming_the_records(coco: Path, edit, message):
    path = edit_coco(coco, "val", edit)
    with pytest.raises(ValueError, match=message) as error:
        load_split(path, coco / "val2017")
    assert str(error.value).startswith(str(path))


def test_a_width_and_height_written_as_whole_floats_are_read_as_pycocotools_reads_them(coco: Path):
    """'width': 48.0 (some exporters' JSON) was refused as not a positive integer; pycocotools and torchvision take
    it. Read as the integer."""
    path = edit_coco(coco, "val", lambda d: [image.update(width=48.0, height=48.0) for image in d["images"]])
    split = load_split(path, coco / "val2017")
    assert {(type(image["width"]), image["height"]) for image in split.coco.imgs.values()} == {(int, 48)}


@pytest.mark.parametrize("masks", [True, False], ids=["mask-detector", "box-detector"])
def test_non_finite_boxes_and_invalid_masks_are_dropped_with_their_reasons(coco: Path, masks: bool):
    """A box detector keeps the box of an object whose mask is invalid (only the mask goes); it lost the object."""

    def edit(data: dict) -> None:
        _ann(data, 1)["bbox"][0] = float("nan")  # Python's json writes NaN; the README promises a warning
        _ann(data, 2)["segmentation"] = [[1.0, 1.0, float("nan"), 5.0, 10.0, 10.0]]
        _ann(data, 3)["segmentation"] = [[1.0, 1.0, 5.0, 5.0, 9.0]]  # odd
        _ann(data, 5)["segmentation"] = "garbage"
        _ann(data, 6)["segmentation"] = [[1.0, 1.0, 1e9, 5.0, 10.0, 10.0]]  # rasterized with gigabytes
        short = mask_utils.encode(np.ones((SIZE, SIZE - 1), dtype=np.uint8, order="F"))["counts"].decode()
        _ann(data, 4)["segmentation"]["counts"] = short  # pycocotools decoded it into uninitialized memory

    coco_gt, dropped, trimmed = read_coco(edit_coco(coco, "val", edit), masks=masks)
    reasons = dict(dropped) | dict(trimmed)
    assert sorted(reasons) == [1, 2, 3, 4, 5, 6] and dict(dropped)[1] == "box [nan, 4.0, 16.0, 16.0] is not finite"
    assert "non-finite coordinate" in reasons[2] and "polygon of 5 numbers" in reasons[3]
    assert "segmentation is str" in reasons[5] and "far outside the 48x48 (HxW) image" in reasons[6]
    assert f"RLE counts cover {SIZE * (SIZE - 1)} pixels with runs >= 0, not the image's {SIZE * SIZE}" in reasons[4]
    if masks:  # Mask R-CNN trains on the mask: the object goes
        assert sorted(coco_gt.anns) == [7] and trimmed == []
    else:
        assert sorted(coco_gt.anns) == [2, 3, 4, 5, 6, 7] and sorted(dict(trimmed)) == [2, 3, 4, 5, 6]
        assert all(r.startswith("segmentation dropped, the box kept") for _, r in trimmed)
        assert not any("segmentation" in coco_gt.anns[i] for i in range(2, 7))


@pytest.mark.parametrize("masks", [True, False], ids=["mask-detector", "box-detector"])
def test_an_invalid_polygon_is_dropped_alone(coco: Path, masks: bool):
    """One polygon fragment of fewer than 3 points dropped the whole object, box included (detectron2 drops the
    fragment); an object left with no valid polygon goes only for a detector that trains on masks."""
    square = [4.0, 4.0, 20.0, 4.0, 20.0, 20.0, 4.0, 20.0]

    def edit(data: dict) -> None:
        _ann(data, 1)["segmentation"] = [square, [4.0, 4.0, 5.0, 5.0]]
        _ann(data, 2)["segmentation"] = [[26.0, 8.0, 27.0, 9.0]]

    path = edit_coco(coco, "val", edit)
    with pytest.warns(UserWarning) as record:
        split = load_split(path, coco / "val2017", masks=masks)
    warned = " ".join(str(w.message) for w in record)
    assert split.coco.anns[1]["segmentation"] == [square]
    kept = f"annotations of {path} kept without invalid segmentation parts (annotation id: what): 1: "
    assert kept + "1 of 2 polygons dropped: polygon of 4 numbers (x, y pairs of at least 3 points)" in warned
    if masks:
        assert 2 not in split.coco.anns
        assert f"1 annotations of {path} dropped (annotation id: reason): 2: segmentation: " in warned
    else:
        assert "segmentation" not in split.coco.anns[2] and split.coco.anns[2]["bbox"] == [26.0, 8.0, 8.0, 30.0]
        assert "2: segmentation dropped, the box kept (box training and box AP need no mask): polygon of 4" in warned


def test_missing_area_and_iscrowd_get_cocos_defaults(coco: Path):
    original, _, _ = read_coco(_val(coco))

    def edit(data: dict) -> None:
        for ann in data["annotations"]:
            ann.pop("area")
            if not ann["iscrowd"]:
                ann.pop("iscrowd")
        _ann(data, 1)["area"] = None  # null is absent too
        _ann(data, 2)["segmentation"] = []  # box-only records as converters write them
        _ann(data, 5).pop("segmentation")

    coco_gt, dropped, _ = read_coco(edit_coco(coco, "val", edit))
    assert dropped == [] and all(a["iscrowd"] == original.anns[a["id"]]["iscrowd"] for a in coco_gt.anns.values())
    masks = {i: mask_utils.decode(original.annToRLE(a)) for i, a in original.anns.items() if i not in (2, 5)}
    for ann_id, mask in masks.items():  # the mask's pixel count, as COCO's files hold
        assert coco_gt.anns[ann_id]["area"] == mask.sum()
    assert "segmentation" not in coco_gt.anns[2] and coco_gt.anns[2]["area"] == 8 * 30  # the box's
    assert coco_gt.anns[5]["area"] == 12 * 12


def _naive_runs(mask: np.ndarray) -> list[int]:
    """COCO's run lengths of a mask: column-major, starting with a run of zeros."""
    runs, current, count = [], 0, 0
    for value in mask.flatten(order="F"):
        if value != current:
            runs.append(count)
            current, count = value, 0
        count += 1
    return runs + [count]


def test_compressed_rle_counts_equal_a_naive_run_length_encoding():
    rng = np.random.default_rng(0)
    for shape, density in [((7, 5), 0.5), ((40, 33), 0.02), ((64, 64), 0.97), ((3, 1), 0.0)]:
        mask = (rng.random(shape) < density).astype(np.uint8)
        text = mask_utils.encode(np.asfortranarray(mask))["counts"].decode("ascii")
        assert rle_counts(text) == _naive_runs(mask)
    assert rle_counts("0@") == [0, -16]  # valid syntax; _rle_problem refuses the negative run
    assert rle_counts("0P") is None and rle_counts("0\x7f") is None  # cut short, out of range


@pytest.mark.parametrize(
    ("segmentation", "problem"),
    [
        ([[0, 0, 5, 0, 5, 3], [-4, -1, 12, 8, 0, 8]], None),
        ({"size": [4, 6], "counts": [3, 5, 16]}, None),
        ({"size": [6, 4], "counts": [3, 5, 16]}, "RLE size [6, 4] is not the image's"),
        ({"size": [4, 6], "counts": [3, 5, 17]}, "cover 25 pixels"),
        ({"size": [4, 6], "counts": [3, -5, 26]}, "runs >= 0"),
        ({"size": [4, 6], "counts": None}, "neither a list of integers nor"),
        ([[0, 0, 10, 0]], "polygon of 4 numbers"),  # pycocotools would read it as a box
        ([[0, 0, "10", 0, 10, 10]], "is not a list of numbers"),
        ([[[0, 0], [10, 0], [10, 10]]], "is not a list of numbers"),
        ([5], "is not a list of numbers"),
        ([[0, 0, 10, 0, float("inf"), 10]], "non-finite"),
        (7, "segmentation is int"),
    ],
)
def test_segmentation_problems(segmentation, problem):
    found = segmentation_problem(segmentation, 4, 6)
    assert found is None if problem is None else problem in found


def _memory_probe(root: Path) -> None:
    """Under a 2 GiB address-space allowance beyond what this process holds: load and score the val split with
    masks; prints the objects of images 1, 2 and 4, the mask AP50 and the warnings of dropped annotations."""
    size = int(Path("/proc/self/status").read_text().split("VmSize:")[1].split()[0]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + 2**31, size + 2**31))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        split = load_split(root / "annotations" / "instances_val2017.json", root / "val2017", masks=True)
        dataset = CocoDetection(split, categories_of(split), masks=True)
        objects = sum(len(dataset[i][1]["masks"]) for i in range(4))
        truth = scoring_ground_truth(dataset)
        results = [{"image_id": a["image_id"], "category_id": a["category_id"], "bbox": a["bbox"], "score": 1.0,
                    "segmentation": truth.annToRLE(a)} for a in truth.anns.values() if not a["iscrowd"]]  # fmt: skip
        ap = coco_ap(truth, results, split.image_ids, "segm")
    print(objects, round(ap.ap["map50"]), *[str(w.message) for w in caught if "dropped (annotation" in str(w.message)])


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_a_nan_polygon_under_a_memory_limit_is_dropped_not_a_crash(coco: Path):
    """pycocotools rasterized the NaN with about 18 GB: killed by the OOM killer, or a segfault under a limit. The
    limit is set in a forked child of this process (no training in it), which it ends with."""
    edit_coco(coco, "val", lambda d: _ann(d, 2)["segmentation"][0].__setitem__(2, float("nan")))
    status, printed = forked(lambda: _memory_probe(coco))
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, printed[-2000:]
    objects, map50, warning = printed.strip().split(" ", 2)
    assert objects == "3"  # image 1's other object, image 2's and image 4's
    assert map50 == "100" and f"1 annotations of {coco / 'annotations' / 'instances_val2017.json'} dropped" in warning
    assert "2: segmentation: polygon with a non-finite coordinate" in warning
