"""Label-map data: image files and mask files of the same names, checked once before training, served as tv_tensors.

Layout (ADE20K's, for every dataset; ``data.train_images`` ... point anywhere else)::

    <data_dir>/images/training/<name>.jpg       <data_dir>/annotations/training/<name>.png
    <data_dir>/images/validation/<name>.jpg     <data_dir>/annotations/validation/<name>.png

A mask is a PNG (or any losslessly stored image file; JPEG and JPEG-compressed TIFF are refused, and WebP, which
Pillow reads as colour) of the same relative name as its image, palette (``P``) or grayscale (``L``, 16-bit ``I;16``),
whose pixel values are the labels. ``scan_split`` reads every mask once before anything trains:

- an image without a mask, an unreadable image or mask, and a mask whose size differs from its image's after the
  image's EXIF orientation (masks are read against the upright image) are skipped, each named in one warning line;
  a split left without pairs is an error;
- a mask of another mode (RGB colour masks; a grayscale one stored as RGB or with an alpha channel) or in JPEG or
  WebP, and label values that are neither a class nor ``ignore_index`` are errors (one line naming the values and a
  file): they mean the masks, the classes or the ignore index are wrong;
- two images (``0.jpg`` and ``0.png``) or two masks of one name are an error naming both files;
- a linked folder or file that leads into the other split's image or mask folder is skipped, with a warning naming
  the link and its target (training on validation images, or scoring training images, would go unnoticed);
- a class without a pixel in any mask of a split is named in one warning (:func:`warn_unlearned`,
  :func:`warn_unmeasured`).
"""

from __future__ import annotations

import glob
import os
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import tv_tensors
from torchvision.transforms.v2.functional import pil_to_tensor

from ..colours import color_map
from ..files import SkippedLink, check_folder, expected_data_dir, overlap, stored_size
from ..images import (
    IMAGE_EXTENSIONS,
    LeftOut,
    is_image_file,
    list_files,
    load_rgb,
    readable_item,
    split_left_out,
    unreadable,
    upright_size,
)
from ..wording import listed
from .classes import ADE20K_CLASSES, ADE20K_PALETTE
from .config import SegDataConfig

MASK_MODES = ("P", "L", "1", "I;16", "I;16L", "I;16B", "I")  # label maps: one integer per pixel
# their compression turns a label edge into a band of other label values; TIFFs are judged by their compression
LOSSY_FORMATS = ("JPEG", "MPO")
LOSSY_TIFF = ("jpeg", "tiff_jpeg")
# a 2- or 4-bit grayscale PNG (its rawmode): Pillow reads it as L, scaled to 0..255, a stored v as v * step
_PNG_GRAY_STEPS = {"L;2": 85, "L;4": 17}
DEFAULT_FOLDERS = {"train": ("images/training", "annotations/training"),
                   "val": ("images/validation", "annotations/validation")}  # fmt: skip
SHAPES_CLASSES = ("background", "circle", "square", "triangle", "cross")  # the demo's (.demo_data)
_LISTED = 10  # files named in one warning


@dataclass(frozen=True)
class Labels:
    """What the label values mean: class ``i`` is ``classes[i]`` drawn in ``palette[i]``; ``ignore_index`` is no
    class; with ``reduce_zero_label`` a file's 0 becomes ``ignore_index`` and every other value ``v`` is ``v - 1``,
    before ``ignore_index`` is applied (:func:`to_labels`)."""

    classes: tuple[str, ...]
    palette: tuple[tuple[int, int, int], ...]
    ignore_index: int = 255
    reduce_zero_label: bool = False


