"""COCO annotation files read from JSON and checked before pycocotools sees them.

pycocotools trusts its input: a duplicate id silently replaces an object, an annotation of an image the file
does not list is silently never used, a missing ``area`` or ``iscrowd`` is a KeyError in the middle of
evaluation, and one NaN polygon coordinate makes its rasterizer allocate gigabytes. :func:`read_coco`
therefore checks every record first:

- the file's structure (``images``, ``annotations`` and ``categories`` lists of objects, integer ids, each id
  once, every annotation's ``image_id`` and ``category_id`` an integer that the file lists, ``bbox`` four numbers,
  ``file_name``, ``width``, ``height`` and ``name`` present): a ValueError naming the file and the records (that
  each file_name names another file of the image folder, :func:`check_one_id_per_file` checks with the folder);
- an annotation whose box is not finite is dropped as a whole; of a segmentation, what is not a valid mask of its
  image (polygons of finite numbers, at least 3 points each, within one image size of the image; an RLE of the
  image's size whose counts cover it exactly) is dropped as detectron2 drops it: each invalid polygon alone, the
  object kept while a valid polygon remains; a segmentation left with none (or an invalid RLE) takes the object
  with it when the detector trains on masks, and only itself otherwise: a box detector needs the box alone, and
  evaluation (of any detector) scores every object the file holds, so that box AP is pycocotools' on the file as
  it is; the object keeps the reason as ``mask_problem`` (mask AP ignores it, see
  :func:`~.evaluation.coco_ap`); each returned with the reason, for a warning;
- ``iscrowd`` defaults to 0 and ``area`` to the mask's area (without a mask, the area of the box clipped to its
  image, the box training learns and evaluation scores: :func:`clip_box`), as in COCO's files; an ``area`` the
  file gives is COCO's and stays; an empty or null ``segmentation`` means none (box-only data).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

from ..wording import listed

_SHOWN = 5  # offending records named in one error


def _problems(path: Path, what: str, items: list[str]) -> None:
    """ValueError listing the first few ``items`` when there are any."""
    if items:
        raise ValueError(f"{path}: {len(items)} {what}: {listed(items, _SHOWN)}")


def _is_int(value: Any) -> bool:
    return type(value) is int  # bool is an int subclass but never an id or a size


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _records(path: Path, data: Any, key: str) -> list[dict]:
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise ValueError(f"{path} is not a COCO annotation file: it needs lists images, annotations, categories")
    bad = [f"{key}[{i}] is {type(r).__name__}" for i, r in enumerate(data[key]) if not isinstance(r, dict)]
    _problems(path, f"{key} records are not objects", bad)
    return data[key]


def _check_ids(path: Path, records: list[dict], what: str) -> None:
    """Every record has an integer ``id``, each id once."""
    bad = [f"{what} {i}: id {r.get('id')!r}" for i, r in enumerate(records) if not _is_int(r.get("id"))]
    _problems(path, f"{'categories' if what == 'category' else what + 's'} without an integer 'id' (by position)", bad)
    seen: dict[int, int] = {}
    for r in records:
        seen[r["id"]] = seen.get(r["id"], 0) + 1
    _problems(path, f"{what} ids listed more than once", [f"{i} ({n} times)" for i, n in seen.items() if n > 1])


def _check_images(path: Path, images: list[dict]) -> None:
    _check_ids(path, images, "image")
    bad = []
    for image in images:
        if not isinstance(image.get("file_name"), str) or not image["file_name"]:
            bad.append(f"image {image['id']}: file_name {image.get('file_name')!r}")
        for key in ("width", "height"):
            if type(image.get(key)) is float and image[key].is_integer():  # 64.0, as some exporters write: taken
                image[key] = int(image[key])  # as pycocotools and torchvision take it
            if not _is_int(image.get(key)) or image[key] < 1:
                bad.append(f"image {image['id']}: {key} {image.get(key)!r}")
    _problems(path, "images without a file_name or a positive integer width and height", bad)


def files_named(image_dir: Path, file_names: list[str]) -> list[str]:
    """The file each of ``file_names`` names, as the loader takes it (joined to ``image_dir``: an absolute one stands
    alone), its folders' symbolic links followed: "./01.png", "../train2017/01.png", an absolute path, or a path
    through a symlinked folder give one path. Folders are resolved once each (``os.path.realpath``), not every
    image's path: a file_name that is itself a symlink is not resolved."""
    root = os.fspath(image_dir)
    real_dirs: dict[str, str] = {}
    files: list[str] = []
    for name in file_names:
        folder, base = os.path.split(os.path.join(root, name))
        if folder not in real_dirs:
            real_dirs[folder] = os.path.realpath(folder)
        files.append(os.path.normpath(os.path.join(real_dirs[folder], base)))
    return files


