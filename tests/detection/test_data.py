"""COCO loading on a 6-image file with the quirks real files have (see detkit.make_quirky_coco)."""

import json
import re
import warnings
from pathlib import Path

import pytest
import torch
from detkit import SIZE, edit_coco
from PIL import Image
from torchvision import tv_tensors
from torchvision.ops import masks_to_boxes

from swinlite.detection import data
from swinlite.detection.config import DetDataConfig
from swinlite.detection.data import CocoDetection, categories_of, load_split, split_paths
from swinlite.detection.transforms import (
    build_eval_transform,
    build_train_transform,
    resize_problem,
    smallest_train_resize,
)
from swinlite.images import LeftOut


def _train_split(coco: Path, verify: bool = False):
    with pytest.warns(UserWarning) as record:
        split = load_split(*split_paths(DetDataConfig(data_dir=str(coco)), "train"), verify=verify)
    return split, " ".join(str(w.message) for w in record)


def test_missing_unreadable_and_wrongly_sized_images_are_skipped_with_their_ids(coco: Path):
    split, message = _train_split(coco)
    assert split.image_ids == [1, 2, 3, 4, 6]  # 5's file is missing; 6's header reads
    assert f"5 ({coco / 'train2017' / '05.png'}): missing file" in message
    folder = coco / "train2017"
    (folder / "03.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")  # not even its header reads
    Image.new("RGB", (SIZE - 8, SIZE)).save(folder / "02.png")  # 40x48, annotated 48x48
    exif = Image.Exif()
    exif[0x0112] = 6  # turned 90 degrees: 48x40 as stored and annotated, 40x48 upright (as load_rgb reads it)
    Image.new("RGB", (SIZE, SIZE - 8)).save(folder / "04.png", exif=exif)
    edit_coco(coco, "train", lambda c: c["images"][3].update(width=SIZE, height=SIZE - 8))
    split, message = _train_split(coco)
    assert split.image_ids == [1, 6]
    assert f"3 ({folder / '03.png'}): unreadable (" in message
    assert f"2 ({folder / '02.png'}): the file is 48x40 (HxW) but its annotation says 48x48" in message
    assert f"4 ({folder / '04.png'}): the file is 48x40 (HxW) after its EXIF orientation" in message
    assert "its annotation says 40x48" in message
    split, message = _train_split(coco, verify=True)  # every file decoded
    assert split.image_ids == [1]
    assert f"6 ({folder / '06.png'}): unreadable (OSError: image file is truncated" in message


def test_targets_map_categories_drop_crowds_clip_boxes_keep_negatives(coco: Path):
    split, _ = _train_split(coco)
    categories = categories_of(split)
    assert (categories.ids, categories.names) == ([3, 7], ["square", "bar"])
    # the file as given, not its name alone: a train and a val ann.json in two folders read alike
    file = re.escape(str(coco / "annotations" / "instances_train2017.json"))
    clipped = rf"2 annotations of {file} dropped or clipped.*6: box .* \(clipped\).*7: empty box"
    with pytest.warns(UserWarning, match=clipped):
        dataset = CocoDetection(split, categories, masks=True)
    by_id = {split.image_ids[i]: dataset[i][1] for i in range(4)}
    assert by_id[1]["labels"].tolist() == [1, 2]  # category 3 -> label 1, category 7 -> label 2
    torch.testing.assert_close(by_id[1]["boxes"], torch.tensor([[4.0, 4.0, 20.0, 20.0], [26.0, 8.0, 34.0, 38.0]]))
    assert by_id[2]["labels"].tolist() == [1]  # the crowd object is not a training target
    assert by_id[3]["boxes"].shape == (0, 4) and by_id[3]["masks"].shape == (0, SIZE, SIZE)  # the negative
    torch.testing.assert_close(by_id[4]["boxes"], torch.tensor([[36.0, 6.0, 48.0, 30.0]]))  # clipped to 48
    # polygon masks decoded by pycocotools cover their boxes
    assert by_id[1]["masks"].shape == (2, SIZE, SIZE)
    expected = torch.tensor([[4.0, 4, 19, 19], [26, 8, 33, 37]])  # masks_to_boxes gives the last pixel, not its end
    torch.testing.assert_close(masks_to_boxes(by_id[1]["masks"]), expected)