def labels_of(cfg: SegDataConfig) -> Labels:
    """The label meaning of ``cfg.dataset``: ADE20K's 150 classes (zero label reduced), the demo's 5, or
    ``data.classes``. ValueError when ``data.classes`` is missing (or names one class) for a folder or given for the
    others, and for a ``data.reduce_zero_label`` that contradicts ADE20K's or the demo's own."""
    if cfg.dataset == "folder":
        if not cfg.classes:
            raise ValueError("data.dataset=folder needs data.classes, the name of each label value, e.g. "
                             "data.classes=[background,road,car]")  # fmt: skip
        if len(cfg.classes) == 1:  # the background left out, or a class of every pixel
            background = (
                f"the background (label 0) counts as one: name it too, e.g. data.classes=[background,{cfg.classes[0]}]"
            )
            reduced = "with data.reduce_zero_label=true label 0 is ignored, and the labels 1, 2, ... each need a name"
            zero = reduced if cfg.reduce_zero_label else background
            raise ValueError(f"data.classes names 1 class ({cfg.classes[0]}); expected at least 2, the name of each "
                             f"label value: {zero}")  # fmt: skip
        duplicates = sorted({c for c in cfg.classes if cfg.classes.count(c) > 1})
        if duplicates:
            raise ValueError(f"data.classes names {', '.join(duplicates)} more than once")
        classes, reduce = tuple(cfg.classes), bool(cfg.reduce_zero_label)
    else:
        if cfg.classes:
            raise ValueError(f"data.classes is for data.dataset=folder; {cfg.dataset} has its own classes")
        classes, reduce = (ADE20K_CLASSES, True) if cfg.dataset == "ade20k" else (SHAPES_CLASSES, False)
        if cfg.reduce_zero_label not in (None, reduce):  # it was ignored, and config.yaml recorded it
            raise ValueError(
                f"data.reduce_zero_label={str(cfg.reduce_zero_label).lower()} is for data.dataset=folder; "
                f"{cfg.dataset} reads its labels its own way (reduce_zero_label={str(reduce).lower()}): drop it"
            )
    if cfg.ignore_index < len(classes):  # a label, after the zero label's reduction: to_labels
        stored = f", stored as 1..{len(classes)} with data.reduce_zero_label=true" if reduce else ""
        zero = "; to ignore the stored value 0, set data.reduce_zero_label=true (class i stored as i + 1)"
        raise ValueError(
            f"data.ignore_index={cfg.ignore_index} is a class label (0..{len(classes) - 1}{stored}); expected "
            f"{len(classes)} or more{zero if cfg.ignore_index == 0 and not reduce else ''}"
        )
    palette = ADE20K_PALETTE if cfg.dataset == "ade20k" else tuple(color_map(len(classes)))
    return Labels(classes, palette, cfg.ignore_index, reduce)


def split_folders(cfg: SegDataConfig, split: str, option: str = "--data-dir (data.data_dir)") -> tuple[Path, Path]:
    """(image folder, mask folder) of ``split`` ("train" or "val"): the config's, else the ADE20K layout's.
    ``option``: what the caller names ``data_dir`` by, for the error.

    Raises:
        ValueError: ``data_dir``, which a folder is taken from, is a file (an archive not yet unpacked), not a folder.
    """
    images, masks = getattr(cfg, f"{split}_images"), getattr(cfg, f"{split}_masks")
    default_images, default_masks = DEFAULT_FOLDERS[split]
    root = Path(cfg.data_dir)
    if not (images and masks) and root.is_file():
        raise ValueError(f"{option} {root} is a file; expected {_expected_root(cfg, split)}")
    return Path(images) if images else root / default_images, Path(masks) if masks else root / default_masks


def check_data_root(cfg: SegDataConfig, split: str, option: str = "--data-dir (data.data_dir)") -> None:
    """ValueError naming ``data_dir`` itself, and the layout, where it is no folder (missing, or a file) and ``split``'s
    folders are taken from it (not the first folder inside it that is missing); the shapes demo writes it. ``option``:
    as :func:`split_folders`."""
    if not (getattr(cfg, f"{split}_images") and getattr(cfg, f"{split}_masks")) and cfg.dataset != "shapes":
        check_folder(cfg.data_dir, option, _expected_root(cfg, split))


def _expected_root(cfg: SegDataConfig, split: str) -> str:
    """What ``data_dir`` should be, for the errors of :func:`split_folders` and :func:`check_data_root`
    (:func:`~swinlite.files.expected_data_dir`: an unset folder of the two named by its key)."""
    if cfg.dataset == "shapes":
        return "a folder for the shapes demo to write its images and masks into"
    layout = {key: f"{folder}/" for key, folder in zip(("images", "masks"), DEFAULT_FOLDERS[split], strict=True)}
    return expected_data_dir(cfg, split, layout, "ADE20K")


