"""ImageFolder data (``root/train/<class>/*``, ``root/val/<class>/*``) with timm's transforms.

Problems in the folders are found before training starts: a missing root or split, an empty class
folder, a val class train does not have, a link in a split folder to nothing (a class on a disk not mounted) are
ValueErrors; training classes val does not have are named in a warning, and so are the things the scan skips: an
image file in a split folder itself (no class), a folder it cannot list, a link into the other split, a file both
splits link to (train's).
The scan reads each image's header (with ``data.verify_images`` it decodes every image, as detection and
segmentation do); a file PIL cannot identify is skipped there, and so is a val image too elongated for the centre
crop's resize (a 1x40000 image resized to a shorter side of 256 would take 7 GiB); one whose pixel data is broken
behind a good header is, without ``data.verify_images``, named by the loader worker that decodes it (training serves
the next image, an evaluation leaves it out). Every image is converted to RGB (grayscale, RGBA, palette, CMYK, ...).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import unicodedata
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from PIL import Image, ImageOps
from timm.data import DEFAULT_CROP_PCT, create_transform
from timm.data.auto_augment import AugmentOp
from torch.utils.data import Dataset, default_collate

from ..files import SkippedLink, center_crop_scale, check_apart, elongation_problem, is_hidden, upright_size
from ..images import (
    IMAGE_EXTENSIONS,
    LeftOut,
    folders_apart,
    is_image_file,
    list_files,
    load_rgb,
    readable_item,
    split_left_out,
    unreadable,
)
from .config import AFFINE_INTERPOLATIONS, DataConfig

RAND_TRANSFORM_SETS = ("weights", "3aw", "3a")  # what timm's rand_augment_choices takes after RandAugment's "t"
LAYOUT = "a folder holding train/<class>/* and val/<class>/*"  # what --data-dir names
POOL_MIN_FILES = 1000  # fewer files are checked in this process: starting a pool would cost more
# data.interpolation and data.crop_pct unset (None) here: timm's resolve_data_config's for a model whose pretrained
# config gives neither (a run has resolved them from its model before: swinlite.engine.preflight.resolve_normalisation)
UNRESOLVED = {"interpolation": "bicubic", "crop_pct": DEFAULT_CROP_PCT}


def image_problem(path: str, shorter: int | None = None, decode: bool = False) -> str | None:
    """Why the scan skips the image ``path``, or None: PIL does not recognise it from its header (with ``decode``,
    does not decode it whole; in the loader's words, :func:`swinlite.files.unreadable`), or it has no size, or (given
    ``shorter``) it is too elongated.

    Reads the header only (well under a millisecond) unless ``decode``: without it a file whose pixel data is broken
    behind a good header is found later, when a loader worker decodes it, and skipped there with a warning naming it.

    Args:
        path: the image file.
        shorter: the shorter side an evaluation resize brings the image to (:func:`val_resize_shorter`): an image
            too elongated for it (:func:`swinlite.files.elongation_problem`) is a problem too; None: no such check.
        decode: decode the whole image (``data.verify_images``; :func:`swinlite.files.upright_size`, the check of
            every task's scan).
    """
    try:
        height, width = upright_size(path, decode)
    except Exception as e:  # PIL raises many exception types for bad files
        return unreadable(e)  # the loader's words for an image it cannot decode
    if width <= 0 or height <= 0:
        return f"image size {height}x{width} (HxW)"
    return None if shorter is None else elongation_problem(height, width, shorter)


def _check_images(paths: list[str], shorter: int | None, decode: bool) -> list[str | None]:
    """``image_problem`` for every path, in forked processes on 4+ cores (the check is CPU-bound Python: threads
    only contend for the interpreter lock; the children use PIL alone, so forking beside torch is safe)."""
    processes = min(16, os.cpu_count() or 1)
    if processes < 4 or len(paths) < POOL_MIN_FILES or "fork" not in multiprocessing.get_all_start_methods():
        return [image_problem(p, shorter, decode) for p in paths]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        return pool.map(functools.partial(image_problem, shorter=shorter, decode=decode), paths, chunksize=512)


@dataclass
class Split:
    """A scanned split: ``samples`` of (path, class index), the files skipped, with reasons, and the links skipped
    (into another class folder or split, or to a file listed already: :func:`scan_split`)."""

    samples: list[tuple[str, int]]
    classes: list[str]
    skipped: list[tuple[str, str]]
    links: list[SkippedLink] = field(default_factory=list)


def class_folders(
    split_dir: Path,
    links: list[SkippedLink] | None = None,
    apart: Sequence[Path] = (),
    skipped: list[tuple[str, str]] | None = None,
) -> list[str]:
    """The class folders of ``split_dir``, sorted (Python's sort of the names, torchvision's ImageFolder's: ``B``
    before ``a``, ``c10`` before ``c2``), hidden ones left out, and so is a link to another class folder (or into
    one: no class of its own) or into one of ``apart`` (the other split: its images), each skipped with a warning
    and added to ``links`` where given; nothing under them is read. An image file in ``split_dir`` itself has no
    class: given ``skipped`` (a scan's), it is named in a warning and (path, reason) added to it.

    Raises:
        ValueError: ``split_dir`` is no folder, shares files with one of ``apart`` once links are followed (a val/
            linked to train/ holds no image of its own: every class folder would be skipped), holds a link whose
            target is missing (a class folder on a disk not mounted: left out, the classifier would have a class
            fewer, without a word), or holds no class folder.
    """
    if not split_dir.is_dir():
        raise ValueError(f"missing split folder {split_dir}: expected {split_dir}/<class>/<image files>")
    check_apart(split_dir, apart)
    entries = sorted(p for p in split_dir.iterdir() if not is_hidden(p.name))
    broken = next((p for p in entries if p.is_symlink() and not p.exists()), None)
    if broken is not None:
        raise ValueError(
            f"{broken} is a symbolic link to {os.readlink(broken)}, which does not exist (a disk not mounted?): a "
            "class folder it leads to would be left out, the classifier a class short; restore its target, or remove "
            "the link"
        )
    for path in (p for p in entries if skipped is not None and p.is_file() and is_image_file(p)):
        reason = f"an image in no class folder (expected {split_dir.name}/<class>/<image files>)"  # cached: no path
        warnings.warn(f"skipping {path}: {reason}", stacklevel=2)
        skipped.append((str(path), reason))
    found = [p for p in entries if p.is_dir()]
    if not found:
        raise ValueError(f"{split_dir} holds no class folders: expected {split_dir}/<class>/<image files>")
    return [p.name for p in folders_apart(found, links, apart)]


def _one_class_per_file(listed: dict[str, list[str]], links: list[SkippedLink]) -> dict[str, str]:
    """Keep each real file in the first class (in ``listed``'s order) that lists it; skip it, with a warning (added to
    ``links``), in the others: links from two class folders to one file outside them put one image under two labels.
    (A link into another class's folder, or to a file of its own folder, :func:`list_files` skips already.)

    Returns:
        the real path of each file kept -> its path.
    """
    first: dict[str, str] = {}  # real path -> the path that listed it first
    for name, files in listed.items():
        kept = []
        for path in files:
            real = os.path.realpath(path)
            other = first.setdefault(real, path)
            if other == path:
                kept.append(path)
            else:
                link = SkippedLink(path, "file", real, f"the same file as {other}, in another class folder")
                warnings.warn(link.message, stacklevel=3)
                links.append(link)
        listed[name] = kept
    return first


def _not_trained(
    listed: dict[str, list[str]],
    reals: dict[str, str],
    split_dir: Path,
    trained: Iterable[str],
    links: list[SkippedLink],
) -> set[str]:
    """Leave out of ``listed`` each file the training split lists too (``trained``, its files' paths), with a warning
    (added to ``links``): train/ and val/ linked to one store of images outside them (a folder of each, or a file)
    scored training images. ``reals``: the real path of each of ``listed``'s files -> its path. Only a file reached
    through links outside ``split_dir`` can be one: ``trained`` is read (each file's real path) only where there is
    one. (A link into train/ :func:`class_folders` and :func:`list_files` skip already.)

    Returns:
        the classes of ``listed`` left without an image file: all were the training split's.
    """
    root = os.path.realpath(split_dir)
    outside = {real: path for real, path in reals.items() if not Path(real).is_relative_to(root)}
    if not outside:
        return set()
    taken = {outside[real]: (real, path) for path in trained if (real := os.path.realpath(path)) in outside}
    emptied = set()
    for name, files in listed.items():
        for path in (p for p in files if p in taken):
            real, other = taken[path]
            link = SkippedLink(path, "file", real, f"the same file as {other}, in the training split")
            warnings.warn(link.message, stacklevel=3)
            links.append(link)
        listed[name] = [p for p in files if p not in taken]
        if len(listed[name]) < len(files) and not any(map(is_image_file, listed[name])):
            emptied.add(name)
    return emptied


def scan_split(
    split_dir: Path,
    classes: list[str] | None = None,
    verify: bool = False,
    shorter: int | None = None,
    classes_of: str = "the training split",
    apart: Sequence[Path] = (),
    trained: Iterable[str] = (),
) -> Split:
    """List ``split_dir/<class>/**/<image>``; ValueError for anything that would fail training later.

    Args:
        split_dir: the split folder, e.g. ``root/train``.
        classes: the class list to index against (train's, for val); None: this split's own folders.
        classes_of: where ``classes`` come from, for the message naming a class folder they lack.
        verify: decode every image (``data.verify_images``), not only read its header (:func:`image_problem`);
            those that fail are skipped.
        shorter: for a split evaluated by a centre crop, the shorter side its resize makes: an image too elongated
            for it is skipped too (the resize would take gigabytes).
        apart: the data's other split folders: a linked folder or file into one is skipped with a warning, as one
            into another class's folder (val images under a train class trained on what val then scores).
        trained: for val, the paths of the training split's files: a file of this split that is one of them (both
            splits linked to one file, or folder, outside them) is skipped with a warning too, as a link into
            ``apart`` is; a class folder all of whose files are train's is then no error, a class val lacks. Read
            only where this split reaches a file outside its folder.
    """
    links: list[SkippedLink] = []  # counted with the files skipped
    skipped: list[tuple[str, str]] = []  # each warned as found: before the error for an empty class folder (its why)
    folders = class_folders(split_dir, links, apart, skipped)
    classes = folders if classes is None else classes
    unknown = sorted(set(folders) - set(classes))
    if unknown:
        raise ValueError(
            f"{split_dir} has classes {classes_of} does not have: {', '.join(unknown)}"
            + normalisation_note(unknown, classes, classes_of)
        )
    listed: dict[str, list[str]] = {}  # a linked folder that loops, or leads into another class's, is skipped
    for name in folders:
        others = [*(split_dir / o for o in folders if o != name), *apart]
        listed[name] = [str(p) for p in list_files(split_dir / name, others, skipped=links, unlisted=skipped)]
    of_train = _not_trained(listed, _one_class_per_file(listed, links), split_dir, trained, links)
    images = [p for files in listed.values() for p in files if is_image_file(p)]
    problems = dict(zip(images, _check_images(images, shorter, verify), strict=True))
    samples, empty = [], []
    for name, files in listed.items():
        label, count = classes.index(name), len(samples)
        for path in files:
            reason = problems.get(path, "not an image file extension")
            if reason is None:
                samples.append((path, label))
            else:
                warnings.warn(f"skipping {path}: {reason}", stacklevel=2)
                skipped.append((path, reason))
        if len(samples) == count and name not in of_train:  # a class folder of train's images: one val lacks
            empty.append(name)
    if empty:
        folder = split_dir / empty[0]
        unlisted = dict(skipped).get(str(folder))  # the class folder itself could not be listed
        problem = f"is {unlisted}" if unlisted else f"has no readable images ({', '.join(IMAGE_EXTENSIONS)})"
        raise ValueError(f"class folder {folder} {problem}")
    return Split(samples, classes, skipped, links)


def normalisation_note(unknown: list[str], classes: list[str], classes_of: str) -> str:
    """A note for the error naming ``unknown`` class folders, when one of them differs from a class only in Unicode
    normalisation (macOS writes names decomposed, NFD; most other systems composed, NFC): they look the same."""

    def form(name: str) -> str:
        return next((f for f in ("NFC", "NFD") if unicodedata.is_normalized(f, name)), "neither NFC nor NFD")

    composed = {unicodedata.normalize("NFC", name): name for name in classes}
    twins = [(name, composed[key]) for name in unknown if (key := unicodedata.normalize("NFC", name)) in composed]
    if not twins:
        return ""
    name, twin = twins[0]
    return (
        f" (this folder's name {name} is {form(name)}, the class {twin} of {classes_of} {form(twin)}: the names differ "
        "only in Unicode normalisation, NFC vs NFD, as copies from macOS can; rename one folder so both spell it alike)"
    )


class ImageFolderDataset(Dataset):
    """(image tensor, class index) pairs; an image that fails to load is named in a warning and, in training,
    replaced by the next one (a broken file must not stop a long run); with ``evaluation`` the item is a
    :class:`~swinlite.images.LeftOut` record instead (:func:`collate` sets it apart: an evaluation scores the images
    it was given and names the others).

    Args:
        samples: (path, class index) pairs.
        transform: applied to each RGB image (drawing from the global generators: the engine seeds each sample).
        shorter: the shorter side ``transform`` resizes to (an evaluation transform, :func:`val_resize_shorter`): an
            image too elongated for it is treated as unreadable (the scan skipped those it read; this finds one
            replaced since); None: no such check (random-resized crops keep the output size).
        evaluation: a LeftOut for an image that fails, instead of the next one.
    """

    def __init__(
        self,
        samples: list[tuple[str, int]],
        transform: torch.nn.Module | None = None,
        shorter: int | None = None,
        evaluation: bool = False,
    ) -> None:
        self.samples = samples
        self.transform = transform
        self.shorter = shorter
        self.evaluation = evaluation

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int] | LeftOut:
        return readable_item(self._item, index, len(self.samples), self.evaluation)

    def _item(self, index: int) -> tuple[torch.Tensor, int] | LeftOut:
        path, label = self.samples[index]
        try:  # a file broken behind a good header is found here
            img = load_rgb(path)
            problem = None if self.shorter is None else elongation_problem(img.height, img.width, self.shorter)
        except Exception as e:  # PIL raises many exception types for bad files
            problem = unreadable(e)
        if problem:  # an elongated image's resize would take gigabytes
            done = "left out of the evaluation" if self.evaluation else "skipped"
            warnings.warn(f"{path} {done}: {problem}", stacklevel=3)
            return LeftOut(index, str(path), problem)
        return (img if self.transform is None else self.transform(img)), label


def collate(
    batch: list[tuple[torch.Tensor, int] | LeftOut],
) -> tuple[torch.Tensor | None, torch.Tensor | None, list[LeftOut]]:
    """(images, targets, left out): torch's default collate of the items read (None, None when none was) and the
    records of an evaluation's unreadable ones."""
    read, left_out = split_left_out(batch)
    return (*default_collate(read), left_out) if read else (None, None, left_out)


def build_transforms(cfg: DataConfig) -> tuple[torch.nn.Module, torch.nn.Module]:
    """timm train (random-resized crop, flips, jitter, RandAugment, erasing) and eval transforms.

    ``data.mean`` / ``data.std`` left unset (None) are timm's defaults here (ImageNet's), ``data.interpolation`` and
    ``data.crop_pct`` :data:`UNRESOLVED`'s; a run has resolved them from the model before
    (``swinlite.engine.preflight.resolve_normalisation``).
    """
    common = dict(input_size=cfg.img_size, interpolation=_setting(cfg, "interpolation"))
    common |= {key: value for key in ("mean", "std") if (value := getattr(cfg, key)) is not None}
    train = create_transform(
        is_training=True,
        scale=cfg.scale,
        ratio=cfg.ratio,
        hflip=cfg.hflip,
        color_jitter=cfg.color_jitter,
        auto_augment=cfg.auto_augment,
        re_prob=cfg.re_prob,
        re_mode=cfg.re_mode,  # create_transform's own default is "const"
        **common,
    )
    route_posterize(train)
    return train, create_transform(is_training=False, crop_pct=_setting(cfg, "crop_pct"), **common)


def _setting(cfg: DataConfig, key: str) -> str | float:
    """``cfg``'s ``interpolation`` or ``crop_pct``, or :data:`UNRESOLVED`'s where it is unset (None)."""
    value = getattr(cfg, key)
    return UNRESOLVED[key] if value is None else value


def check_augment(cfg: DataConfig, inherited: tuple[str, str] | None = None) -> None:
    """ValueError, before any data is read, for a ``data.auto_augment`` timm's parser refuses (its assertion came
    after the data scan) or would read in part (:func:`skipped_section`), or a ``data.interpolation`` its rotations
    and shears do not take (PIL refuses it in the first one drawn). ``inherited``: (value, where it comes from) of an
    unset ``data.interpolation`` that the run takes from a ``model.pretrained`` file's record
    (``swinlite.engine.preflight.inherited_setting``), checked as a value given; unset otherwise, the model's is
    bicubic or bilinear, as every timm pretrained config's."""
    if not cfg.auto_augment:
        return
    try:
        create_transform(cfg.img_size, is_training=True, auto_augment=cfg.auto_augment)
        reason = skipped_section(cfg.auto_augment)
    except (AssertionError, ValueError) as e:  # timm asserts on a name or section it does not know
        reason = str(e)
    if reason is not None:
        raise ValueError(
            f"data.auto_augment={cfg.auto_augment} is not a policy timm knows{f' ({reason})' if reason else ''}; e.g. "
            "rand-m9-mstd0.5-inc1 (RandAugment), augmix-m5 (AugMix), original (AutoAugment), or none"
        )
    interpolation, source = (cfg.interpolation, "") if inherited is None else inherited
    source = f" (unset: {source})" if source else ""
    if interpolation not in (None, *AFFINE_INTERPOLATIONS):
        raise ValueError(
            f"data.interpolation={interpolation}{source} does not go with data.auto_augment={cfg.auto_augment} (its "
            f"rotations and shears take {', '.join(AFFINE_INTERPOLATIONS)}); set data.interpolation to one of those, "
            "or data.auto_augment=none"
        )


def skipped_section(policy: str) -> str | None:
    """Why timm's parser of ``policy`` (one it takes) would pass over one of its ``-``-separated sections without a
    word, or None. After the policy's name, timm's RandAugment, AugMix and AutoAugment parsers read a section as a
    key and its number (``m9``, ``mstd0.5``; an unknown key is their assertion) and skip one without a digit
    (``rand-m9-bogus``); RandAugment's ``t<name>`` names a transform set, and a name ``rand_augment_choices`` does not
    know gives its default set."""
    name, *sections = policy.split("-")
    for section in sections:
        if name == "rand" and section.startswith("t"):
            if section[1:] not in RAND_TRANSFORM_SETS:
                known = ", ".join(f"t{s}" for s in RAND_TRANSFORM_SETS)
                return f"the transform set {section!r} is none of {known}: timm would use its default set"
        elif not any(c.isdigit() for c in section):
            return f"timm would skip the section {section!r}: a section is a key and its number, e.g. m9 or mstd0.5"
    return None


def posterize(img: Image.Image, bits: int, **_: object) -> Image.Image:
    """Keep the ``bits`` most significant bits of each channel; 0 bits gives a black image.

    timm's "increasing" posterize asks for 0 bits at the top magnitude (RandAugment's ``inc1`` with a magnitude
    std reaches it about once in 2,000 calls). Pillow up to 12 returned a black image for it; Pillow 13 raises.
    """
    if bits >= 8:
        return img
    if bits <= 0:
        return img.point([0] * 256 * len(img.getbands()))
    return ImageOps.posterize(img, bits)


def route_posterize(transform: object) -> None:
    """Route every posterize op of timm's RandAugment / AutoAugment / AugMix in ``transform`` through
    :func:`posterize`, so the policy means the same on every Pillow version the project allows."""
    for t in getattr(transform, "transforms", []):
        groups = getattr(t, "policy", None) or [getattr(t, "ops", [])]  # AutoAugment: sub-policies; others: ops
        for op in (op for group in groups for op in group):
            if isinstance(op, AugmentOp) and op.name.startswith("Posterize"):
                op.aug_fn = posterize


def check_data_dir(root: Path, demo: bool = False) -> None:
    """ValueError naming the ImageFolder layout when ``root`` is no folder; a file (an archive not yet unpacked) is
    said to be one, not to be missing. ``demo``: ``root`` is where the digits demo is written (a file refused, a
    folder yet to be made taken)."""
    if root.is_file():
        expected = "a folder for the digits demo to write its images into" if demo else LAYOUT
        raise ValueError(f"--data-dir (data.data_dir) {root} is a file; expected {expected}")
    if not demo and not root.is_dir():
        raise ValueError(f"--data-dir {root} does not exist: expected {root}/train/<class>/* and {root}/val/<class>/*")


def scan_data_dir(cfg: DataConfig) -> tuple[Split, Split]:
    """Check and list ``cfg.data_dir``'s train and val splits (val indexed by train's classes, and kept apart from
    every file train lists: a file both reach through links is train's)."""
    root = Path(cfg.data_dir)
    check_data_dir(root)
    train = scan_split(root / "train", verify=cfg.verify_images, apart=[root / "val"])
    val = scan_split(
        root / "val",
        train.classes,
        cfg.verify_images,
        val_resize_shorter(cfg),
        apart=[root / "train"],
        trained=[path for path, _ in train.samples],
    )
    return train, val


def training_files(train_dir: Path) -> Iterator[str]:
    """The paths of the files under ``train_dir`` (:func:`list_files`; what it skips not named: the training split's
    own scan names it; none where there is no ``train_dir``), listed when first iterated: ``trained`` of
    :func:`scan_split` for a split scanned without train's scan at hand (``evaluate.py``'s)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files = list_files(train_dir)
    yield from map(str, files)


def warn_unvalidated(val: Split) -> None:
    """One warning naming the training classes the val split has no image of: no accuracy is measured for them
    (``evaluate.py`` gives them none, "n/a (0 images)"). A warning, not an error: a subset may be validated on
    purpose."""
    seen = {label for _, label in val.samples}
    lacked = [name for label, name in enumerate(val.classes) if label not in seen]
    if lacked:
        warnings.warn(
            f"val/ has no image of {len(lacked)} of the {len(val.classes)} training classes: {', '.join(lacked)}; "
            "no accuracy is measured for them",
            stacklevel=3,
        )


def val_resize_shorter(cfg: DataConfig) -> int:
    """The shorter side the val transform of :func:`build_transforms` resizes images to (timm's centre crop)."""
    return center_crop_scale((cfg.img_size, cfg.img_size), _setting(cfg, "crop_pct"))


def build_datasets(
    cfg: DataConfig, splits: tuple[Split, Split] | None = None
) -> tuple[ImageFolderDataset, ImageFolderDataset, list[str], int]:
    """Train and val datasets, the class names and the count of the files and links the scan skipped.

    Args:
        cfg: data settings.
        splits: the result of ``scan_data_dir(cfg)`` when already done (e.g. by rank 0); None: scan now.
    """
    train, val = splits or scan_data_dir(cfg)
    warn_unvalidated(val)
    train_tf, val_tf = build_transforms(cfg)
    skipped = sum(len(split.skipped) + len(split.links) for split in (train, val))
    val_set = ImageFolderDataset(val.samples, val_tf, val_resize_shorter(cfg), evaluation=True)
    return ImageFolderDataset(train.samples, train_tf), val_set, train.classes, skipped