def test_each_image_is_cleaned_once_for_the_label_mapping_and_every_dataset(coco: Path, monkeypatch):
    """categories_of's warning and each dataset cleaned every annotation again before: seconds of each start on
    COCO's 118k images."""
    split, _ = _train_split(coco)
    cleaned = []
    clean = data._clean_annotations
    monkeypatch.setattr(data, "_clean_annotations", lambda s, i: cleaned.append(i) or clean(s, i))
    with pytest.warns(UserWarning, match="dropped or clipped") as record:
        training = CocoDetection(split, categories_of(split))
        evaluation = CocoDetection(split, categories_of(split), evaluation=True)
    assert sorted(cleaned) == split.image_ids
    assert sum("dropped or clipped" in str(w.message) for w in record) == 2  # each dataset still says it
    assert training.objects == evaluation.objects == [clean(split, i)[0] for i in split.image_ids]


def test_an_image_broken_after_the_scan_is_replaced_in_training_and_left_out_in_evaluation(coco: Path):
    split, _ = _train_split(coco)  # image 6 (index 4) passes the scan: its header reads
    with pytest.warns(UserWarning):
        training = CocoDetection(split, categories_of(split))
        evaluation = CocoDetection(split, categories_of(split), evaluation=True)
    with pytest.warns(UserWarning, match=r"image id 6 \(.*06\.png\) skipped: unreadable \(OSError"):
        _, target = training[4]
    assert target["image_id"] == 1  # the next one, wrapping around
    with pytest.warns(UserWarning, match=r"image id 6 \(.*06\.png\) left out of the evaluation: unreadable"):
        left = evaluation[4]  # scoring another image in its place would be wrong
    assert isinstance(left, LeftOut) and (left.index, Path(left.path).name) == (4, "06.png")


@pytest.mark.parametrize("width", [SIZE, 64])  # a wide image: a box's canvas (height, width) read the other way round
def test_flip_and_resize_move_boxes_and_masks_together(coco: Path, width: int):
    Image.new("RGB", (width, SIZE)).save(coco / "train2017" / "01.png")
    edit_coco(coco, "train", lambda c: c["images"][0].update(width=width))
    split, _ = _train_split(coco)
    with pytest.warns(UserWarning):
        dataset = CocoDetection(split, categories_of(split), masks=True)
    dataset.transform = build_train_transform(DetDataConfig(hflip=1.0, train_sizes=(96, 96)))
    image, target = dataset[0]
    assert image.shape == (3, 96, 2 * width) and image.dtype == torch.float32
    # flipped horizontally (x -> width - x) and scaled x2: the 4..20 square goes to 2 * (width - 20) .. 2 * (width - 4)
    torch.testing.assert_close(target["boxes"][0], torch.tensor([2 * width - 40.0, 8.0, 2 * width - 8.0, 40.0]))
    torch.testing.assert_close(masks_to_boxes(target["masks"]) + torch.tensor([0, 0, 1, 1]), target["boxes"])