def check_one_id_per_file(path: Path, images: list[dict], image_dir: Path) -> None:
    """ValueError naming the images (id and ``file_name`` as written) whose ``file_name`` names one file of
    ``image_dir`` under more than one id, each of which would be trained or scored once per id.

    A file_name is compared as the file it names (:func:`files_named`: however it is spelled; a file_name that is
    itself a symlink to another listed file is not resolved).
    """
    names_of: dict[str, dict[str, list[int]]] = {}  # file -> file_name as written -> ids
    files = files_named(image_dir, [image["file_name"] for image in images])
    for image, file in zip(images, files, strict=True):
        names_of.setdefault(file, {}).setdefault(image["file_name"], []).append(image["id"])
    twice = [_spellings(names) for names in names_of.values() if sum(map(len, names.values())) > 1]
    _problems(
        path,
        f"files of {image_dir} listed under more than one image id (each would be trained or scored once per id)",
        twice,
    )


def _spellings(names: dict[str, list[int]]) -> str:
    """ "'01.png' under ids 1, 9 and './01.png' under id 4": each file_name of one file with its image ids."""
    return " and ".join(
        f"{name!r} under id{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}" for name, ids in names.items()
    )


def _check_categories(path: Path, categories: list[dict]) -> None:
    """Said before the annotations' references to them (with none listed, each annotation's would be named)."""
    if not categories:
        raise ValueError(f"{path} has no categories; COCO files list them under 'categories'")
    _check_ids(path, categories, "category")
    bad = [f"category {c['id']}: name {c.get('name')!r}" for c in categories if not isinstance(c.get("name"), str)]
    _problems(path, "categories without a name", bad)


def _check_annotations(path: Path, annotations: list[dict], image_ids: set[int], category_ids: set[int]) -> None:
    """Structure only: references, the box's type, iscrowd and area; the values are judged by ``_invalid_part``."""
    _check_ids(path, annotations, "annotation")
    bad = []
    for ann in annotations:
        where = f"annotation {ann['id']}"
        for key, ids, what in (("image_id", image_ids, "an image"), ("category_id", category_ids, "a category")):
            if not _is_int(ann.get(key)):
                bad.append(f"{where}: {key} {ann.get(key)!r} is not an integer id")
            elif ann[key] not in ids:
                bad.append(f"{where}: {key} {ann[key]!r} is not {what} of the file")
        box = ann.get("bbox")
        if not isinstance(box, list) or len(box) != 4 or not all(map(_is_number, box)):
            bad.append(f"{where}: bbox {box!r} is not [x, y, width, height] (four numbers)")
        if ann.setdefault("iscrowd", 0) not in (0, 1):
            bad.append(f"{where}: iscrowd {ann['iscrowd']!r} is not 0 or 1")
        area = ann.pop("area", None) if ann.get("area") is None else ann["area"]  # null or absent: computed
        if area is not None and not (_is_number(area) and area >= 0):  # NaN fails >= too
            bad.append(f"{where}: area {area!r} is not a number >= 0 (leave it out to have it computed)")
    _problems(path, "annotations that do not fit the file or COCO's format", bad)