@dataclass(frozen=True)
class Pair:
    """An image and its mask; after :func:`scan_split`, also the image's upright (height, width), how many of its
    mask's pixels carry a class (what :func:`without_thin_pairs` and :func:`check_labelled` judge it by) and which
    classes they are (:func:`warn_unlearned`, :func:`warn_unmeasured`)."""

    image: Path
    mask: Path
    size: tuple[int, int] | None = None
    labelled: int = 0
    classes: tuple[int, ...] = ()  # the class ids (after reduce_zero_label) of at least one pixel


@dataclass
class Split:
    """The pairs kept, those skipped (path, reason), how many pixels carry a class, and the links the scan skipped
    (into the other split, or a loop: :func:`find_pairs`)."""

    pairs: list[Pair]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    labelled: int = 0
    links: list[SkippedLink] = field(default_factory=list)

    def classes_present(self) -> set[int]:
        """The class ids of at least one pixel of a kept pair's mask."""
        return {c for pair in self.pairs for c in pair.classes}

    def pixels(self) -> int:
        """The pixels of the kept pairs' masks (after :func:`scan_split`, which records their sizes); those that do not
        carry a class (:attr:`labelled`) are ignored: a value of neither kind is the scan's error."""
        return sum(pair.size[0] * pair.size[1] for pair in self.pairs if pair.size)


def check_split_folders(image_dir: Path, mask_dir: Path) -> None:
    """ValueError naming a missing image or mask folder and the layout."""
    for folder, what in ((image_dir, "image"), (mask_dir, "mask")):
        if not folder.is_dir():
            raise ValueError(f"{what} folder {folder} does not exist (the layout: images/<split>/*.jpg with "
                             "annotations/<split>/*.png of the same names)")  # fmt: skip


def find_pairs(
    image_dir: Path, mask_dir: Path, apart: Sequence[Path] = (), links: list[SkippedLink] | None = None
) -> tuple[list[Pair], list[tuple[str, str]]]:
    """Images with the mask of the same relative name (without suffix); images without one, as skipped.
    ``apart``: the other split's folders, which a link in either folder may not lead into (:func:`_by_name`); the
    links skipped, in either folder, are added to ``links`` where given.

    Raises:
        ValueError: a missing folder, image and mask folders that both share files with ``apart``
            (:func:`_check_pairs_apart`), a folder without images, or two masks (or two images) for one name.
    """
    check_split_folders(image_dir, mask_dir)
    _check_pairs_apart(image_dir, mask_dir, apart)
    masks = _by_name(mask_dir, "masks", apart, links)
    images = _by_name(image_dir, "images", apart, links)
    if not images:
        raise ValueError(f"no image files under {image_dir}")
    pairs, missing = [], []
    for key, image in images.items():
        mask = masks.get(key)
        if mask is None:
            missing.append((str(image), _no_mask(key, mask_dir)))
        else:
            pairs.append(Pair(image, mask))
    return pairs, missing


def _no_mask(key: Path, mask_dir: Path) -> str:
    """Why the image of relative name ``key`` (without suffix) is skipped: no mask of that name, and the file of that
    name that is there but not read as a mask (its extension no image file's: ``a.gif``), where there is one."""
    there = sorted(p.name for p in (mask_dir / key.parent).glob(f"{glob.escape(key.name)}.*")
                   if p.stem == key.name and p.is_file() and not is_image_file(p))  # fmt: skip
    missing = f"no mask {key.with_suffix('.png')} in {mask_dir}"
    if not there:
        return missing
    read = ", ".join(IMAGE_EXTENSIONS)
    return f"{missing} ({there[0]} is there: masks are read from {read} files only; save it as PNG)"


def _check_pairs_apart(image_dir: Path, mask_dir: Path, apart: Sequence[Path]) -> None:
    """ValueError where the image folder and the mask folder both share their files with folders of ``apart`` (the
    other split's) once symbolic links are followed: the pairs would be the other split's (``images/validation`` and
    ``annotations/validation`` linked to the training folders scored training images as val's). One of the two alone
    may be shared: one image folder with a mask folder per split (VOC's ``JPEGImages``), or one mask folder for both."""
    images, masks = overlap(image_dir, apart), overlap(mask_dir, apart)
    if images is not None and masks is not None:
        real = ", ".join(os.path.realpath(p) for p in (image_dir, mask_dir, images, masks))
        raise ValueError(
            f"{image_dir} and {mask_dir} share their files with {images} and {masks} once symbolic links are followed "
            f"(real paths {real}): each split needs pairs of its own (scores of training images say nothing of "
            "unseen ones)"
        )