def test_collate_keeps_each_target_with_its_image(coco: Path):
    split, _ = _train_split(coco)
    with pytest.warns(UserWarning):
        dataset = CocoDetection(split, categories_of(split), evaluation=True)
    with pytest.warns(UserWarning, match="left out of the evaluation"):
        items = [dataset[0], dataset[4], dataset[1]]  # image ids 1, 6 (unreadable), 2
    images, targets, left_out = data.collate(items)
    assert [image is item[0] for image, item in zip(images, items[::2], strict=True)] == [True, True]
    assert [target["image_id"] for target in targets] == [1, 2] and [item.index for item in left_out] == [4]
    torch.testing.assert_close(targets[1]["boxes"], torch.tensor([[20.0, 20.0, 38.0, 38.0]]))  # image 2's object


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda root: (root / "annotations" / "instances_train2017.json").unlink(),
            "annotation file .* does not exist",
        ),
        (lambda root: (root / "train2017").rename(root / "elsewhere"), "image folder .* does not exist"),
        (lambda root: _rewrite(root, categories=[], annotations=[]), "has no categories"),
        (lambda root: _rewrite(root, categories=[]), "has no categories; COCO files list them under 'categories'$"),
        (lambda root: _rewrite(root, images=[], annotations=[]), "no image of .* was found"),
        (lambda root: (root / "annotations" / "instances_train2017.json").write_text("{"), "is not a COCO annotation"),
    ],
)
def test_bad_files_are_one_clear_error(coco: Path, edit, message):
    edit(coco)
    with pytest.raises(ValueError, match=message):
        load_split(*split_paths(DetDataConfig(data_dir=str(coco)), "train"))


def _rewrite(root: Path, **changes) -> None:
    path = root / "annotations" / "instances_train2017.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def test_large_scale_jitter_gives_a_test_size_square_with_boxes_and_masks_together(coco: Path):
    split, _ = _train_split(coco)
    with pytest.warns(UserWarning):
        dataset = CocoDetection(split, categories_of(split), masks=True)
    dataset.transform = build_train_transform(DetDataConfig(lsj=True, test_size=64, hflip=0.0, mean=(0.5,) * 3))
    torch.manual_seed(0)
    for _ in range(3):
        image, target = dataset[0]
        assert image.shape == (3, 64, 64)
        if len(target["boxes"]):
            expected = masks_to_boxes(target["masks"]) + torch.tensor([0, 0, 1, 1])
            torch.testing.assert_close(expected, target["boxes"], atol=1.0, rtol=0)


def _val_split(coco: Path):
    with pytest.warns(UserWarning):
        return load_split(*split_paths(DetDataConfig(data_dir=str(coco)), "val"))


def test_data_must_use_the_label_mappings_categories_by_id_and_name(coco: Path):
    """Silently wrong before: val (or evaluation) data whose category 7 is a cat was scored as the model's bar."""
    train, _ = _train_split(coco)
    categories = categories_of(train)
    edit_coco(coco, "val", lambda d: d["categories"][1].update(name="cat"))
    message = (
        r"instances_val2017.json has categories \(id name\) that the training annotation file "
        r".*instances_train2017.json lacks: 7 'cat' \(there 'bar'\); it has 3 'square', 7 'bar'"
    )
    with pytest.raises(ValueError, match=message):
        CocoDetection(_val_split(coco), categories)

    def only_squares(data: dict) -> None:  # fewer categories is fine: a subset of the classes
        data["categories"] = data["categories"][:1]
        data["annotations"] = [a for a in data["annotations"] if a["category_id"] == 3]

    edit_coco(coco, "val", only_squares)
    with pytest.warns(UserWarning):
        assert len(CocoDetection(_val_split(coco), categories)) == 5


def test_a_category_name_given_to_two_ids_is_named_in_a_warning(coco: Path):
    """Two ids named 'square' trained as two classes that the checkpoint's names, detect.py's drawings and its
    detections.json named alike, without a word."""
    edit_coco(coco, "train", lambda d: d["categories"][1].update(name="square"))
    train, _ = _train_split(coco)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        categories = categories_of(train)
    said = [str(w.message) for w in caught if "more than one id" in str(w.message)]
    assert len(said) == 1 and said[0].endswith("(name: ids): 'square': 3, 7"), said
    assert categories.names == ["square", "square"]


def test_mask_rcnn_data_needs_a_segmentation_on_every_object(coco: Path):
    """A KeyError in a loader worker before, after the model was built."""
    edit_coco(coco, "train", lambda d: d["annotations"][1].pop("segmentation"))
    split, _ = _train_split(coco)
    message = r"1 objects of .* have no segmentation \(annotation ids \[2\]\)"
    with pytest.warns(UserWarning), pytest.raises(ValueError, match=message):
        CocoDetection(split, categories_of(split), masks=True)
    with pytest.warns(UserWarning):
        assert CocoDetection(split, categories_of(split))[0][1]["labels"].tolist() == [1, 2]  # boxes are enough


