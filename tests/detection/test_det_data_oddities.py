"""Oddities of hand-made COCO files that the checks once took without a word, or named wrongly."""

import re
import warnings
from pathlib import Path

import pytest
import torch
from detkit import edit_coco

from swinlite.detection.config import DetConfig, DetDataConfig
from swinlite.detection.data import categories_of, load_split
from swinlite.detection.task import DetectionTask
from swinlite.engine.distributed import DistInfo
from swinlite.engine.task import RunContext


def test_a_file_name_under_two_image_ids_is_an_error_naming_both(coco: Path):
    """The same picture listed twice (ids 1 and 9) was trained twice an epoch, and val would score it twice."""
    path = edit_coco(coco, "train", lambda d: d["images"].append(dict(d["images"][0], id=9)))
    with pytest.raises(
        ValueError, match=r"1 files of .*train2017 listed under more than one image id .*: '01\.png' under ids 1, 9$"
    ):
        load_split(path, coco / "train2017")


@pytest.mark.parametrize(
    "spelled",
    ["./01.png", "../train2017/01.png", "../linked/01.png", "{images}/01.png", "../linked/../train2017/01.png"],
)
def test_one_file_spelled_two_ways_under_two_image_ids_is_an_error_naming_both(coco: Path, spelled: str):
    """Spelled another way (another relative path to it, an absolute path, a path through a symlinked folder), the
    same picture was still trained twice: names were compared as written (normpath), not as the files they name."""
    (coco / "linked").symlink_to(coco / "train2017", target_is_directory=True)
    spelled = spelled.format(images=coco / "train2017")
    path = edit_coco(coco, "train", lambda d: d["images"].append(dict(d["images"][0], id=9, file_name=spelled)))
    with pytest.raises(
        ValueError, match=rf"1 files of .*: '01\.png' under id 1 and {re.escape(repr(spelled))} under id 9$"
    ):
        load_split(path, coco / "train2017")


@pytest.mark.parametrize("key", ["category_id", "image_id"])
def test_a_float_id_is_said_not_to_be_an_integer(coco: Path, key: str):
    """category_id 7.0 was 'not a category of the file' while category 7 is one."""
    path = edit_coco(coco, "train", lambda d: d["annotations"][1].update({key: float(d["annotations"][1][key])}))
    with pytest.raises(ValueError, match=rf"annotation 2: {key} \d\.0 is not an integer id"):
        load_split(path, coco / "train2017")


def test_categories_never_annotated_are_named_in_one_warning(coco: Path):
    """A listed category with no non-crowd object (9 has none, 7 only a crowd one and one on a missing image) gave
    the detector a class it never learns, without a word."""

    def edit(data: dict) -> None:
        data["categories"].append({"id": 9, "name": "ring"})
        for ann in data["annotations"]:
            if ann["category_id"] == 7 and not ann["iscrowd"]:
                ann["image_id"] = 5  # its file is missing: the image is skipped

    path = edit_coco(coco, "train", edit)
    with pytest.warns(UserWarning, match=r"2 categories of .*never learns \(category id: name\): 7: 'bar'; 9: 'ring'"):
        categories = categories_of(load_split(path, coco / "train2017"))
    assert categories.ids == [3, 7, 9]


def test_a_category_whose_every_box_is_empty_or_outside_its_image_is_named(coco: Path):
    """Its annotations are there but each is dropped when the objects are built (an empty box, one outside the
    image): the warning counted annotations, and missed it."""

    def edit(data: dict) -> None:
        sizes = {image["id"]: (image["width"], image["height"]) for image in data["images"]}
        for ann in data["annotations"]:
            if ann["category_id"] == 7 and not ann["iscrowd"]:
                width, height = sizes[ann["image_id"]]
                ann["bbox"] = [width + 5, height + 5, 4, 4] if ann["id"] % 2 else [2, 2, 0, 4]

    path = edit_coco(coco, "train", edit)
    with pytest.warns(UserWarning, match=r"1 categories of .*never learns \(category id: name\): 7: 'bar'"):
        categories_of(load_split(path, coco / "train2017"))