def _by_name(folder: Path, what: str, apart: Sequence[Path], links: list[SkippedLink] | None) -> dict[Path, Path]:
    """The image files under ``folder`` by relative name without suffix (what pairs an image with its mask).

    A linked folder or file into one of ``apart`` is skipped with a warning naming it (:func:`list_files`), and added
    to ``links`` where given; every name is listed, links to one file included (one mask file may serve several
    images through links).

    Raises:
        ValueError: two files of one name (``0.jpg`` and ``0.png``): which of them the other file pairs with is
            not known, and both would be paired with it.
    """
    found: dict[Path, Path] = {}
    for path in (p for p in list_files(folder, apart, every_name=True, skipped=links) if is_image_file(p)):
        key = path.relative_to(folder).with_suffix("")
        if key in found:
            raise ValueError(f"two {what} for one name in {folder}: {found[key]} and {path} (an image and its mask "
                             "pair by name without suffix; keep one of them)")  # fmt: skip
        found[key] = path
    return found


class MaskModeError(ValueError):
    """A mask file that is an image of another kind (colour), not a label map."""


def open_mask(path: Path) -> np.ndarray:
    """The label values of a mask file as stored, [H, W] (uint8, uint16 or int32).

    Raises:
        MaskModeError: a colour (or other non-label) image, a lossy or WebP file; the message says which, and what
            to save instead (:func:`_not_a_label_map`).
    """
    with Image.open(path) as mask:
        lossy = mask.format in LOSSY_FORMATS or (mask.format == "TIFF" and mask.info.get("compression") in LOSSY_TIFF)
        if lossy:
            what = f"{mask.format} file" + (" (JPEG-compressed)" if mask.format == "TIFF" else "")
            raise MaskModeError(
                f"mask {path} is a {what}, whose lossy compression changes label values along every edge; save masks "
                "losslessly (PNG)"
            )
        if mask.mode not in MASK_MODES:
            raise MaskModeError(f"mask {path} {_not_a_label_map(mask)}")
        # read before decoding; [3]: the rawmode, a plain tuple's item before Pillow 11 (no .args)
        step = _PNG_GRAY_STEPS.get(mask.tile[0][3]) if mask.format == "PNG" else None
        values = np.asarray(mask)  # [H, W]
        if mask.mode == "1":
            return values.astype(np.uint8)
        return values if step is None else values // step  # exact: Pillow reads a stored v as v * step


def _not_a_label_map(mask: Image.Image) -> str:
    """What the open ``mask`` file of a mode not in :data:`MASK_MODES` is instead, and what to do: a WebP file (Pillow
    decodes every WebP, lossless ones too, as RGB or RGBA), a label map with an alpha channel (``LA``, as image editors
    export one; ``PA``), a grayscale one stored as RGB (its R, G and B equal everywhere), a mask of floats
    (``F``: a 32-bit float TIFF), or a colour image."""
    label_map = "a mask is a palette (P) or grayscale (L, I;16) image whose pixel values are the labels"
    if mask.format == "WEBP":
        return (
            f"is a WebP file, which Pillow reads as {mask.mode} (a lossless grayscale one too), not as label values: "
            "WebP masks are not supported; save masks as PNG"
        )
    if mask.mode in ("LA", "PA"):
        kept = mask.mode[0]
        return (
            f"is a {'grayscale' if kept == 'L' else 'palette'} (label) image with an alpha channel ({mask.mode}); "
            f'{label_map}: save it without its alpha channel as PNG, e.g. Image.open(path).convert("{kept}").save(...)'
        )
    if mask.mode in ("RGB", "RGBA"):
        rgb = np.asarray(mask)[..., :3]  # [H, W, 3]
        if (rgb == rgb[..., :1]).all():
            binary = set(np.unique(rgb[..., 0]).tolist()) == {0, 255}
            object_as_1 = "; its values are 0 and 255: store the object as 1 (255 is the default ignore_index)"
            return (
                f"is a grayscale (label) image stored as {mask.mode} (its R, G and B are equal everywhere); "
                f'{label_map}: save it as an L PNG, e.g. Image.open(path).convert("L").save(...)'
                f"{object_as_1 if binary else ''}"
            )
    if mask.mode == "F":
        return f"is a mask of floats (F); {label_map}: save integer label values, e.g. as an L or I;16 PNG"
    return f"is a {mask.mode} image; {label_map} (convert colour-coded masks to label values first)"