@pytest.mark.parametrize("lsj", [False, True])
def test_the_resize_rule_is_what_the_train_transforms_refuse_at_their_smallest_draw(lsj: bool):
    """A 1 x 4000 training image crashed the train transform's resize in a loader worker."""
    cfg = DetDataConfig(train_sizes=(40, 56), size_step=8, test_size=48, max_size=96, lsj=lsj, mean=(0.5,) * 3)
    short, long = smallest_train_resize(cfg)
    resize = build_train_transform(cfg).transforms[1]  # RandomShortestSize, or ScaleJitter
    if lsj:
        resize.scale_range = (0.1, 0.1)  # its smallest draw
    else:
        resize.min_size = [40]
    for height, width in [(1, 4000), (1, 96), (1, 97), (2, 193), (3, 100), (9, 96), (10, 96), (4, 4), (500, 7)]:
        try:
            resize(tv_tensors.Image(torch.zeros(3, height, width, dtype=torch.uint8)))
            refused = False
        except RuntimeError:
            refused = True
        assert (resize_problem(height, width, short, long) is not None) == refused, (height, width)


def test_training_resizes_as_the_detector_does_and_lsj_pads_with_the_mean():
    """A shrunk training image was antialiased (torchvision's default) where the detector's own resize in evaluation
    is not; large-scale jitter padded with black (-2.1 once normalised) where the detector pads with the mean."""
    image = torch.randint(0, 256, (3, 96, 128), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    resize = build_train_transform(DetDataConfig()).transforms[1]
    resize.min_size, resize.max_size = [24], 1000
    resized = resize(tv_tensors.Image(image)).float()
    theirs = torch.nn.functional.interpolate(image[None].float(), size=resized.shape[-2:], mode="bilinear")[0]
    torch.testing.assert_close(resized, theirs.round(), rtol=0, atol=1.0)
    transform = build_train_transform(DetDataConfig(lsj=True, test_size=48, hflip=0.0, mean=(0.2, 0.4, 0.6)))
    transform.transforms[1].scale_range = (0.5, 0.5)  # a 24 px image in the 48 px square
    boxes = tv_tensors.BoundingBoxes(torch.tensor([[0.0, 0, 8, 8]]), format="XYXY", canvas_size=(64, 64))
    padded, _ = transform(
        tv_tensors.Image(torch.full((3, 64, 64), 200, dtype=torch.uint8)), {"boxes": boxes, "labels": torch.tensor([1])}
    )
    pad = (padded * 255).round().flatten(1).unique(dim=1).tolist()
    assert pad == [[51.0, 200.0], [102.0, 200.0], [153.0, 200.0]]  # the mean colour and the image's


def test_evaluation_images_are_scaled_to_0_1_as_training_images_are():
    image = torch.tensor([0, 51, 255], dtype=torch.uint8).expand(3, 2, 3)
    evaluated = build_eval_transform()(tv_tensors.Image(image))
    assert type(evaluated) is torch.Tensor and evaluated.dtype == torch.float32
    torch.testing.assert_close(evaluated, torch.tensor([0.0, 0.2, 1.0]).expand(3, 2, 3))


def test_the_default_train_resize_is_mmdetections_1x_single_scale():
    """mmdetection's Swin-T 1x (coco_instance.py): Resize to (1333, 800), keep ratio, and a flip; the multi-scale
    480-800 the defaults drew is its 3x recipe's."""
    resize = build_train_transform(DetDataConfig()).transforms[1]
    assert list(resize.min_size) == [800] and resize.max_size == 1333
    image = resize(tv_tensors.Image(torch.zeros(3, 480, 640, dtype=torch.uint8)))
    assert tuple(image.shape[-2:]) == (800, 1066)  # torchvision truncates 1066.7