def rle_counts(text: str) -> list[int] | None:
    """The run lengths of a compressed COCO RLE string (pycocotools' ``rleFrString``), None if it is malformed."""
    counts: list[int] = []
    i = 0
    while i < len(text):
        value, shift, more = 0, 0, True
        while more:
            c = ord(text[i]) - 48 if i < len(text) else -1
            if not 0 <= c < 64:
                return None
            value |= (c & 0x1F) << shift
            more = bool(c & 0x20)
            i, shift = i + 1, shift + 5
            if not more and c & 0x10:
                value |= -1 << shift  # sign extension
        counts.append(value + (counts[-2] if len(counts) > 2 else 0))  # runs after the third are deltas
    return counts


def _rle_problem(rle: dict, height: int, width: int) -> str | None:
    if rle.get("size") != [height, width]:
        return f"RLE size {rle.get('size')!r} is not the image's [height, width] [{height}, {width}]"
    counts = rle.get("counts")
    if isinstance(counts, str):
        counts = rle_counts(counts)
    elif not (isinstance(counts, list) and all(map(_is_int, counts))):
        counts = None
    if counts is None:
        return "RLE counts are neither a list of integers nor a compressed RLE string"
    if any(c < 0 for c in counts) or sum(counts) != height * width:
        return f"RLE counts cover {sum(counts)} pixels with runs >= 0, not the image's {height * width}"
    return None


def segmentation_problem(segmentation: Any, height: int, width: int) -> str | None:
    """Why ``segmentation`` is not a valid mask of a ``height`` x ``width`` image, or None if it is.

    Polygons must be lists of finite numbers, x, y pairs of at least 3 points, within one image size of the
    image (pycocotools rasterizes a NaN or a huge coordinate with gigabytes of memory); an RLE must have the
    image's size and runs that cover it exactly (pycocotools decodes shorter ones into uninitialized memory).
    The first problem is named: of a list of polygons, the first invalid polygon's.
    """
    if isinstance(segmentation, dict):
        return _rle_problem(segmentation, height, width)
    if not isinstance(segmentation, list):
        return f"segmentation is {type(segmentation).__name__}, not polygons or an RLE"
    return next(filter(None, (_polygon_problem(polygon, height, width) for polygon in segmentation)), None)


def _polygon_problem(polygon: Any, height: int, width: int) -> str | None:
    """Why one polygon of a segmentation is not valid (:func:`segmentation_problem`), or None."""
    xy = np.asarray(polygon) if isinstance(polygon, list) else np.empty(0, dtype=object)
    if xy.ndim != 1 or xy.dtype.kind not in "iuf":
        return f"polygon {str(polygon)[:40]} is not a list of numbers"
    if len(xy) < 6 or len(xy) % 2:
        return f"polygon of {len(xy)} numbers (x, y pairs of at least 3 points)"
    points = xy.reshape(-1, 2)  # [N, 2] x, y
    if not ((points >= (-width, -height)) & (points <= (2 * width, 2 * height))).all():  # False for NaN too
        if not np.isfinite(xy).all():
            return f"polygon with a non-finite coordinate {str(polygon)[:60]}"
        return f"polygon reaching far outside the {height}x{width} (HxW) image"
    return None


def clip_box(bbox: list[float], width: int, height: int) -> list[float] | None:
    """A COCO box (x, y, w, h) as xyxy clipped to its ``width`` x ``height`` image; None when no area is left.

    The one rule for what training learns and evaluation scores (:func:`~.evaluation.scoring_ground_truth`), and
    for the area computed for a box without a mask.
    """
    x, y, w, h = bbox
    box = np.clip([x, y, x + w, y + h], 0, [width, height, width, height])
    return None if box[2] <= box[0] or box[3] <= box[1] else box.tolist()