def to_labels(values: np.ndarray, labels: Labels) -> np.ndarray:
    """The labels of a mask's stored ``values`` (int64, any shape), where each pixel is a class 0..K-1, or ignored
    where it equals ``ignore_index``: the values themselves, or with ``reduce_zero_label`` mmsegmentation's reduction
    (``label[label == 0] = 255; label = label - 1; label[label == 254] = 255``): 0 and 255 (its ignore value, when no
    class is stored as 255: fewer than 255 classes) become ``ignore_index``, any other ``v`` is ``v - 1``.

    ``ignore_index`` applies to the labels, as mmsegmentation applies it after the reduction: with ``reduce_zero_label``
    the stored value ``ignore_index + 1`` is ignored and ``ignore_index`` itself is class ``ignore_index - 1``
    (reading stored values against it lost the last class with ``ignore_index`` equal to the class count)."""
    if not labels.reduce_zero_label:
        return values
    out = values - 1
    out[(values == 0) | ((values == 255) & (len(labels.classes) < 255))] = labels.ignore_index
    return out


def ignored_values(labels: Labels) -> list[int]:
    """The stored values :func:`to_labels` makes ``ignore_index``: itself, or with ``reduce_zero_label`` 0, 255 (with
    fewer than 255 classes) and ``ignore_index + 1``."""
    if not labels.reduce_zero_label:
        return [labels.ignore_index]
    return sorted({0, labels.ignore_index + 1} | ({255} if len(labels.classes) < 255 else set()))


def read_labels(path: Path, labels: Labels) -> np.ndarray:
    """The labels a model trains on and is scored against: [H, W] int64, :func:`to_labels` of the file's values."""
    return to_labels(open_mask(path).astype(np.int64), labels)


@dataclass
class _Check:
    problem: str | None = None  # why the pair is skipped
    unknown: tuple[int, ...] = ()  # label values (as stored) that are neither a class nor ignore_index
    labelled: int = 0  # pixels of a class
    classes: tuple[int, ...] = ()  # the classes of those pixels
    size: tuple[int, int] | None = None  # the image's, upright


def _image_size(path: Path, size: tuple[int, int]) -> str:
    """``"the image WxH"`` for the image ``path`` of upright (height, width) ``size``, saying so where its EXIF
    orientation turns it: its stored size (:func:`stored_size`) is the other way round."""
    shown = f"the image {size[1]}x{size[0]}"
    if stored_size(path) == size:
        return shown
    return f"{shown} after its EXIF orientation (masks are read against the upright image, as load_rgb gives it)"


def _check_pair(pair: Pair, labels: Labels, verify: bool) -> _Check:
    try:
        size = upright_size(pair.image, verify)
    except Exception as e:  # PIL raises many types for a broken file
        return _Check(unreadable(e))  # the loader's words (the reason goes with the image's path)
    try:
        values = open_mask(pair.mask)
    except MaskModeError:
        raise
    except Exception as e:
        return _Check(f"mask {pair.mask}: {unreadable(e)}")
    if values.shape != size:
        return _Check(f"mask {pair.mask} is {values.shape[1]}x{values.shape[0]}, {_image_size(pair.image, size)}")
    if values.dtype.kind == "u":  # 8 and 16 bits: a bincount is much faster than a sort
        counts = np.bincount(values.ravel())
        present = np.flatnonzero(counts)
        counts = counts[present]
    else:
        present, counts = np.unique(values, return_counts=True)
    mapped = to_labels(present.astype(np.int64), labels)  # as read_labels maps them
    ignored = mapped == labels.ignore_index
    is_class = ~ignored & (mapped >= 0) & (mapped < len(labels.classes))
    unknown = present[~is_class & ~ignored]
    classes = tuple(int(c) for c in mapped[is_class])
    return _Check(None, tuple(int(v) for v in unknown), int(counts[is_class].sum()), classes, size)