def test_every_category_annotated_gives_no_warning(coco: Path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        split = load_split(coco / "annotations" / "instances_train2017.json", coco / "train2017")
        before = len(caught)
        categories_of(split)
    assert len(caught) == before


def _boxes_of_7(side: float):
    """An edit giving every non-crowd box of category 7 sides of ``side`` px."""

    def edit(data: dict) -> None:
        for ann in data["annotations"]:
            if ann["category_id"] == 7 and not ann["iscrowd"]:
                ann["bbox"] = [10.0, 10.0, side, side]

    return edit


def test_a_category_whose_every_box_is_under_a_pixel_is_named(coco: Path):
    """Boxes of 0.5 px are dropped with their label by SanitizeBoundingBoxes(min_size=1) at every training size:
    the warning counted them as objects to learn."""
    path = edit_coco(coco, "train", _boxes_of_7(0.5))
    with pytest.warns(UserWarning, match=r"1 categories of .*at least 1 px in a kept image\): .*7: 'bar'$"):
        categories_of(load_split(path, coco / "train2017"))


@pytest.mark.parametrize("detector", ["maskrcnn", "fasterrcnn"])
def test_a_category_whose_every_mask_is_invalid_is_named_for_mask_rcnn_alone(coco: Path, detector: str):
    """Mask R-CNN trains on no object without a valid mask (its box AP still scores them): a category whose every
    object has an invalid polygon is one it never learns; a box detector learns it from the boxes."""

    def edit(data: dict) -> None:
        for ann in data["annotations"]:
            if ann["category_id"] == 7 and not ann["iscrowd"]:
                ann["segmentation"] = [[1.0, 1.0, 2.0, 2.0]]  # 2 points

    edit_coco(coco, "train", edit)
    cfg = DetConfig(data=DetDataConfig(data_dir=str(coco)))
    cfg.model.detector = detector
    task = DetectionTask(RunContext(cfg, torch.device("cpu"), DistInfo(), coco, None))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task.build_datasets()
    unlearned = [str(w.message) for w in caught if "never learns" in str(w.message)]
    named = (
        f"1 categories of {coco}/annotations/instances_train2017.json without an object to learn from (a non-crowd "
        "box of at least 1 px in a kept image): the detector gets a class for each that it never learns (category "
        "id: name): 7: 'bar'"
    )
    assert unlearned == ([named] if detector == "maskrcnn" else [])


def _same_annotation_file(coco: Path) -> dict[str, Path]:
    return {"val_ann": coco / "annotations" / "instances_train2017.json", "val_images": coco / "train2017"}


def _linked_annotation_file(coco: Path) -> dict[str, Path]:
    """A link to the training file, read with val's images (other files of the same names)."""
    (coco / "linked.json").symlink_to(coco / "annotations" / "instances_train2017.json")
    return {"val_ann": coco / "linked.json"}


def _one_training_image_listed(coco: Path) -> dict[str, Path]:
    edit_coco(coco, "val", lambda d: d["images"].append(dict(d["images"][1], id=9, file_name="../train2017/02.png")))
    return {}


def _val_folder_linked_to_trains(coco: Path) -> dict[str, Path]:
    (coco / "linked").symlink_to(coco / "train2017", target_is_directory=True)
    return {"val_images": coco / "linked"}


def _val_image_linked_to_a_training_image(coco: Path) -> dict[str, Path]:
    (coco / "val2017" / "01.png").unlink()
    (coco / "val2017" / "01.png").symlink_to(coco / "train2017" / "01.png")
    return {}


def _copies_of_the_training_images(coco: Path) -> dict[str, Path]:
    """The quirky data's val split as it is: copies of the training images, other files (accepted)."""
    return {}


ONE_FILE = r"the val annotation file .* is the training one"
SHARED = r" val images of .*instances_val2017\.json are training images of .*instances_train2017\.json "
# how the val split is set up -> the refusal (None: accepted)
VAL_SPLITS = {
    _same_annotation_file: ONE_FILE + r" \(real path .*train2017\.json\): each split needs images of its own",
    _linked_annotation_file: ONE_FILE + r" \(.*instances_train2017\.json; real path .*train2017\.json\)",
    _one_training_image_listed: "1 of the 6" + SHARED + r".*file\): 9 \(.*val2017/\.\./train2017/02\.png\)\): ",
    _val_folder_linked_to_trains: "5 of the 5" + SHARED + r".*: 1 \(.*linked/01\.png\); .*; 6 \(.*/06\.png\)\)",
    _val_image_linked_to_a_training_image: "1 of the 5" + SHARED + r".*: 1 \(.*val2017/01\.png\)\): each split",
    _copies_of_the_training_images: None,
}


@pytest.mark.parametrize("val", VAL_SPLITS, ids=lambda val: val.__name__.strip("_"))
def test_a_val_split_of_training_images_is_refused_before_training(coco: Path, val):
    """Val pointed at the training annotations, or listing training images (the same files once symbolic links are
    followed), gave mAP on training images without a word; classification and segmentation refused such splits."""
    refusal = VAL_SPLITS[val]
    paths = {key: str(path) for key, path in val(coco).items()}
    cfg = DetConfig(data=DetDataConfig(data_dir=str(coco), **paths))
    task = DetectionTask(RunContext(cfg, torch.device("cpu"), DistInfo(), coco, None))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the quirky file's missing image
        if refusal is None:
            task.build_datasets()
            return
        with pytest.raises(ValueError, match=refusal):
            task.build_datasets()
