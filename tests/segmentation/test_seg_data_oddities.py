"""Oddities of hand-made label-map folders that the scan once took without a word, and pairs that the loading,
collating and transforms must keep together."""

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors

from swinlite.images import LeftOut
from swinlite.segmentation.config import SegDataConfig
from swinlite.segmentation.data import (
    Labels,
    Pair,
    SegmentationDataset,
    Split,
    collate,
    find_pairs,
    labels_of,
    open_mask,
    read_labels,
    scan_split,
    warn_unlearned,
    warn_unmeasured,
)
from swinlite.segmentation.transforms import PadTo, RandomRescale


def test_two_images_of_one_name_are_an_error_naming_both(seg_folder: Path):
    """00.jpg beside 00.png were both paired with the one mask 00.png: 7 train pairs for 6 pictures, and val scored
    that mask twice."""
    images, masks = seg_folder / "images" / "validation", seg_folder / "annotations" / "validation"
    Image.open(images / "00.png").convert("RGB").save(images / "00.jpg")
    both = r"00\.(png|jpg) and .*00\.(jpg|png)"
    with pytest.raises(ValueError, match=rf"two images for one name in .*validation: .*{both}"):
        find_pairs(images, masks)


def test_one_image_per_name_is_paired_once(seg_folder: Path):
    images, masks = seg_folder / "images" / "training", seg_folder / "annotations" / "training"
    pairs, missing = find_pairs(images, masks)
    assert sorted(p.image.name for p in pairs) == [f"{n:02d}.png" for n in range(6)] and not missing


LABELS = labels_of(SegDataConfig(dataset="folder", classes=["background", "road", "car"]))