def warn_skipped(what: str, items: list[tuple[str, str]]) -> None:
    """One warning naming ``items`` (path, reason), the first ten of them."""
    if items:
        named = listed([f"{path}: {reason}" for path, reason in items], _LISTED)
        warnings.warn(f"{len(items)} {what} skipped: {named}", stacklevel=3)


def scan_split(
    image_dir: Path,
    mask_dir: Path,
    labels: Labels,
    verify: bool = False,
    workers: int = 1,
    apart: Sequence[Path] = (),
) -> Split:
    """Pair and check one split: every mask decoded once (``workers`` threads), every image's size read.
    ``apart``: the other split's image and mask folders, which no link of this split's may lead into (its images
    would be trained on or scored as this split's).

    Raises:
        ValueError: see the module docstring; each names a folder or a file.
    """
    links: list[SkippedLink] = []
    pairs, skipped = find_pairs(image_dir, mask_dir, apart, links)
    with ThreadPoolExecutor(max(1, workers)) as pool:
        checks = list(pool.map(lambda p: _check_pair(p, labels, verify), pairs))
    unknown = sorted({v for c in checks for v in c.unknown})
    if unknown:
        first = next(p.mask for p, c in zip(pairs, checks, strict=True) if c.unknown)
        reduced = (
            f" (as stored: {ignored_values(labels)} are ignored, v is class v - 1)" if labels.reduce_zero_label else ""
        )
        raise ValueError(
            f"{sum(bool(c.unknown) for c in checks)} masks of {mask_dir} hold label values {unknown[:_LISTED]}"
            f"{reduced} that are neither one of the {len(labels.classes)} classes nor ignore_index "
            f"{labels.ignore_index}, e.g. {first}; check data.classes, data.ignore_index and data.reduce_zero_label"
        )
    kept = [
        replace(p, size=c.size, labelled=c.labelled, classes=c.classes)
        for p, c in zip(pairs, checks, strict=True)
        if c.problem is None
    ]
    skipped += [(str(p.image), c.problem) for p, c in zip(pairs, checks, strict=True) if c.problem is not None]
    if not kept:
        raise ValueError(f"no image of {image_dir} has a usable mask in {mask_dir} ({len(skipped)} skipped, "
                         f"e.g. {skipped[0][0]}: {skipped[0][1]})")  # fmt: skip
    return Split(kept, skipped, sum(c.labelled for c in checks), links)


def without_thin_pairs(split: Split, too_thin: Callable[[int, int], str | None], image_dir: Path, hint: str) -> Split:
    """``split`` without the pairs whose image the test settings cannot predict (``too_thin``:
    :func:`swinlite.segmentation.inference.thin_check`, by the size the scan read), named in one warning and added
    to ``skipped``: found before any work, not image by image as an evaluation reads them.

    Raises:
        ValueError: no pair is left (every image too thin: the evaluation would score nothing, its mIoU NaN); its
            message ends with ``hint``, the settings to change.
    """
    thin = [(pair, problem) for pair in split.pairs if pair.size and (problem := too_thin(*pair.size))]
    if not thin:
        return split
    if len(thin) == len(split.pairs):
        raise ValueError(f"the test settings can predict no image of {image_dir}: {thin[0][0].image}: {thin[0][1]}; "
                         f"{hint}")  # fmt: skip
    named = [(str(pair.image), problem) for pair, problem in thin]
    warn_skipped(f"images of {image_dir} too thin for the test settings", named)
    gone = {pair.image for pair, _ in thin}
    return replace(split, pairs=[p for p in split.pairs if p.image not in gone], skipped=split.skipped + named,
                   labelled=split.labelled - sum(pair.labelled for pair, _ in thin))  # fmt: skip


