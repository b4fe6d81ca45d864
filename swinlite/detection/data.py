"""COCO-format detection data: checked on load, cleaned once, served as tv_tensors.

``load_split`` reads one annotation file (checked record by record first, see :mod:`.annotations`) and checks it
against its image folder before training starts: a missing file or folder, a file that does not fit COCO's format, a
file without categories, a file of the image folder listed under two image ids (its file_name spelled alike or not:
"01.png", "../train2017/01.png", an absolute path), or a split left without images is a ValueError, and so is an
image folder where more of the images found have a size the file does not record (neither upright nor as stored)
than the size it records: the file and the folder likely do not belong together (another split's or dataset's files
of the same names); an image whose file is missing, whose header (with ``verify``, whole file) does not decode or
whose size (EXIF orientation applied) is not the annotation's, and an annotation with a non-finite box (or, for Mask
R-CNN, no valid mask), are skipped with a warning naming their ids (an invalid polygon alone is dropped, the object
kept). The two splits are kept apart: ``check_own_annotations`` refuses a val split that reads the training
annotation file, before either is read, and ``check_splits_apart`` one that holds any training image (the same file
once symbolic links are followed), naming how many and the first few.
``CocoDetection`` then serves ``(image, target)`` pairs as torchvision's detectors take them: category ids (which
need not be contiguous) become labels 1..K (0 is the background; a file with categories the label mapping lacks is a
ValueError), ``iscrowd`` objects are left out (COCOeval handles them in evaluation), boxes reaching outside the
image are clipped and empty ones dropped, each with a warning naming the annotation id; images without objects
stay, as negatives. ``categories_of`` (the training split's label mapping) warns of the categories without a
training object (non-crowd, its box at least 1 px in its image) on a kept image: classes the detector never
learns.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from pycocotools.coco import COCO
from torch.utils.data import Dataset
from torchvision import tv_tensors

from ..files import check_folder, expected_data_dir, stored_size
from ..images import LeftOut, load_rgb, readable_item, split_left_out, unreadable, upright_size
from ..wording import listed
from .annotations import check_one_id_per_file, clip_box, files_named, read_coco
from .categories import Categories
from .config import DetDataConfig
from .transforms import resize_problem

_MAX_LISTED = 10  # ids named in one warning
_SHOWN_SIZES = 3  # images named in the error of a folder that does not belong to its annotation file
_SHOWN_SHARED = 5  # val images named in the error of splits that share images


@dataclass
class CocoSplit:
    """One annotation file, its image folder, and the images kept (those whose file exists)."""

    coco: COCO
    image_dir: Path
    image_ids: list[int]
    skipped: list[tuple[int, str]]  # (image id, reason)
    ann_file: Path
    _cleaned: dict[int, tuple[list[dict], list]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def image_path(self, image_id: int) -> Path:
        """The file of image ``image_id`` (its ``file_name`` in the image folder)."""
        return self.image_dir / self.coco.imgs[image_id]["file_name"]

    def cleaned(self, image_id: int) -> tuple[list[dict], list]:
        """:func:`_clean_annotations` of image ``image_id``, cleaned once: :func:`warn_unlearned` and each dataset of
        the split read the same (on COCO's 118k images, a second cleaning took seconds of every start)."""
        if image_id not in self._cleaned:
            self._cleaned[image_id] = _clean_annotations(self, image_id)
        return self._cleaned[image_id]


def split_paths(cfg: DetDataConfig, split: str, option: str = "--data-dir (data.data_dir)") -> tuple[Path, Path]:
    """(annotation file, image folder) of ``split`` ("train" or "val"): the config's, else the COCO 2017 layout.
    ``option``: what the caller names ``data_dir`` by, for the error.

    Raises:
        ValueError: ``data_dir``, which a path is taken from, is a file (an archive not yet unpacked), not a folder.
    """
    root = Path(cfg.data_dir)
    ann, images = getattr(cfg, f"{split}_ann"), getattr(cfg, f"{split}_images")
    if not (ann and images) and root.is_file():
        raise ValueError(f"{option} {root} is a file; expected {_expected_root(cfg, split)}")
    return (
        Path(ann) if ann else root / "annotations" / f"instances_{split}2017.json",
        Path(images) if images else root / f"{split}2017",
    )


def check_data_root(cfg: DetDataConfig, split: str, option: str = "--data-dir (data.data_dir)") -> None:
    """ValueError naming ``data_dir`` itself, and the layout, where it is no folder (missing, or a file) and ``split``'s
    paths are taken from it (not the first path inside it that is missing); the digits demo writes it. ``option``: as
    :func:`split_paths`."""
    if not (getattr(cfg, f"{split}_ann") and getattr(cfg, f"{split}_images")) and cfg.dataset != "digits":
        check_folder(cfg.data_dir, option, _expected_root(cfg, split))


def _expected_root(cfg: DetDataConfig, split: str) -> str:
    """What ``data_dir`` should be, for the errors of :func:`split_paths` and :func:`check_data_root`
    (:func:`~swinlite.files.expected_data_dir`: an unset path of the two named by its key)."""
    if cfg.dataset == "digits":
        return "a folder for the digits demo to write its images and annotations into"
    layout = {"ann": f"annotations/instances_{split}2017.json", "images": f"{split}2017/"}
    return expected_data_dir(cfg, split, layout, "COCO 2017")


def _warn_ids(what: str, items: list[tuple[int | str, str]]) -> None:
    if items:
        named = listed([f"{i}: {reason}" for i, reason in items], _MAX_LISTED)
        warnings.warn(f"{len(items)} {what}: {named}", stacklevel=3)


def _image_problem(path: Path, info: dict, verify: bool) -> tuple[str, bool] | None:
    """Why the image ``info`` describes cannot be used, or None: a missing file, a header (with ``verify``, the
    whole file) that does not decode, or a size other than the annotation's; and whether that size is the
    annotation's neither upright nor as stored (the file of another image, not one turned by its EXIF orientation).
    The reason does not name the file: the caller does (the warning, eval.json's ``path``)."""
    if not path.is_file():
        return "missing file", False
    try:
        size = upright_size(path, decode=verify)
    except Exception as e:  # PIL raises many exception types for bad files
        return unreadable(e), False
    problem = _size_problem(path, size, info)
    return None if problem is None else (problem, stored_size(path) != (info["height"], info["width"]))


def _size_problem(path: Path, size: tuple[int, int], info: dict) -> str | None:
    """Why an image of (height, width) ``size`` does not fit its annotation ``info``, or None."""
    if size == (info["height"], info["width"]):
        return None
    turned = stored_size(path) != size
    why = " after its EXIF orientation (boxes are read on the upright image, as load_rgb gives it)" if turned else ""
    return f"the file is {size[0]}x{size[1]} (HxW){why} but its annotation says {info['height']}x{info['width']}"


def _scan_images(coco: COCO, image_dir: Path, verify: bool) -> tuple[list[int], list[tuple[int, str]], list[int]]:
    """(ids of the images that can be used, (id, reason) of those that cannot, ids of those whose file has a size
    the annotation records neither upright nor as stored) of ``coco``'s images in ``image_dir``."""
    kept, skipped, foreign = [], [], []
    for image_id in sorted(coco.imgs):
        info = coco.imgs[image_id]
        problem = _image_problem(image_dir / info["file_name"], info, verify)
        if problem is None:
            kept.append(image_id)
        else:
            skipped.append((image_id, problem[0]))
            if problem[1]:
                foreign.append(image_id)
    return kept, skipped, foreign


def _check_belong_together(split: CocoSplit, foreign: list[int]) -> None:
    """ValueError when more of the images found have a size the annotation file does not record than the size it
    records: the folder likely holds other images of the same names (another split's, another dataset's), whose
    boxes the file does not give. A few such images alone are skipped with a warning, as broken ones are."""
    if len(foreign) <= len(split.image_ids):
        return
    reasons = dict(split.skipped)
    shown = "; ".join(f"{i} ({split.image_path(i)}): {reasons[i]}" for i in foreign[:_SHOWN_SIZES])
    raise ValueError(
        f"the annotation file {split.ann_file} and the image folder {split.image_dir} likely do not belong together: "
        f"{len(foreign)} of the {len(foreign) + len(split.image_ids)} images found have a size the file does not "
        f"record (image id (file): reason: {shown}), {len(split.image_ids)} the size it records; give the image "
        "folder this annotation file was made for, or the annotation file of these images"
    )


def check_split_paths(ann_file: Path, image_dir: Path) -> None:
    """ValueError naming a missing annotation file or image folder."""
    if not ann_file.is_file():
        raise ValueError(f"annotation file {ann_file} does not exist (COCO format: images, annotations, categories)")
    if not image_dir.is_dir():
        raise ValueError(f"image folder {image_dir} does not exist (it holds the images {ann_file} names)")


def _warn_other_split(ann_file: Path, image_dir: Path) -> None:
    """A warning when the annotation file is named for one COCO split and the image folder for another
    (``instances_val2017.json`` with ``train2017/``): where both splits have files of the same names and sizes (the
    digits demo's 64x64 canvases), the size check cannot tell, and the file's boxes would be another image's."""
    ann = re.fullmatch(r"instances_((?:train|val|test)\d{4})\.json", ann_file.name)
    images = re.fullmatch(r"(?:train|val|test)\d{4}", image_dir.name)
    if ann and images and ann[1] != images[0]:
        warnings.warn(
            f"the annotation file {ann_file} is named for the split {ann[1]}, the image folder {image_dir} for "
            f"{images[0]}: if the folder is not the one the file was made for, its boxes are another image's",
            stacklevel=3,
        )


def load_split(ann_file: Path, image_dir: Path, verify: bool = False, masks: bool = False) -> CocoSplit:
    """Read and check one COCO annotation file against its image folder.

    ``verify`` decodes every image (else its header only); ``masks``: for a detector that trains on masks (see
    :func:`.annotations.read_coco`: an object with no valid mask left is dropped, not only its mask).

    Raises:
        ValueError: a missing annotation file or image folder, a file that does not fit COCO's format, a file
            without categories, a file of the image folder listed under two image ids (however its file_name
            spells it), an image folder that likely does not belong to the file (more images found of a
            size the file does not record than of the size it records), or no image left.
    """
    check_split_paths(ann_file, image_dir)
    _warn_other_split(ann_file, image_dir)
    coco, dropped, trimmed = read_coco(ann_file, masks)
    check_one_id_per_file(ann_file, coco.dataset["images"], image_dir)
    _warn_ids(f"annotations of {ann_file} dropped (annotation id: reason)", dropped)
    _warn_ids(f"annotations of {ann_file} kept without invalid segmentation parts (annotation id: what)", trimmed)
    kept, skipped, foreign = _scan_images(coco, image_dir, verify)
    split = CocoSplit(coco, image_dir, kept, skipped, ann_file)
    _check_belong_together(split, foreign)
    named = [(f"{i} ({split.image_path(i)})", reason) for i, reason in skipped]
    _warn_ids(f"images of {ann_file} skipped (image id (file): reason)", named)
    if not kept:
        raise ValueError(f"no image of {ann_file} was found in {image_dir}; nothing to train or evaluate on")
    return split


def check_own_annotations(train_ann: Path, val_ann: Path) -> None:
    """ValueError where the val split reads the training split's annotation file (the same file once symbolic links
    are followed), whatever the image folders: its images are the training images, or the folder holds other images
    than the file was made for. Checked before either file is read."""
    real = os.path.realpath(val_ann)
    if os.path.realpath(train_ann) == real:
        spelled = f"{train_ann}; " if train_ann != val_ann else ""
        raise ValueError(
            f"the val annotation file {val_ann} is the training one ({spelled}real path {real}): each split needs "
            "images of its own (scores of training images say nothing of unseen ones); give data.val_ann a file of "
            "other images"
        )


def _real_files(split: CocoSplit) -> list[str]:
    """The real path of each kept image of ``split`` (in ``image_ids``' order): its folders' symbolic links followed
    (:func:`.annotations.files_named`), and its own where the file is one."""
    files = files_named(split.image_dir, [split.coco.imgs[i]["file_name"] for i in split.image_ids])
    return [os.path.realpath(file) if os.path.islink(file) else file for file in files]


def check_splits_apart(train: CocoSplit, val: CocoSplit) -> None:
    """ValueError where kept images of the val split are kept images of the training split: the same files once
    symbolic links are followed (the same image folder and ``file_name``, a folder or a file linked to the other
    split's), whatever the image ids. Training's val mAP would be measured on images it trained on, without a word.

    Raises:
        ValueError: naming how many and the first few (val image id and file).
    """
    trained = set(_real_files(train))
    shared = [i for i, file in zip(val.image_ids, _real_files(val), strict=True) if file in trained]
    if shared:
        named = listed([f"{i} ({val.image_path(i)})" for i in shared], _SHOWN_SHARED)
        raise ValueError(
            f"{len(shared)} of the {len(val.image_ids)} val images of {val.ann_file} are training images of "
            f"{train.ann_file} (images in {train.image_dir}) once symbolic links are followed (val image id (file): "
            f"{named}): each split needs images of its own (scores of training images say nothing of unseen ones); "
            "leave them out of one of the two annotation files, or give val an image folder of its own "
            "(data.val_images)"
        )


def without_thin_images(split: CocoSplit, short: float, long: float) -> CocoSplit:
    """``split`` without the images too thin to resize toward a ``short`` short side with the long side at most
    ``long`` (:func:`.transforms.resize_problem`), named in one warning.

    Raises:
        ValueError: no image is left.
    """
    thin = []
    for image_id in split.image_ids:
        info = split.coco.imgs[image_id]
        problem = resize_problem(info["height"], info["width"], short, long)
        if problem:
            thin.append((image_id, problem))
    _warn_ids(f"images of {split.ann_file} left out (image id: reason)", thin)
    if len(thin) == len(split.image_ids):
        raise ValueError(f"the detector can resize no image of {split.ann_file}: {thin[0][1]}")
    left_out = {i for i, _ in thin}
    kept = [i for i in split.image_ids if i not in left_out]
    return dataclasses.replace(split, image_ids=kept, skipped=split.skipped + thin)


def categories_of(split: CocoSplit) -> Categories:
    """The label mapping a detector learns from ``split``: every category its file lists, in id order; a warning
    names those without an object to learn (:func:`warn_unlearned`)."""
    ids = sorted(split.coco.cats)
    warn_unlearned(split)
    names = [split.coco.cats[i]["name"] for i in ids]
    shared = {n: [i for i, m in zip(ids, names, strict=True) if m == n] for n in names if names.count(n) > 1}
    _warn_ids(
        f"names of categories of {split.ann_file} given to more than one id: the checkpoint's class names, detect.py's "
        "drawings and detections.json's category names cannot tell them apart (name: ids)",
        [(repr(n), ", ".join(map(str, i))) for n, i in shared.items()],
    )
    return Categories(ids, names, f"the training annotation file {split.ann_file}")


def warn_unlearned(split: CocoSplit) -> None:
    """One warning naming the categories of ``split`` that no learnable object of its kept images has: the detector
    gets a class for each that it never learns. Learnable: a non-crowd annotation whose box, clipped to its image
    (:func:`_clean_annotations`), is at least 1 px wide and high there. Training resizes seldom shrink a COCO image
    (800 px short side), and the train transform's ``SanitizeBoundingBoxes(min_size=1.0)`` drops a smaller box with
    its label; a box of 1 px or more that a smaller training size shrinks below it is still learned at the others."""
    learned = {o["category_id"] for i in split.image_ids for o in split.cleaned(i)[0] if _at_least_a_pixel(o)}
    unlearned = [(i, repr(cat["name"])) for i, cat in sorted(split.coco.cats.items()) if i not in learned]
    what = "without an object to learn from (a non-crowd box of at least 1 px in a kept image)"
    _warn_ids(
        f"categories of {split.ann_file} {what}: the detector gets a class for each that it never learns "
        "(category id: name)",
        unlearned,
    )


def _at_least_a_pixel(obj: dict) -> bool:
    """Whether the clipped box of ``obj`` is at least 1 px wide and high in its image."""
    x1, y1, x2, y2 = obj["box"]
    return x2 - x1 >= 1 and y2 - y1 >= 1


def check_categories(categories: Categories, split: CocoSplit) -> None:
    """ValueError unless every category of ``split`` is one of ``categories``, under the same name.

    A detector knows the categories it was trained on; data with others would be scored (or trained) against
    labels that mean something else. Data with fewer categories is fine (COCOeval scores those it lists).
    """
    known = dict(zip(categories.ids, categories.names, strict=True))
    others = [
        f"{i} {cat['name']!r}" + (f" (there {known[i]!r})" if i in known else "")
        for i, cat in sorted(split.coco.cats.items())
        if known.get(i) != cat["name"]
    ]
    if others:
        mine = ", ".join(f"{i} {n!r}" for i, n in zip(categories.ids, categories.names, strict=True))
        raise ValueError(
            f"{split.ann_file} has categories (id name) that {categories.source} lacks: {', '.join(others[:10])}; "
            f"it has {mine[:300]}"
        )


def _clean_annotations(split: CocoSplit, image_id: int) -> tuple[list[dict], list]:
    """Training objects of one image with boxes as xyxy clipped to the image; what was dropped or clipped."""
    info = split.coco.imgs[image_id]
    width, height = info["width"], info["height"]
    kept, problems = [], []
    for ann in split.coco.imgToAnns.get(image_id, []):
        if ann["iscrowd"]:
            continue
        x, y, w, h = ann["bbox"]
        box = clip_box(ann["bbox"], width, height)
        image = f"image {image_id} of {height}x{width} (HxW)"
        if box is None:
            problems.append((ann["id"], f"empty box {ann['bbox']} in {image} (skipped)"))
        else:
            if (x < -1 or y < -1 or x + w > width + 1 or y + h > height + 1) and w > 0 and h > 0:
                problems.append((ann["id"], f"box {ann['bbox']} outside {image} (clipped)"))
            kept.append(dict(ann, box=box))
    return kept, problems


class CocoDetection(Dataset):
    """``(image [3, H, W], target)`` pairs from a checked split: the image as read (a ``tv_tensors.Image``, uint8
    0..255), float in 0..1 after ``transform`` (:func:`~swinlite.detection.transforms.build_train_transform`,
    ``build_eval_transform``).

    ``target`` holds ``boxes`` [N, 4] (xyxy pixels), ``labels`` [N] (1..K), ``image_id`` and, with
    ``masks=True``, ``masks`` [N, H, W] (uint8, from polygons or RLE).

    Args:
        split: from :func:`load_split`.
        categories: the label mapping (the training split's, or the checkpoint's).
        transform: a ``torchvision.transforms.v2`` transform of ``(image, target)``.
        masks: decode instance masks (Mask R-CNN); every object must have a segmentation.
        evaluation: an image that became unreadable after :func:`load_split` gives ``(None, {"image_id": id})``
            (the evaluation leaves it out) instead of the next image (what training serves).

    Raises:
        ValueError: ``split`` has categories ``categories`` lacks (:func:`check_categories`), or with ``masks``,
            objects without a segmentation.
    """

    def __init__(
        self,
        split: CocoSplit,
        categories: Categories,
        transform=None,
        masks: bool = False,
        evaluation: bool = False,
    ) -> None:
        check_categories(categories, split)
        self.split, self.categories, self.transform, self.masks = split, categories, transform, masks
        self.evaluation = evaluation
        self.objects, problems = [], []
        for image_id in split.image_ids:
            kept, bad = split.cleaned(image_id)
            self.objects.append(kept)
            problems += bad
        _warn_ids(f"annotations of {split.ann_file} dropped or clipped (annotation id: reason)", problems)
        bare = [o["id"] for objects in self.objects for o in objects if "segmentation" not in o]
        if masks and bare:
            raise ValueError(
                f"Mask R-CNN trains on instance masks, but {len(bare)} objects of {split.ann_file} have no "
                f"segmentation (annotation ids {bare[:10]}); add masks or train a box detector"
            )

    def __len__(self) -> int:
        return len(self.split.image_ids)

    def _target(self, index: int, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        objects, image_id = self.objects[index], self.split.image_ids[index]
        boxes = torch.tensor([o["box"] for o in objects], dtype=torch.float32).reshape(-1, 4)
        target = {
            "boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=size),
            "labels": torch.tensor([self.categories.label_of(o["category_id"]) for o in objects], dtype=torch.int64),
            "image_id": image_id,
        }
        if self.masks:
            masks = [self.split.coco.annToMask(o) for o in objects]
            stacked = np.stack(masks) if masks else np.zeros((0, *size), dtype=np.uint8)  # [N, H, W]
            target["masks"] = tv_tensors.Mask(torch.from_numpy(stacked))
        return target

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | LeftOut:
        return readable_item(self._item, index, len(self), self.evaluation)

    def _item(self, index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | LeftOut:
        """(image, target) of image ``index``; a :class:`~swinlite.images.LeftOut` with a warning when its file
        became unreadable, or changed size, after :func:`load_split` checked it."""
        image_id = self.split.image_ids[index]
        info = self.split.coco.imgs[image_id]
        path = self.split.image_path(image_id)
        try:
            image = load_rgb(path)
            problem = _size_problem(path, (image.height, image.width), info)
        except Exception as e:  # PIL raises many exception types for bad files
            problem = unreadable(e)
        if problem is not None:
            done = "left out of the evaluation" if self.evaluation else "skipped"
            warnings.warn(f"image id {image_id} ({path}) {done}: {problem}", stacklevel=3)
            return LeftOut(index, str(path), problem)
        image, target = tv_tensors.Image(image), self._target(index, (info["height"], info["width"]))
        return self.transform(image, target) if self.transform else (image, target)


def collate(batch: list[tuple[torch.Tensor, dict] | LeftOut]) -> tuple[list[torch.Tensor], list[dict], list[LeftOut]]:
    """(images, targets, left out): detection batches stay lists (images differ in size); then the records of the
    images an evaluation could not read."""
    read, left_out = split_left_out(batch)
    return [image for image, _ in read], [target for _, target in read], left_out