def _computed_area(coco: COCO, ann: dict) -> float:
    """COCO's area of an annotation without one: its mask's pixels, else its box's inside the image."""
    if "segmentation" in ann:
        return float(mask_utils.area(coco.annToRLE(ann)))
    image = coco.imgs[ann["image_id"]]
    box = clip_box(ann["bbox"], image["width"], image["height"])
    return 0.0 if box is None else (box[2] - box[0]) * (box[3] - box[1])


def _invalid_part(ann: dict, image: dict, masks: bool) -> tuple[bool, str] | None:
    """What of ``ann`` is invalid, removed from it in place: None when nothing is, else (whether the whole object
    goes, why).

    A non-finite box takes the object with it. Invalid polygons go one by one (detectron2's rule); a segmentation
    left with no valid polygon, or an invalid RLE, takes the object with it when ``masks`` (Mask R-CNN trains on the
    mask), else only itself, its reason kept as ``mask_problem`` (a box detector trains on the box alone; evaluation
    scores the box and ignores the object for mask AP).
    """
    if not all(math.isfinite(v) for v in ann["bbox"]):
        return True, f"box {ann['bbox']} is not finite"
    segmentation = ann.get("segmentation")
    if segmentation in ([], None):
        ann.pop("segmentation", None)  # converters write [] for box-only data
        return None
    height, width = image["height"], image["width"]
    if isinstance(segmentation, list):
        problems = [_polygon_problem(polygon, height, width) for polygon in segmentation]
        bad = [problem for problem in problems if problem is not None]
        if not bad:
            return None
        valid = [polygon for polygon, problem in zip(segmentation, problems, strict=True) if problem is None]
        if valid:
            ann["segmentation"] = valid
            return False, f"{len(bad)} of {len(segmentation)} polygons dropped: {bad[0]}"
        problem = bad[0]
    else:
        problem = segmentation_problem(segmentation, height, width)
        if problem is None:
            return None
    if masks:
        return True, f"segmentation: {problem}"
    del ann["segmentation"]
    ann["mask_problem"] = problem
    return False, f"segmentation dropped, the box kept (box training and box AP need no mask): {problem}"


def read_coco(path: Path, masks: bool = False) -> tuple[COCO, list[tuple[int, str]], list[tuple[int, str]]]:
    """Read, check and index a COCO annotation file.

    Args:
        path: the file.
        masks: the objects are for training a detector on their masks (Mask R-CNN): an object left without a valid
            polygon (or with an invalid RLE) is dropped; else its box is kept, without the segmentation and with
            ``mask_problem`` (why). Evaluation reads the file with ``masks=False`` whatever the detector: pycocotools
            scores every object of the file.

    Returns:
        (pycocotools' index of the checked file, the annotations dropped as (annotation id, reason), the annotations
        kept without an invalid part of their segmentation as (annotation id, what went and why))

    Raises:
        ValueError: a file that is not JSON, does not fit COCO's format (naming it and the records) or lists no
            category.
    """
    try:
        data = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"{path} is not a COCO annotation file: {type(e).__name__}: {e}") from None
    images, annotations, categories = (_records(path, data, k) for k in ("images", "annotations", "categories"))
    _check_images(path, images)
    _check_categories(path, categories)
    by_id = {image["id"]: image for image in images}
    _check_annotations(path, annotations, set(by_id), {c["id"] for c in categories})
    dropped, trimmed = [], []
    for ann in annotations:
        invalid = _invalid_part(ann, by_id[ann["image_id"]], masks)
        if invalid is not None:
            (dropped if invalid[0] else trimmed).append((ann["id"], invalid[1]))
    gone = {i for i, _ in dropped}
    coco = COCO()
    coco.dataset = {**data, "annotations": [a for a in annotations if a["id"] not in gone]}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        coco.createIndex()
    for ann in coco.anns.values():
        if "area" not in ann:
            ann["area"] = _computed_area(coco, ann)
    return coco, dropped, trimmed