def check_not_too_large(split: Split, too_large: Callable[[int, int], str | None]) -> None:
    """ValueError naming the first image of ``split`` the test settings would predict through a view too large for
    memory (``too_large``: :func:`swinlite.segmentation.inference.large_check`, by the size the scan read): found
    before any work (``--ratios 100`` took all the memory at the first image). The one check of training's val
    split and ``scripts/evaluate_segmentation.py``."""
    large = next(((pair, problem) for pair in split.pairs if pair.size and (problem := too_large(*pair.size))), None)
    if large is not None:
        raise ValueError(f"{large[0].image}: {large[1]}")


def check_labelled(split: Split, what: str, mask_dir: Path, labels: Labels) -> None:
    """ValueError when no mask of ``split`` holds a pixel of a class: every pixel ignored, no confusion count to score
    (the mIoU would be NaN, which picks no best weights) nor, in training, to learn from; named by the stored values
    ignored (:func:`ignored_values`: with ``reduce_zero_label`` 0 too, which "only ignore_index 255" did not say). The
    one check of training (``what``: "train", "val") and ``scripts/evaluate_segmentation.py``."""
    if split.labelled == 0:
        kept = " (the pairs kept)" if split.skipped else ""
        why = (f"stored values {ignored_values(labels)}, which data.reduce_zero_label=true ignores"
               if labels.reduce_zero_label else f"ignore_index {labels.ignore_index}")  # fmt: skip
        raise ValueError(f"the {what} masks ({mask_dir}){kept} hold no pixel of a class, only {why}")


MOSTLY_IGNORED = 0.5  # below this share of pixels holding a class, a training split's labels are likely misread


def warn_mostly_ignored(split: Split, what: str, mask_dir: Path, labels: Labels) -> None:
    """A warning when fewer than :data:`MOSTLY_IGNORED` of ``split``'s mask pixels hold a class: a dataset's labels
    read by another dataset's rules, as the user's own masks trained as ADE20K's (``--data-dir`` picks
    ``data.dataset=ade20k``), whose 0 is ignored: their background, most of the pixels, went unlearnt without a word.
    ADE20K itself labels most of its pixels."""
    total = split.pixels()
    if total and split.labelled < MOSTLY_IGNORED * total:
        ignored = f"ignore_index {labels.ignore_index}" + (" and 0 (data.reduce_zero_label)" if labels.reduce_zero_label
                                                          else "")  # fmt: skip
        warnings.warn(
            f"only {100 * split.labelled / total:.0f}% of the {what} masks' pixels ({mask_dir}) hold one of the "
            f"{len(labels.classes)} classes; the rest are {ignored}: are the labels read as meant? ADE20K "
            "(data.dataset=ade20k, what --data-dir trains) ignores 0; your own classes: data.dataset=folder "
            "data.classes=[...]",
            stacklevel=2,
        )


def warn_unlearned(split: Split, mask_dir: Path, labels: Labels) -> None:
    """One warning naming the classes no pixel of the train ``split``'s masks holds: the model has a class for each
    that it never learns. A warning, not an error: a subset of the classes may be trained on purpose."""
    _warn_absent(split, labels, f"train mask ({mask_dir})", "the model never learns them")


def warn_unmeasured(split: Split, what: str, mask_dir: Path, labels: Labels) -> None:
    """One warning naming the classes no pixel of the masks of ``split`` (``what``: "val", "train", "evaluated")
    holds: no IoU is measured for them (:mod:`.evaluation`). A pixel predicted as one of them still gives it an IoU
    of 0, which lowers the mIoU; one never predicted has none (NaN), left out of the mean; their accuracy is NaN,
    left out of mAcc."""
    _warn_absent(
        split,
        labels,
        f"{what} mask ({mask_dir})",
        "no IoU is measured for them: a pixel predicted as one gives it IoU 0 in the mIoU; one never predicted is nan, "
        "left out of the mean (their accuracies are nan, left out of mAcc)",
    )


def _warn_absent(split: Split, labels: Labels, masks: str, consequence: str) -> None:
    present = split.classes_present()
    absent = [f"{i}: {name}" for i, name in enumerate(labels.classes) if i not in present]
    if absent:
        warnings.warn(
            f"no {masks} holds a pixel of {len(absent)} of the {len(labels.classes)} classes (id: name): "
            f"{listed(absent, _LISTED)}; {consequence}{_ignored_note(split, labels)}",
            stacklevel=3,
        )