def _split_of_labels(root: Path, values: list[int], labels: Labels = LABELS) -> Split:
    """A scanned split of 4x4 pairs, one per value of ``values``, each mask that value (and a row of 255, ignored)."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for n, value in enumerate(values):
        Image.new("RGB", (4, 4)).save(root / "images" / f"{n}.png")
        mask = np.full((4, 4), value, np.uint8)
        mask[0] = 255
        Image.fromarray(mask).save(root / "masks" / f"{n}.png")
    return scan_split(root / "images", root / "masks", labels)


REDUCED = labels_of(SegDataConfig(dataset="folder", classes=["road", "car", "bus"], reduce_zero_label=True))


def _mmsegmentation_labels(stored: np.ndarray, ignore_index: int) -> np.ndarray:
    """mmsegmentation's ``reduce_zero_label`` (``LoadAnnotations`` on uint8 masks), its 255 then written as
    ``ignore_index``: a reduced label equal to ``ignore_index`` is ignored as well (its losses and metrics compare
    ``ignore_index`` with the reduced labels)."""
    label = stored.astype(np.uint8)
    label[label == 0] = 255
    label = label - 1
    label[label == 254] = 255
    return np.where(label == 255, ignore_index, label).astype(np.int64)


@pytest.mark.parametrize(
    ("ignore_index", "stored"),
    [(3, [[0, 1, 2, 3], [3, 3, 2, 1], [4, 255, 4, 1]]), (255, [[0, 1, 2, 3], [3, 3, 2, 1], [0, 255, 255, 1]])],
    ids=["ignore_index-the-class-count", "ignore_index-255"],
)
def test_reduce_zero_label_reads_masks_as_mmsegmentation(tmp_path: Path, ignore_index: int, stored: list[list[int]]):
    """ignore_index was compared with the stored values: with ignore_index 3, the class count, every pixel of the last
    class (stored 3) was ignored, without an error or a warning, and the stored 4 (the label 3) was an unknown value.
    mmsegmentation reduces first and applies ignore_index to the reduced labels."""
    labels = labels_of(
        SegDataConfig(dataset="folder", classes=["a", "b", "c"], ignore_index=ignore_index, reduce_zero_label=True)
    )
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    Image.new("RGB", (4, 3)).save(tmp_path / "images" / "x.png")
    Image.fromarray(np.array(stored, np.uint8)).save(tmp_path / "masks" / "x.png")
    expected = _mmsegmentation_labels(np.array(stored), ignore_index)
    assert np.array_equal(read_labels(tmp_path / "masks" / "x.png", labels), expected)
    split = scan_split(tmp_path / "images", tmp_path / "masks", labels)
    assert split.classes_present() == {0, 1, 2} and split.labelled == np.count_nonzero(expected != ignore_index)


@pytest.mark.parametrize("bits", [2, 4])
def test_a_2_or_4_bit_grayscale_png_mask_reads_its_stored_labels(tmp_path: Path, bits: int):
    """Pillow reads such a mask as L scaled to 0..255: label 1 of a 4-bit file read 17, label 3 of a 2-bit one 255
    (the default ignore_index), valid class ids with 35 classes or more, without a word."""
    stored = np.arange(2**bits, dtype=np.uint8).reshape(2, -1)  # every value the file can hold
    Image.fromarray(stored).save(tmp_path / "mask.png", bits=bits)  # (H, W) uint8: L
    with Image.open(tmp_path / "mask.png") as mask:
        assert mask.mode == "L" and mask.tile[0].args == f"L;{bits}"  # really stored with this bit depth
    values = open_mask(tmp_path / "mask.png")
    assert values.dtype == np.uint8 and np.array_equal(values, stored)


def test_a_bilevel_png_mask_reads_labels_0_and_1(tmp_path: Path):
    """Pillow reads a mode 1 file as booleans: its labels are 0 and 1, never 255 (the default ignore_index)."""
    stored = np.array([[0, 1, 1, 0], [1, 0, 0, 1]], dtype=bool)
    Image.fromarray(stored).save(tmp_path / "mask.png")
    with Image.open(tmp_path / "mask.png") as mask:
        assert mask.mode == "1"
    values = open_mask(tmp_path / "mask.png")
    assert values.dtype == np.uint8 and values.tolist() == [[0, 1, 1, 0], [1, 0, 0, 1]]


def _pair(root: Path, name: str, grey: int, label: int, mask_size: tuple[int, int] = (4, 5)) -> Pair:
    """A 4x5 (HxW) image of one ``grey`` and its mask of one ``label``, ``mask_size`` (height, width)."""
    Image.new("RGB", (5, 4), (grey,) * 3).save(image := root / f"{name}.png")
    Image.fromarray(np.full(mask_size, label, np.uint8)).save(mask := root / f"{name}_mask.png")
    return Pair(image, mask)


def test_a_pair_whose_mask_changed_size_after_the_scan_is_replaced_in_training_and_left_out_in_evaluation(
    tmp_path: Path,
):
    """The segmentation counterpart of detection's image broken after the scan: a mask replaced by one of another size
    gave a pair whose image and mask disagree."""
    pairs = [_pair(tmp_path, "0", 10, 1, mask_size=(3, 5)), _pair(tmp_path, "1", 20, 2)]
    with pytest.warns(UserWarning, match=r"0\.png, .*0_mask\.png skipped: the image is 5x4, the mask 5x3$"):
        image, mask = SegmentationDataset(pairs, LABELS)[0]
    assert (int(image[0, 0, 0]), mask.unique().tolist()) == (20, [2])  # the next pair, whole
    with pytest.warns(UserWarning, match=r"0\.png, .*0_mask\.png left out of the evaluation: the image is 5x4"):
        left = SegmentationDataset(pairs, LABELS, evaluation=True)[0]  # scoring another pair in its place is wrong
    assert isinstance(left, LeftOut) and (left.index, left.path) == (0, str(pairs[0].image))


def test_collate_keeps_each_mask_with_its_image(tmp_path: Path):
    dataset = SegmentationDataset([_pair(tmp_path, str(n), 10 * n, n) for n in range(3)], LABELS)
    images, masks, left_out = collate([dataset[0], LeftOut(1, "1.png", "unreadable"), dataset[2]])
    assert images.shape == (2, 3, 4, 5) and masks.shape == (2, 4, 5) and [item.index for item in left_out] == [1]
    assert images[:, 0, 0, 0].tolist() == [0, 20] and masks[:, 0, 0].tolist() == [0, 2]


def test_pad_to_pads_at_the_bottom_and_right_the_mask_with_ignore_index():
    image = tv_tensors.Image(torch.full((3, 2, 3), 7, dtype=torch.uint8))
    mask = tv_tensors.Mask(torch.tensor([[0, 1, 2], [2, 1, 0]]))
    padded_image, padded_mask = PadTo((4, 5), ignore_index=9)(image, mask)
    expected_image, expected_mask = torch.zeros(3, 4, 5, dtype=torch.uint8), torch.full((4, 5), 9)
    expected_image[:, :2, :3], expected_mask[:2, :3] = 7, mask
    assert torch.equal(padded_image, expected_image) and torch.equal(padded_mask, expected_mask)


def test_a_rescaled_mask_holds_only_the_labels_it_held():
    """Resized by nearest neighbour: a bilinear resize, rounded, made labels between two neighbours' (1 and 2 between
    0 and 3)."""
    mask = tv_tensors.Mask(torch.tensor([[0, 3, 3, 255, 0, 0], [0, 0, 3, 255, 255, 3], [3, 3, 0, 0, 255, 0], [0] * 6]))
    image = tv_tensors.Image(torch.zeros(3, 4, 6, dtype=torch.uint8))
    _, rescaled = RandomRescale((15, 10), (1.0, 1.0))(image, mask)  # x 2.5: min(15 / 6, 10 / 4)
    nearest = torch.nn.functional.interpolate(mask[None, None].float(), size=(10, 15), mode="nearest")[0, 0].long()
    assert torch.equal(rescaled, nearest) and rescaled.unique().tolist() == [0, 3, 255]


IGNORED_255 = (
    "; 25.0% of the masks' pixels are ignore_index 255, no class: if the missing classes' pixels are among them, store "
    "each as its class id (binary masks saved as 0/255 store their foreground as 255: store it as 1)"
)
BINARY = labels_of(SegDataConfig(dataset="folder", classes=["background", "object"]))


@pytest.mark.parametrize(
    ("labels", "values", "absent", "warn", "note"),
    [
        (LABELS, [0, 1], "2: car; the model never learns them", warn_unlearned, IGNORED_255),
        (
            REDUCED,
            [0, 1, 2],
            "2: bus; the model never learns them",
            warn_unlearned,
            "; 50.0% of the masks' pixels are ignored, stored as [0, 255, 256] (data.reduce_zero_label=true: any "
            "other stored value v is class v - 1)",  # the 0 masks and the rows of 255
        ),
        (
            LABELS,
            [0, 2],
            "1: road; no IoU is measured for them: a pixel predicted as one gives it IoU 0 in the mIoU",
            lambda split, *args: warn_unmeasured(split, "val", *args),
            IGNORED_255,
        ),
        # masks of 0 and 255 (the object): "no train mask holds a pixel of 1: object" read as nonsense to their user
        (BINARY, [0], "1: object; the model never learns them", warn_unlearned, IGNORED_255),
    ],
    ids=["train", "train-reduce_zero_label", "val", "binary-0-255"],
)
def test_a_class_without_a_pixel_is_named(
    tmp_path: Path, labels: Labels, values: list[int], absent: str, warn: Callable, note: str
):
    """A class in no train mask was never learnt, one in no val mask never scored (its IoU 0 in the mIoU when
    predicted), without a word. The share of ignored pixels follows, with the likely cause: binary masks saved as
    0/255, whose foreground the default ignore_index 255 ignores."""
    split = _split_of_labels(tmp_path, values, labels)
    classes = len(labels.classes)
    with pytest.warns(
        UserWarning,
        match=rf"no \w+ mask \(.*masks\) holds a pixel of 1 of the {classes} classes \(id: name\): {absent}",
    ) as record:
        warn(split, tmp_path / "masks", labels)
    assert str(record[0].message).endswith(note)


def test_no_ignored_share_is_told_where_no_pixel_is_ignored():
    split = Split([Pair(Path("0.png"), Path("0.png"), (4, 4), 16, (0, 1))], labelled=16)
    with pytest.warns(UserWarning) as record:
        warn_unlearned(split, Path("masks"), LABELS)
    assert str(record[0].message).endswith("2: car; the model never learns them")


def test_no_class_warning_when_every_class_has_a_pixel(tmp_path: Path):
    split = _split_of_labels(tmp_path, [0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_unlearned(split, tmp_path / "masks", LABELS)
        warn_unmeasured(split, "val", tmp_path / "masks", LABELS)


def test_absent_classes_past_ten_are_counted(tmp_path: Path):
    many = labels_of(SegDataConfig(dataset="folder", classes=[f"c{i}" for i in range(14)]))
    split = _split_of_labels(tmp_path, [0, 1], many)
    with pytest.warns(
        UserWarning, match=r"12 of the 14 classes \(id: name\): 2: c2; 3: c3; .* 11: c11; and 2 more; the"
    ):
        warn_unlearned(split, tmp_path / "masks", many)