def _ignored_note(split: Split, labels: Labels) -> str:
    """The share of ``split``'s mask pixels that are ignored, for the warning of classes without a pixel: the absent
    classes' pixels may be stored as the ignored value, as binary masks saved as 0/255 store their foreground, which
    ``ignore_index`` 255 (the default) ignores. Without ``reduce_zero_label`` the ignored pixels are those stored as
    ``ignore_index``, and the note says how to store them; with it, which stored values they are."""
    total = split.pixels()
    ignored = total - split.labelled
    if not ignored:
        return ""
    share = f"{100 * ignored / total:.1f}% of the masks' pixels"
    if labels.reduce_zero_label:
        return (
            f"; {share} are ignored, stored as {ignored_values(labels)} (data.reduce_zero_label=true: any other "
            "stored value v is class v - 1)"
        )
    binary = " (binary masks saved as 0/255 store their foreground as 255: store it as 1)"
    return (
        f"; {share} are ignore_index {labels.ignore_index}, no class: if the missing classes' pixels are among them, "
        f"store each as its class id{binary if labels.ignore_index == 255 else ''}"
    )


class SegmentationDataset(Dataset):
    """``(image, mask)`` pairs of a checked split through a ``torchvision.transforms.v2`` transform.

    Before the transform: ``tv_tensors.Image`` [3, H, W] uint8 and ``tv_tensors.Mask`` [H, W] int64 (the labels of
    :func:`read_labels`). A pair that became unreadable after the scan is named in a warning and, in training, the
    next one served (a broken file must not stop a long run); with ``evaluation`` the item is a
    :class:`~swinlite.images.LeftOut` record of the image instead (:func:`collate` sets it apart: an evaluation
    scores the pairs it was given and names the others).

    Args:
        too_thin: ``(height, width) -> why`` an evaluation cannot predict an image of that size, or None
            (:func:`swinlite.segmentation.inference.thin_check`: a test view thinner than the backbone's patch); such
            a pair is named and left out as an unreadable one. None: no such check (set once the model is built).
    """

    def __init__(
        self,
        pairs: list[Pair],
        labels: Labels,
        transform: Callable | None = None,
        evaluation: bool = False,
        too_thin: Callable[[int, int], str | None] | None = None,
    ) -> None:
        self.pairs, self.labels, self.transform, self.evaluation = pairs, labels, transform, evaluation
        self.too_thin = too_thin

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor] | LeftOut:
        return readable_item(self._item, index, len(self), self.evaluation)

    def _item(self, index: int) -> tuple[torch.Tensor, torch.Tensor] | LeftOut:
        pair = self.pairs[index]
        try:
            image = tv_tensors.Image(pil_to_tensor(load_rgb(pair.image)))
            mask = tv_tensors.Mask(torch.from_numpy(read_labels(pair.mask, self.labels)))
            problem = None if self.too_thin is None else self.too_thin(*image.shape[-2:])
            if image.shape[-2:] != mask.shape:  # a file replaced after the scan
                problem = f"the image is {image.shape[-1]}x{image.shape[-2]}, the mask {mask.shape[1]}x{mask.shape[0]}"
        except Exception as e:  # PIL raises many exception types for bad files
            problem = unreadable(e)
        if problem is not None:
            done = "left out of the evaluation" if self.evaluation else "skipped"
            warnings.warn(f"pair {pair.image}, {pair.mask} {done}: {problem}", stacklevel=3)
            return LeftOut(index, str(pair.image), problem)
        return self.transform(image, mask) if self.transform else (image, mask)


def collate(
    batch: list[tuple[torch.Tensor, torch.Tensor] | LeftOut],
) -> tuple[torch.Tensor | list, torch.Tensor | list, list[LeftOut]]:
    """(images, masks, left out): stacked images and masks when all have one size (training crops), else lists
    (whole evaluation images); then the records of the pairs an evaluation could not read."""
    read, left_out = split_left_out(batch)
    if not read:
        return [], [], left_out
    images, masks = zip(*read, strict=True)
    if len({tuple(im.shape) for im in images}) == 1 and len({tuple(m.shape) for m in masks}) == 1:
        return torch.stack(images), torch.stack(masks), left_out
    return list(images), list(masks), left_out
