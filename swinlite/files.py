"""File helpers that import no torch: which files are images and how one is decoded, the output check every
writer makes, crash-safe writing.

They are the one implementation for the whole package (:mod:`swinlite.images` and :mod:`swinlite.io` re-export
them) and the torch-free deployment path (:mod:`swinlite.onnx_predict`) reads and writes through them too, so an
image reads the same and an output is checked the same with or without torch.

- an image file is one whose extension (any case) is in :data:`IMAGE_EXTENSIONS`, torchvision's
  ``ImageFolder`` list (``tests/test_images.py`` keeps the two equal); one named explicitly is an image whatever its
  extension, where Pillow opens it (:func:`opens_as_image`: a ``.gif`` given to ``extract_features.py`` is no list);
- :func:`load_rgb` decodes it as 8-bit RGB, upright (EXIF orientation), with high-bit-depth and float
  pixels scaled, not clipped (see its docstring for the rules);
- :func:`list_images` expands folders to their image files (:func:`list_files`: recursive, sorted, hidden
  names left out, linked folders followed once, never in a loop nor into another folder the caller lists),
  each file once however many of the paths given reach it, under its own name where a link to it is given too;
- :func:`decoded` and :func:`header_sizes`: each image of a list decoded (or its size read), those that fail named
  for the scripts to skip;
- :func:`read_list` and :func:`read_names`: a text file of paths, or of names, one a line, read by one rule
  (:func:`_lines`);
- :func:`label_image`: a segmentation label map as a palette (or 16-bit) PNG image;
- :func:`fitting_name`: an output's name (a drawing's, a feature file's, a temporary file's) cut, with a hash of the
  whole, to the 255 bytes a filesystem takes;
- :func:`json_bytes`: the one JSON writer of the files users read: strict JSON, NaN as null;
- :func:`check_output`: no output replaces an input or holds one, no output file is a training run's
  (:func:`training_run_of`), and the output can be written where it is asked for; :func:`earlier_outputs`: an
  earlier run's outputs are replaced only with ``--overwrite``, files no run wrote never; :func:`check_output_dir`:
  both, for the scripts of a task, which share an ``--output-dir`` (:data:`OUTPUT_DIR_FILES`);
  :func:`check_folder_alone`: a folder of its own for a script's ``--output`` (:data:`FOLDER_FILES`), neither a
  training run's (:func:`is_training_run`) nor holding another script's outputs; :func:`outputs_without_run`: the
  results of other weights that a new training run's folder is refused for;
- :func:`atomic_write` (:func:`atomic_write_bytes`, :func:`atomic_write_png`): a reader only ever sees the old file or
  the complete new one. Files get the mode any tool's output gets, 0666 less the umask (0644 with the usual umask
  022), not the 0600 of the temporary file they are written as.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import glob
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
from PIL import ExifTags, Image, ImageFile, ImageOps, TiffImagePlugin

IMAGE_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def is_image_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` has an image extension (``.JPG`` and ``.png`` alike)."""
    return str(path).lower().endswith(IMAGE_EXTENSIONS)


def opens_as_image(path: str | os.PathLike) -> bool:
    """Whether Pillow takes the file ``path`` for an image by its content (its header: nothing is decoded), whatever
    its extension: a ``.gif`` or ``.jfif`` named explicitly, which :func:`list_images` keeps and :func:`load_rgb`
    reads."""
    try:
        Image.open(path).close()
    except Image.DecompressionBombError:
        return True  # an image, too large to decode: its reader says so
    except (OSError, ValueError):  # not an image (PIL.UnidentifiedImageError is an OSError)
        return False
    return True


def _int_to_uint8(pixels: np.ndarray, path: str | os.PathLike) -> np.ndarray:
    """Integer pixels (H, W) -> uint8: 0..65535 is scaled to 0..255; any other range is an error, not clipped."""
    low, high = int(pixels.min()), int(pixels.max())
    if low < 0 or high > 65535:
        raise ValueError(
            f"{path}: 32-bit integer image with pixels in [{low}, {high}]; expected 0..65535 (convert it to 16 bits)"
        )
    return (pixels / 257.0 + 0.5).astype(np.uint8)


def _float_to_uint8(pixels: np.ndarray, path: str | os.PathLike) -> np.ndarray:
    """Float pixels (H, W) -> uint8: 0..1 is scaled to 0..255, 0..255 is kept; any other range is an error.

    The range is 0..1 unless a pixel exceeds 1 by more than rounding. Pixels within half an 8-bit level of the range's
    ends (0..1: -0.5/255..1 + 0.5/255; 0..255: -0.5..255.5) are rounding, clipped to it; one further out is an error.
    """
    if not np.isfinite(pixels).all():
        raise ValueError(f"{path}: float image holds NaN or infinite pixels")
    low, high = float(pixels.min()), float(pixels.max())
    scale = 255.0 if high <= 255.5 / 255 else 1.0
    if low < -0.5 / scale or high > 255.5 / scale:
        raise ValueError(
            f"{path}: float image with pixels in [{low:g}, {high:g}]; expected 0..1 or 0..255, give or take half an "
            f"8-bit level ({-0.5 / 255:g}..{255.5 / 255:g} or -0.5..255.5; convert it to 8 bits)"
        )
    return np.clip(pixels * scale + 0.5, 0, 255).astype(np.uint8)


def load_rgb(path: str | os.PathLike) -> Image.Image:
    """Open an image as 8-bit RGB, upright, whatever its mode.

    - The EXIF orientation is applied (photos from phones are stored sideways).
    - 16- and 32-bit integer images (PNG ``I;16``, ``I``) are scaled from 0..65535 to 0..255, not clipped: a 32-bit
      image with pixels outside 0..65535 is a ValueError naming the file and the range found.
    - Float images (``F``, e.g. a 32-bit float TIFF) are scaled by their range: pixels all within 0..1 are
      multiplied by 255; pixels within 0..255 (with some above 1) are kept. Pixels within half an 8-bit level of
      the range's ends (0..1: -0.5/255..1 + 0.5/255, 0..255: -0.5..255.5) are rounding, clipped to it; pixels
      further out, NaN or infinity are a ValueError naming the file (no range can be assumed for them). An image in
      0..255 whose every pixel is at most 1 (+ 0.5/255) is read as a 0..1 image: the two cannot be told apart.
    - Transparent palette images go through RGBA first; alpha is dropped.

    Raises:
        ValueError: integer or float pixels outside the ranges above. PIL's own errors for files that are not images.
    """
    with Image.open(path) as img:
        img = ImageOps.exif_transpose(img)
        if img.mode.startswith("I;16") or img.mode == "I":
            img = Image.fromarray(_int_to_uint8(np.asarray(img), path))  # (H, W) uint8
        elif img.mode == "F":
            img = Image.fromarray(_float_to_uint8(np.asarray(img, dtype=np.float64), path))  # (H, W) uint8
        elif img.mode == "P" and "transparency" in img.info:
            img = img.convert("RGBA")
        return img.convert("RGB")


MAX_RESIZED_PIXELS = 2**28  # the most pixels an evaluation resize may make of one image (768 MiB as 8-bit RGB)


def center_crop_scale(crop: Sequence[int], crop_pct: float) -> int:
    """The shorter side timm's "center" evaluation transform resizes an image to before cropping ``crop`` (height,
    width) from it, where the two agree (the larger otherwise): ``floor(size / crop_pct)``."""
    return max(math.floor(size / crop_pct) for size in crop)


def elongation_problem(height: int, width: int, shorter: int) -> str | None:
    """Why an image is refused by an evaluation resize that brings its shorter side to ``shorter`` pixels (timm's
    centre-crop transform), or None: the longer side grows by the same factor, so a 1x40000 image resized to 256
    would take 256 x 10240000 pixels (7 GiB); more than :data:`MAX_RESIZED_PIXELS` is refused."""
    short, long = min(height, width), max(height, width)
    pixels = shorter * (long * shorter // max(short, 1))
    if short > 0 and pixels <= MAX_RESIZED_PIXELS:
        return None
    return (
        f"a {height}x{width} (HxW) image is too elongated: resizing its shorter side to {shorter} for the centre crop "
        f"would make {pixels} pixels (at most {MAX_RESIZED_PIXELS})"
    )


_SIDES_TURNED = (5, 6, 7, 8)  # EXIF orientations that swap an image's height and width
_PNG_TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")
_PNG_ORIENTATION_TEXT = (b"XML:com.adobe.xmp\0", b"Raw profile type exif\0")  # keywords Pillow reads EXIF from


def _stored(image: ImageFile.ImageFile) -> tuple[int, int]:
    """(height, width) of the open ``image``'s pixels as its file stores them, before its EXIF orientation: a TIFF's
    tags (Pillow gives a TIFF its upright size at open, and turns its pixels as it loads them), any other's size."""
    if isinstance(image, TiffImagePlugin.TiffImageFile):
        return image.tag_v2[TiffImagePlugin.IMAGELENGTH], image.tag_v2[TiffImagePlugin.IMAGEWIDTH]
    return image.height, image.width


def _png_orientation_after_pixels(file: IO[bytes]) -> bool:
    """Whether the PNG ``file`` holds a chunk Pillow may read an EXIF orientation from (eXIf; text of XMP or of
    ImageMagick's raw EXIF) after its pixel data, which Pillow reads only when it decodes the pixels. Only the chunks'
    headers and text keywords are read."""
    file.seek(8)  # past the PNG signature
    pixels = False
    while len(header := file.read(8)) == 8:  # length, type
        length, kind, start = int.from_bytes(header[:4], "big"), header[4:], file.tell()
        if pixels and kind == b"eXIf":
            return True
        if pixels and kind in _PNG_TEXT_CHUNKS and file.read(min(length, 80)).startswith(_PNG_ORIENTATION_TEXT):
            return True
        pixels = pixels or kind == b"IDAT"
        file.seek(start + length + 4)  # past the data and the CRC
    return False


def _orientation(image: ImageFile.ImageFile) -> int | None:
    """The EXIF orientation (1 to 8) :func:`load_rgb` turns the open ``image``'s stored pixels by (read, as
    ``ImageOps.exif_transpose`` and Pillow's TIFF loader read it, from the EXIF, else the XMP ``tiff:Orientation``),
    from the header; None where a PNG may hold it after its pixel data, read only by decoding."""
    if image.format == "PNG" and _png_orientation_after_pixels(image.fp):
        return None
    # Image.getexif: a PngImageFile's own decodes the whole image (5 ms for 640x480) to look after the pixels
    return Image.Image.getexif(image).get(ExifTags.Base.Orientation, 1)


def stored_size(path: str | os.PathLike) -> tuple[int, int]:
    """(height, width) of an image as its file stores it, before its EXIF orientation, from its header.

    Raises:
        PIL's errors for files that are not images.
    """
    with Image.open(path) as image:
        return _stored(image)


def upright_size(path: str | os.PathLike, decode: bool = False) -> tuple[int, int]:
    """(height, width) of an image as :func:`load_rgb` gives it (EXIF orientation applied), from its header, or with
    ``decode`` from the decoded image (which also finds a file whose pixel data is broken). A PNG holding EXIF or XMP
    after its pixel data is decoded either way: only decoding reads them.

    Raises:
        PIL's errors for files that are not images.
    """
    if not decode:
        with Image.open(path) as image:
            height, width = _stored(image)
            orientation = _orientation(image)
        if orientation is not None:
            return (width, height) if orientation in _SIDES_TURNED else (height, width)
    width, height = load_rgb(path).size
    return height, width


def decoded(paths: Sequence[Path], skipped: list[str]) -> Iterator[tuple[int, Path, Image.Image]]:
    """(index in ``paths``, path, image) of each of ``paths`` that :func:`load_rgb` decodes; each that it does not
    is added to ``skipped`` as ``"<path>: unreadable (<error>)"`` (the scripts name those and go on)."""
    for index, path in enumerate(paths):
        try:
            image = load_rgb(path)
        except Exception as e:  # PIL raises many exception types for bad files
            skipped.append(f"{path}: {unreadable(e)}")
            continue
        yield index, path, image


def unreadable(error: Exception) -> str:
    """Why an image file was skipped, in the words every script uses: ``"unreadable (<type>: <message>)"``."""
    return f"unreadable ({type(error).__name__}: {error})"


def header_sizes(paths: Sequence[Path]) -> Iterator[tuple[Path, int, int]]:
    """(path, height, width) of each of ``paths`` whose header reads (:func:`upright_size`); the others are left to
    :func:`decoded` to name."""
    for path in paths:
        try:
            height, width = upright_size(path)
        except Exception:  # unreadable: named when decoded
            continue
        yield path, height, width


def _inside(path: str, folder: str) -> bool:
    """Whether real path ``path`` is ``folder`` or lies under it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def is_hidden(name: str) -> bool:
    """Whether a file or folder name is hidden (``.*``: .DS_Store, .ipynb_checkpoints, a temporary file of
    :func:`atomic_write`): what listings leave out (:func:`list_files`), and what :func:`earlier_outputs` takes for
    no one's files."""
    return name.startswith(".")


@dataclass(frozen=True)
class SkippedLink:
    """A symbolic link a listing skipped: ``path``, the link as listed; ``kind``, what it leads to; ``target``, its
    real path; ``why``, e.g. ``"a loop back to an enclosing folder"`` or ``"the folder F, listed apart"``."""

    path: str
    kind: Literal["file", "folder"]
    target: str
    why: str

    @property
    def message(self) -> str:
        """The warning that names it: ``skipping linked file|folder PATH -> TARGET: WHY``."""
        return f"skipping linked {self.kind} {self.path} -> {self.target}: {self.why}"

    @property
    def reason(self) -> str:
        """Why it was left out, as ``eval.json``'s ``skipped`` gives it beside the path: ``linked file -> TARGET:
        WHY``."""
        return f"linked {self.kind} -> {self.target}: {self.why}"


def list_files(
    folder: str | os.PathLike,
    others: Iterable[str | os.PathLike] | None = None,
    *,
    every_name: bool = False,
    skipped: list[SkippedLink] | None = None,
    unlisted: list[tuple[str, str]] | None = None,
) -> list[Path]:
    """Files under ``folder`` (recursive), sorted, hidden names (:func:`is_hidden`) left out.

    Linked folders are followed, each real folder once. Two kinds of link are skipped, with a warning naming
    the link and its target: a link back to a folder that encloses it (``folder`` itself or above it: a loop,
    which would also list the folder's siblings), and a link into one of ``others``, folders the caller lists
    apart (e.g. the other class folders of a split: their files are theirs, not this folder's).

    Given ``others`` (a caller that counts files, as a split counts its class folders' images), linked files are
    checked too: a link to a file in one of ``others`` is skipped with a warning. Each file is then listed once
    (:func:`list_images`' rule): a link to a file this folder lists under its own name (a path whose last part is no
    link) is skipped with a warning, and the file keeps that name; links to one file found nowhere else are listed
    once, by the first. Without ``others``, or with ``every_name``, every name is listed, links to one file included
    (a caller that pairs files by name, as segmentation pairs images and masks: one mask file may serve several
    images through links).

    A folder that cannot be listed (no read permission; ``folder`` itself included) is skipped with a warning,
    ``skipping PATH: unreadable (PermissionError: ...)``, in the words of a file that does not read (its images
    were left out without a word).

    Args:
        folder: the folder to list.
        others: the folders the caller lists besides ``folder`` (none: an empty list); None: list every name.
        every_name: with ``others``, keep them apart but list every name, not each file once.
        skipped: where given, each skipped link is added to it too (for a caller that counts or names them).
        unlisted: where given, (path, reason) of each folder that could not be listed is added to it too.
    """
    root = os.path.realpath(folder)
    apart = [real for real in map(os.path.realpath, others or ()) if not _inside(root, real)]  # not folder's parents
    files: dict[Path, str] = {}  # path -> its real path
    seen = {root}
    errors: list[OSError] = []  # of the folders that do not list
    for parent, dirs, names in os.walk(folder, followlinks=True, onerror=errors.append):
        parent_real = os.path.realpath(parent)
        keep = []
        for name in sorted(d for d in dirs if not is_hidden(d)):
            path = os.path.join(parent, name)
            real = os.path.realpath(path)
            other = _apart(real, root, apart)
            if _inside(parent_real, real) or _inside(root, real) or other is not None:
                why = f"the folder {other}, listed apart" if other else "a loop back to an enclosing folder"
                _skip_link(SkippedLink(path, "folder", real, why), skipped, stacklevel=2)
            elif real not in seen:  # a folder reached through another link already is listed once
                seen.add(real)
                keep.append(name)
        dirs[:] = keep
        for name in (n for n in names if not is_hidden(n)):
            path = Path(parent, name)
            real = os.path.realpath(path) if path.is_symlink() else os.path.join(parent_real, name)
            other = _apart(real, root, apart)
            if other is None:
                files[path] = real
            else:
                _skip_link(SkippedLink(str(path), "file", real, f"the folder {other}, listed apart"), skipped, 2)
    for error in errors:
        _skip_unlisted(error, unlisted)
    listed = dict(sorted(files.items()))
    return list(listed) if others is None or every_name else _one_per_file(listed, skipped)


def _skip_unlisted(error: OSError, unlisted: list[tuple[str, str]] | None) -> None:
    """Warn, for :func:`list_files`' caller, that the folder :func:`os.walk`'s ``error`` names cannot be listed, as a
    scan names a file that does not read (:func:`unreadable`); add (path, reason) to ``unlisted`` where given."""
    path, reason = str(error.filename), unreadable(error)
    warnings.warn(f"skipping {path}: {reason}", stacklevel=3)
    if unlisted is not None:
        unlisted.append((path, reason))


def _skip_link(link: SkippedLink, skipped: list[SkippedLink] | None, stacklevel: int) -> None:
    """Warn ``link``'s message (``stacklevel`` as the caller would give :func:`warnings.warn`); add it to ``skipped``
    where given."""
    warnings.warn(link.message, stacklevel=stacklevel + 1)
    if skipped is not None:
        skipped.append(link)


def _apart(real: str, root: str, apart: list[str]) -> str | None:
    """The folder of ``apart`` that real path ``real`` lies in, where it does not lie in ``root`` too; or None. A file
    in ``root`` (every file but a link's) is decided before ``apart`` is searched: a scan of N class folders each listed
    apart from the others searched N of them for every file."""
    if _inside(real, root):
        return None
    return next((o for o in apart if _inside(real, o)), None)


def _one_per_file(reals: dict[Path, str], skipped: list[SkippedLink] | None = None) -> list[Path]:
    """The paths of ``reals`` (path -> its real path), in their order, each file (real path) once.

    A file is named by the first path that reaches it whose last part is no symbolic link (its own name); a link to
    it is then skipped with a warning naming the link and its target (added to ``skipped`` too, where given). Links
    to a file reached by no other path are kept, the first of them.
    """
    reaching: dict[str, list[Path]] = {}  # real path -> the paths that reach it
    for path, real in reals.items():
        reaching.setdefault(real, []).append(path)
    kept = set()
    for real, paths in reaching.items():
        links = [p for p in paths if p.is_symlink()] if len(paths) > 1 else []
        own = [p for p in paths if p not in links]
        for link in links if own else ():
            why = f"the same file as {own[0]}, listed under its own name"
            _skip_link(SkippedLink(str(link), "file", real, why), skipped, stacklevel=3)
        kept.add((own or paths)[0])
    return [p for p in reals if p in kept]


def folders_apart(
    folders: Iterable[str | os.PathLike],
    skipped: list[SkippedLink] | None = None,
    apart: Iterable[str | os.PathLike] = (),
) -> list[Path]:
    """``folders``, listed apart (e.g. the class folders of a split), without the linked ones that lead into another
    or that share files with one of ``apart`` (e.g. the data's other split: :func:`overlap`).

    A link whose real path is another kept folder, or lies inside one, would list that folder's files a second time
    (under a second class): it is skipped with :func:`list_files`'s warning, as a link inside a folder is; so is a
    folder of ``folders`` whose real path lies in one of ``apart``, or holds one (a val class folder linked to train's
    scored training images). Folders that are no links are kept first; links are kept in the order given, each unless
    it leads into one kept before. A skipped link is added to ``skipped`` too, where given.
    """
    folders, apart = [Path(f) for f in folders], list(apart)
    own = []
    for folder in folders:
        other = overlap(folder, apart)
        if other is None:
            own.append(folder)
        else:
            why = f"the folder {os.path.realpath(other)}, listed apart"
            _skip_link(SkippedLink(str(folder), "folder", os.path.realpath(folder), why), skipped, 2)
    kept = {f: os.path.realpath(f) for f in own if not f.is_symlink()}
    for link in (f for f in own if f.is_symlink()):
        real = os.path.realpath(link)
        other = next((o for o in kept.values() if _inside(real, o)), None)
        if other is None:
            kept[link] = real
        else:
            _skip_link(SkippedLink(str(link), "folder", real, f"the folder {other}, listed apart"), skipped, 2)
    return [f for f in folders if f in kept]


def overlap(folder: str | os.PathLike, others: Iterable[str | os.PathLike]) -> Path | None:
    """The first of ``others`` that ``folder`` shares files with once symbolic links are followed (the real path of
    one is the other's or lies in it: a split folder, or one of its class folders, linked into the other split), or
    None."""
    real = os.path.realpath(folder)
    for other in map(Path, others):
        other_real = os.path.realpath(other)
        if _inside(real, other_real) or _inside(other_real, real):
            return other
    return None


def check_apart(folder: Path, apart: Iterable[str | os.PathLike]) -> None:
    """ValueError where the split folder ``folder`` shares files with one of ``apart`` (the other split's folders)
    once symbolic links are followed (:func:`overlap`): a val/ linked to train/ scored training images, without a
    word (skipping each of its folders instead would leave none, and say why only in warnings).

    Raises:
        ValueError: naming both folders and their real paths.
    """
    other = overlap(folder, apart)
    if other is not None:
        raise ValueError(
            f"{folder} and {other} share their files once symbolic links are followed (real paths "
            f"{os.path.realpath(folder)} and {os.path.realpath(other)}): each split needs files of its own (scores "
            "of training images say nothing of unseen ones)"
        )


def list_images(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Files as given, and the image files under the folders given (:func:`list_files`: recursive, sorted, hidden
    names left out, a linked folder that loops or leads into another folder given skipped with a warning).

    A file named explicitly is kept whatever its extension: the reader says so if it does not decode.

    Each file is listed once: inputs that overlap (a folder and its subfolder, a folder and a file in it, a folder
    given twice or through a link) gave their common files twice before, so the scripts wrote two predictions,
    drawings or label maps of one image. A file is one real path (:func:`os.path.realpath`); hard links are separate
    files, as no name of them is the original (``cp -l`` and backup tools make them for copies users see as
    separate). It keeps its own name, the first path that reaches it (in the order of ``paths``, each folder's files
    sorted) whose last part is no symbolic link: a symbolic link to a file listed so is skipped with a warning naming
    the link and its target, as a link into another folder given is (were the link kept, the file's own name would
    get no output). A link to a file listed by no other path is kept under the link's name, the first such link.

    One path, not in a list (``list_images("photos")``), is read as the list of it (a string was iterated as its
    characters: ``'p' does not exist``, and ``"/data"``'s first, ``'/'``, listed the whole disk).

    Raises:
        ValueError: a path that does not exist, or a folder without image files.
    """
    paths = _path_list(paths)
    folders = [p for p in paths if p.is_dir()]
    found: dict[Path, str] = {}  # path -> its real path
    for path in paths:
        if path.is_dir():
            others = [f for f in folders if f != path]
            listed = [p for p in list_files(path, others) if is_image_file(p)]
            if not listed:
                raise ValueError(f"no image files ({', '.join(IMAGE_EXTENSIONS)}) under {str(path)!r}")
        elif path.is_file():
            listed = [path]
        else:
            raise ValueError(_no_images_at(path))
        for image in listed:
            found.setdefault(image, os.path.realpath(image))
    return _one_per_file(found)


def _no_images_at(path: Path) -> str:
    """The error for a path of images (:func:`list_images`) that is neither a file nor a folder."""
    return f"{str(path)!r} does not exist (expected an image file or a folder of images)"


def check_image_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> None:
    """ValueError for the first of ``paths`` that :func:`list_images` would refuse as not there, in its words, without
    listing the folders: a script's check before it loads torch (list_images checks again as it reads them).

    Raises:
        ValueError: a path that is neither a file nor a folder.
    """
    for path in _path_list(paths):
        if not (path.is_file() or path.is_dir()):
            raise ValueError(_no_images_at(path))


def _path_list(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """``paths`` as Paths, one path (a string, bytes or a path object, itself no list) as the list of it."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    return [Path(os.fsdecode(p)) for p in paths]


def check_image_source(source: str | os.PathLike) -> None:
    """ValueError for a source of images (``extract_features.py --input``: an image folder, an image file, or a text
    file listing images, whose lines :func:`read_list` checks) that is not there.

    Raises:
        ValueError: ``source`` does not exist.
    """
    if not Path(source).exists():
        raise ValueError(
            f"input must be an image folder, an image file or a text file of image paths, got {str(source)!r}"
        )


def expected_data_dir(cfg: Any, split: str, layout: Mapping[str, str], dataset: str) -> str:
    """What ``data_dir`` should be (:func:`check_folder`'s ``expected``) where ``split``'s paths come from it: each
    ``data.{split}_{key}`` of ``layout`` left unset is read from ``data_dir/layout[key]``. Where one of them is set,
    the other is named by its key (the one a user forgot); else the folder is one in ``dataset``'s layout."""
    unset = [key for key in layout if not getattr(cfg, f"{split}_{key}")]
    if len(unset) == 1:
        key, path = f"data.{split}_{unset[0]}", layout[unset[0]]
        return f"a folder holding {path}: {key} is not set, so it is read from data.data_dir/{path}; set {key}"
    return f"a folder in {dataset}'s layout holding {' and '.join(layout.values())}"


def check_folder(path: str | os.PathLike, option: str, expected: str) -> None:
    """ValueError for a folder to read (``option``: ``--data-dir``, ...) that is not one: not there, or a file (an
    archive not yet unpacked), said with ``expected``, what the folder should hold.

    Raises:
        ValueError: ``path`` is a file, or does not exist.
    """
    path = Path(path)
    if path.is_file():
        raise ValueError(f"{option} {path} is a file; expected {expected}")
    if not path.is_dir():
        raise ValueError(f"{option} {path} does not exist; expected {expected}")


# the weights files timm's save_for_hf writes beside its config.json, in the order timm's local-dir: reader takes them
# (save_for_hf's default, safe_serialization=False, writes pytorch_model.bin)
TIMM_FOLDER_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def check_model_path(path: str | os.PathLike, what: str, meant: str | None = "best.safetensors") -> None:
    """ValueError for a model file to read (``what``: ``checkpoint``, ``--onnx``, ...) that is not a file: not there,
    or a folder; a folder that holds a file named ``meant`` (a training run's weights), or else the weights file of a
    folder ``timm.models.save_for_hf`` wrote (:data:`TIMM_FOLDER_WEIGHTS`), is named with it, the file likely meant.

    Raises:
        ValueError: ``path`` does not exist or is not a file.
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{what} {str(path)!r} does not exist")
    if not path.is_file():
        names = (meant, *TIMM_FOLDER_WEIGHTS) if meant else ()
        inside = next((path / name for name in names if (path / name).is_file()), None)
        hint = f" (did you mean {str(inside)!r}?)" if inside is not None else ""
        raise ValueError(f"{what} {str(path)!r} is not a file{hint}")


def read_list(path: str | os.PathLike) -> list[Path]:
    """The files a list names, one a line, each as written (:func:`_lines`: only the line ending and a byte order mark
    are removed), so spaces and a leading ``#`` belong to the name; blank lines (nothing but spaces) are skipped. A
    relative path is read from the list's folder, made absolute (``..`` removed as written; a link keeps its name);
    bytes that are not UTF-8 are kept (:func:`os.fsdecode`).

    Raises:
        ValueError: the list holds a NUL byte, which no path holds (a binary file: an image Pillow cannot open), names
            nothing, or names a path that is not a file (the first named, with why: not there, or a folder): every
            image would fail, and the run exit 0.
    """
    source = Path(path)
    raw = _lines(source)
    if any(b"\0" in line for line in raw):
        raise ValueError(
            f"{str(source)!r} is not a text list of paths (it holds NUL bytes, which no path holds): an image "
            "Pillow cannot open? convert it to PNG or JPEG"
        )
    lines = [os.fsdecode(line) for line in raw]
    paths = [Path(os.path.abspath(source.parent / line)) for line in lines if line.strip()]
    if not paths:
        raise ValueError(f"the list {str(source)!r} names no images (expected one path per line)")
    absent = [p for p in paths if not p.is_file()]
    if absent:
        what = "a folder" if absent[0].is_dir() else "not there"
        raise ValueError(
            f"the list {str(source)!r} names {len(absent)} paths that are not image files, e.g. {str(absent[0])!r} "
            f"({what}; a relative path is read from the list's folder, {str(source.parent)!r})"
        )
    return paths


def read_names(path: str | os.PathLike) -> list[str]:
    """The names a UTF-8 text file lists, one a line, in order (``predict.py --onnx --classes``), each as written
    (:func:`_lines`); blank lines (nothing but spaces) are skipped.

    Raises:
        ValueError: a file that is not UTF-8 text, that names nothing, or that names one twice (two outputs would
            print as one class); naming the file.
    """
    source = Path(path)
    try:
        names = [line.decode("utf-8") for line in _lines(source)]
    except UnicodeDecodeError as e:
        raise ValueError(f"{source} is not UTF-8 text: {e}") from None
    names = [name for name in names if name.strip()]
    if not names:
        raise ValueError(f"{source} names nothing (expected one name per line)")
    twice = [name for name, count in Counter(names).items() if count > 1]
    if twice:
        raise ValueError(f"{source} names {', '.join(map(repr, twice))} more than once")
    return names


def _lines(path: Path) -> list[bytes]:
    """The lines of a text file, each as written: only its line ending (``\\n`` or ``\\r\\n``) is removed, and a
    UTF-8 byte order mark at the start of the file (Windows Notepad writes one; it was read as part of the first
    line)."""
    return [line.removesuffix(b"\r") for line in path.read_bytes().removeprefix(codecs.BOM_UTF8).split(b"\n")]


def printable_path(path: str | os.PathLike) -> str:
    """``path`` as text any UTF-8 writer takes, one to one: bytes of a file name that are not UTF-8 as ``\\xNN``
    escapes and a backslash as ``\\x5c``, so that no two paths give one text (the name ``x\\xff.png`` and the bytes
    ``x``, 0xff, ``.png`` both gave ``x\\xff.png``: one feature file, two CSV rows of one path). Other names are
    unchanged. The rule of every output that records image paths as text (feature file names, predict.py's CSV,
    failures.txt, warnings); JSON outputs keep the exact name (its escapes are JSON's)."""
    return os.fsencode(path).replace(b"\\", b"\\x5c").decode("utf-8", errors="backslashreplace")


NAME_MAX = 255  # the bytes of a file name ext4, XFS, Btrfs and APFS take ([Errno 36] File name too long beyond)


def fitting_name(stem: str, suffix: str = "", limit: int = NAME_MAX) -> str:
    """``stem + suffix``, or, where its bytes (:func:`os.fsencode`) exceed ``limit``, ``stem`` cut at a character
    followed by ``~`` and the first 16 hex digits of the SHA-256 of the whole ``stem`` before ``suffix``: a name the
    filesystem takes, the same for the same ``stem``, and another for another (two cut alike differ in the hash's 64
    bits)."""
    name = stem + suffix
    if len(os.fsencode(name)) <= limit:
        return name
    digest = hashlib.sha256(os.fsencode(stem)).hexdigest()[:16]
    room = limit - len(os.fsencode(suffix)) - 1 - len(digest)  # the bytes of stem kept
    kept = sum(size <= room for size in itertools.accumulate(len(os.fsencode(c)) for c in stem))
    return f"{stem[:kept]}~{digest}{suffix}"


def label_image(labels: np.ndarray, palette: Sequence[Sequence[int]]) -> Image.Image:
    """A label map [H, W] as a PNG-ready image: palette mode (the file's values are the labels, its colours the
    classes') for up to 256 classes, 16-bit grayscale beyond."""
    if len(palette) > 256:
        return Image.fromarray(labels.astype(np.uint16))
    image = Image.fromarray(labels.astype(np.uint8), mode="P")
    image.putpalette([v for colour in palette for v in colour])
    return image


def json_bytes(value: Any, indent: int | None = None) -> bytes:
    """``value`` as strict JSON (RFC 8259 has no NaN or infinity), UTF-8: non-finite floats become null.

    For the JSON files users read with any tool (``eval.json``, ``detections.json``, extraction settings);
    Python's ``json.dumps`` would write ``NaN``, which strict parsers refuse.
    """
    return json.dumps(_finite_or_null(value), indent=indent, allow_nan=False).encode()


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_null(v) for v in value]
    return value


def _same(a: Path, b: Path) -> bool:
    """Whether two resolved paths are one file: equal, or hard links to the same inode."""
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def check_output(
    path: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None] = (),
    *,
    option: str = "--output",
    folder: bool = False,
    names: Iterable[str] = (),
) -> None:
    """Check, before any work, that writing ``path`` can succeed and destroys no input, nor a training run.

    Paths are compared after resolving symlinks and relative parts (and hard links by inode). A file ``path`` that is
    one of a training run's in its folder (:func:`training_run_of`: ``--output RUN/resume.pt`` once wrote a CSV over
    the run's resume file) is refused; a folder's ``names`` are the caller's own files (the run engine's, when it
    checks its own run folder), and files beside a run's (an evaluation's ``eval.json``) are fine.

    Args:
        path: the file (``folder=False``) or the folder (``folder=True``) the caller writes.
        inputs: the files and folders the caller reads (None entries are skipped). A folder counts as read
            whole: an output inside it would be read back as input on the next run. None may lie inside an output
            of ``names`` (a folder the caller writes, or empties with ``--overwrite``), as given or resolved.
        option: how the user named ``path``, for the message.
        folder: ``path`` is a folder.
        names: for a folder, the names of the files (and folders of files) written in it.

    Raises:
        ValueError: one line naming ``option``: an output would replace an input or lie inside an input
            folder, or an input lies inside an output folder; ``path`` is a folder where a file is expected or a
            file where a folder is expected; a file ``path`` is a file of a training run; the nearest existing
            folder above it is a file or cannot be written; a folder of ``names`` in it cannot be written.
    """
    given = Path(path)
    out = given.resolve()
    if folder and out.exists() and not out.is_dir():
        raise ValueError(f"{option} {given} is a file; expected a folder")
    if not folder and out.is_dir():
        raise ValueError(f"{option} {given} is a folder; expected a file name")
    written = [out / name for name in names] if folder else [out]
    for source in (Path(p) for p in inputs if p is not None):
        real = source.resolve()
        located = real if source.name in ("", "..") else source.absolute().parent.resolve() / source.name  # a link
        cleared = _cleared_by([located, real], written if folder else [])
        if cleared is not None:
            shown = source if located == real else f"{source} (a link to {real})"
            raise ValueError(
                f"{option} {given}: the input {shown} lies inside {cleared}, which this run writes or --overwrite "
                f"empties: move it, or choose another {option}"
            )
        for target in written + ([out] if folder else []):
            if _same(target, real) and not real.is_dir():
                raise ValueError(f"{option} {given}: writing {target} would replace the input {source}")
            if real.is_dir() and target.is_relative_to(real):
                raise ValueError(
                    f"{option} {given} lies inside the input folder {source}: what it writes would be read as input; "
                    "choose an output outside it"
                )
    run = None if folder else training_run_of(out)
    if run is not None:
        shown = f"{given} (a link to {out})" if given.is_symlink() else given
        raise ValueError(f"{option} {shown} is a file of the training run in {run}: choose another {option}")
    existing = out if folder and out.exists() else out.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{option} {given}: {existing} is a file, not a folder")
    # the folders of ``names`` already there too: one that cannot be written (read-only drawings or features) failed
    # only after the work, naming a bare file, with --overwrite's removal of the earlier outputs begun
    for target in [existing, *(path for path in written if folder and path.is_dir())]:
        if not os.access(target, os.W_OK | os.X_OK):
            raise ValueError(f"{option} {given}: no permission to write in {target}")


def _cleared_by(input_paths: list[Path], written: list[Path]) -> Path | None:
    """The path of ``written`` (what a run writes in its output folder; a folder of them it empties with
    ``--overwrite``) that an input lies in, or is as a folder; None when it lies in none. ``input_paths``: where the
    input is given (a link itself: emptying the folder would remove it) and its real path. An input file that is
    one of ``written`` is :func:`check_output`'s "would replace"."""
    for target in written:
        for path in input_paths:
            if path.is_relative_to(target) and (path != target or path.is_dir()):
                return target
    return None


NUMBERED = re.compile(r"\d{5,}_.*\.png", re.DOTALL)  # numbered_name's (the temporary file of one is hidden)


def numbered_name(index: int, path: str | os.PathLike) -> str:
    """The file name ``detect.py`` and ``segment.py`` give what they draw of the ``index``-th image (0-based) at
    ``path``: ``<index, 5 digits>_<name without its extension>.png``, cut to :data:`NAME_MAX` bytes where longer
    (:func:`fitting_name`; their ``sources.json`` maps it back)."""
    return fitting_name(f"{index:05d}_{Path(path).stem}", ".png")


def _visible(folder: Path) -> list[Path]:
    """What ``folder`` holds (recursive, sorted), hidden names (:func:`is_hidden`) and what lies under them left out."""
    return [p for p in sorted(folder.rglob("*")) if not any(map(is_hidden, p.relative_to(folder).parts))]


def _not_numbered(folder: Path) -> list[Path]:
    """What ``folder`` holds besides :func:`numbered_name` files and hidden names: the files and folders no run of
    ``detect.py`` or ``segment.py`` wrote there."""
    return [p for p in _visible(folder) if not (p.parent == folder and p.is_file() and NUMBERED.fullmatch(p.name))]


# What each script that writes into an --output-dir writes there, by task: one folder may be given to both
# scripts of a task (evaluate_detection.py after detect.py, with another checkpoint), so each takes the files of
# both for an earlier run's outputs (check_output_dir) and a folder only ever holds one run's. Another task's
# script's whole set of outputs (held_outputs) refuses the folder; one of its names alone is the user's own file
# (segment.py into a dataset root beside its images/). A name written by two tasks (eval.json, sources.json) is a
# task's only beside its task's other names.
OUTPUT_DIR_FILES: dict[str, dict[str, tuple[str, ...]]] = {
    "classification": {"evaluate.py": ("eval.json", "confusion_matrix.png")},
    "detection": {"detect.py": ("detections.json", "images", "sources.json"),
                  "evaluate_detection.py": ("eval.json", "detections.json")},
    "segmentation": {"segment.py": ("labels", "overlays", "classes.csv", "sources.json"),
                     "evaluate_segmentation.py": ("eval.json", "per_class_iou.csv")},
}  # fmt: skip
DRAWINGS = ("images", "labels", "overlays")  # of OUTPUT_DIR_FILES: the folders of numbered_name files
RECORD = "sources.json"  # of OUTPUT_DIR_FILES: a drawing script's record of its run (DrawingRecord)
# What each task keeps in its run folder beside the run engine's files (Task.output_files: its data scan's cache).
# A run of another task cannot read them: its --overwrite removes them (other_task_files).
TASK_FILES: dict[str, tuple[str, ...]] = {"classification": ("scan.json.gz",), "detection": (), "segmentation": ()}


def other_task_files(task: str) -> tuple[str, ...]:
    """The :data:`TASK_FILES` of every task but ``task``."""
    return tuple(name for other, names in TASK_FILES.items() if other != task for name in names)


# The run engine's files in a run folder, named here for the output checks, which import no torch (tests/test_io.py
# keeps them the names the engine writes): its settings, metrics and curves, what it saves (RUN_SAVES: the resume
# file and the weights) and the pending names of its best weights (RUN_PENDING: engine.checkpoint.pending), which a
# kill leaves and a resume completes or removes, and the last epoch's end kept while step checkpoints replace the resume
# file (engine.checkpoint.epoch_end).
RUN_SAVES = ("resume.pt", "last.safetensors", "best.safetensors", "ema.safetensors", "best_ema.safetensors")
RUN_PENDING = (".best.safetensors.pending", ".best_ema.safetensors.pending")
RUN_FILES = ("config.yaml", "metrics.csv", "curves.png", *RUN_SAVES, *RUN_PENDING, ".resume.pt.epoch")
TENSORBOARD_EVENTS = "events.out.tfevents."  # how the event files a run writes with train.tensorboard begin


def training_run_of(path: Path) -> Path | None:
    """The training run folder that resolved ``path`` is a file of (:data:`RUN_FILES`, any task's :data:`TASK_FILES`,
    the :data:`TASK_RECORD`, a TensorBoard event file), or None: a file a run writes or reads back there, which no
    script may replace.

    A run folder is one :func:`is_training_run` recognises. Other files in a run folder (an evaluation's ``eval.json``)
    are no run's.
    """
    if not is_run_file(path.name):
        return None
    return path.parent if is_training_run(path.parent) else None


def is_run_file(name: str) -> bool:
    """Whether ``name`` is the name of a file a training run writes or reads back in its folder: the engine's
    (:data:`RUN_FILES`, a TensorBoard event file), any task's (:data:`TASK_FILES`), the :data:`TASK_RECORD`."""
    runs = (*RUN_FILES, TASK_RECORD, *(kept for kept_by_task in TASK_FILES.values() for kept in kept_by_task))
    return name in runs or name.startswith(TENSORBOARD_EVENTS)


def is_training_run(folder: Path) -> bool:
    """Whether resolved ``folder`` is a training run's: the run's settings (``config.yaml``) beside something it saved
    (:data:`RUN_SAVES`), as every run that saved leaves it; a ``config.yaml`` or ``best.safetensors`` without the
    other (the user's settings, a converted checkpoint) is no run's."""
    return (folder / "config.yaml").is_file() and any((folder / save).is_file() for save in RUN_SAVES)


# Of OUTPUT_DIR_FILES, what each task's evaluate script writes beside a checkpoint by default (a task's
# Task.evaluation_files).
EVALUATIONS_BY_TASK: dict[str, tuple[str, ...]] = {
    task: OUTPUT_DIR_FILES[task][script]
    for task, script in (
        ("classification", "evaluate.py"),
        ("detection", "evaluate_detection.py"),
        ("segmentation", "evaluate_segmentation.py"),
    )
}


# A run's record, in its folder, of the files its task writes there that the tables above do not name (those of a
# task swinlite does not ship: Task.output_files, Task.evaluation_files): --overwrite of any task removes them
# (recorded_task_files), as it removes the tables' names; a name no run recorded (the user's file) stays.
TASK_RECORD = "task_files.json"


def unknown_task_files(names: Iterable[str]) -> list[str]:
    """Those of ``names`` (a task's files) that neither :data:`TASK_FILES` nor :data:`EVALUATIONS_BY_TASK` name."""
    known = {name for table in (TASK_FILES, EVALUATIONS_BY_TASK) for names_of in table.values() for name in names_of}
    return [name for name in names if name not in known]


def task_record_problem(names: Any) -> str | None:
    """Why ``names`` is not what a :data:`TASK_RECORD` may name, or None: a sorted list of plain file names of its own
    folder, none of them a file swinlite names itself (the run engine's :data:`RUN_FILES`, the record, the shipped
    tasks' :data:`TASK_FILES` and :data:`EVALUATIONS_BY_TASK`, TensorBoard's events, a hidden name such as the
    output folder's lock), which ``--overwrite`` removes by their tables, or never."""
    if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
        return "expected a non-empty list of file names"
    if names != sorted(set(names)):
        return "expected its names sorted, each once"
    for name in names:
        if not name or "/" in name or "\\" in name or is_hidden(name):  # is_hidden: ".", ".." too
            return f"{name!r} is not a plain file name of its folder"
        if name in (*RUN_FILES, TASK_RECORD) or not unknown_task_files([name]) or name.startswith(TENSORBOARD_EVENTS):
            return f"{name!r} is a file swinlite itself names"
    return None


def recorded_task_files(folder: str | os.PathLike) -> list[str]:
    """The file names the :data:`TASK_RECORD` in ``folder`` names (none where there is no record).

    Raises:
        ValueError: the record is not exactly what :func:`record_task_files` writes (a file the user wrote or edited,
            or copied in: the names it holds are not trusted to be a run's files, which ``--overwrite`` removes).
    """
    path = Path(folder) / TASK_RECORD
    if not os.path.lexists(path):
        return []
    try:
        return _task_record(path)
    except ValueError as e:
        raise ValueError(
            f"{path} is no record of a run's task files ({e}); --overwrite would remove the files it names: move it "
            f"out of {folder}, or pass another --output-dir"
        ) from None


def _task_record(path: Path) -> list[str]:
    """The names the :data:`TASK_RECORD` ``path`` holds; ValueError saying how it differs from what
    :func:`record_task_files` writes."""
    if path.is_symlink() or not path.is_file():
        raise ValueError("expected a regular file")
    data = path.read_bytes()
    try:
        record = json.loads(data)
    except ValueError:
        raise ValueError("expected JSON") from None
    names = record.get("files") if isinstance(record, dict) else None
    if problem := task_record_problem(names):
        raise ValueError(problem)
    if data != json_bytes({"files": names}, indent=1):
        raise ValueError('expected {"files": [...]} alone, as swinlite writes it')
    return names


def record_task_files(folder: str | os.PathLike, names: Iterable[str]) -> None:
    """Write ``names`` as the :data:`TASK_RECORD` of ``folder``, sorted; remove the record where there are none.

    Raises:
        ValueError: ``names`` holds one a record may not name (:func:`task_record_problem`).
    """
    names = sorted(set(names))
    path = Path(folder) / TASK_RECORD
    if not names:
        path.unlink(missing_ok=True)
    elif problem := task_record_problem(names):
        raise ValueError(f"cannot record the task's files in {path}: {problem}")
    else:
        atomic_write_bytes(path, json_bytes({"files": names}, indent=1))


def script_outputs(folder: str | os.PathLike) -> tuple[str, ...]:
    """The names of :data:`OUTPUT_DIR_FILES` that scripts wrote into the training run folder ``folder``: results of
    its weights, which a run replacing it removes (``--overwrite``), whichever task's it was. Every evaluate
    script's; a drawing script's (``detect.py``'s, ``segment.py``'s: those with :data:`DRAWINGS`) all together, and
    only where :func:`_whole` finds its run there (its drawings named by the ``sources.json`` beside them, as
    :func:`check_output_dir` tells a run's drawings, a killed run's too; with its drawings removed, its other files
    beside its record, as a removal killed after the drawings left them): a ``classes.csv``, ``sources.json`` or
    ``images/`` alone, or the user's ``images/`` beside ``segment.py``'s files, is the user's."""
    folder = Path(folder)
    names = [name for names in EVALUATIONS_BY_TASK.values() for name in names]
    for scripts in OUTPUT_DIR_FILES.values():
        for written in scripts.values():
            if any(name in DRAWINGS for name in written) and _whole(folder, written):
                names += written
    return tuple(dict.fromkeys(names))


def outputs_without_run(folder: str | os.PathLike) -> list[str]:
    """What scripts wrote into ``folder`` (:func:`script_outputs`: an evaluation's results, drawings) where it holds
    no file of a training run (:func:`is_run_file`): results of weights that are not there (``evaluate.py
    --checkpoint A/best.safetensors --output-dir F``), which a new run in ``folder`` would leave beside its own
    weights. Empty where there is a run's file: an evaluation of the folder's own weights, or one a run killed before
    its first save left beside its ``config.yaml``."""
    folder = Path(folder)
    if not folder.is_dir() or any(is_run_file(path.name) and path.is_file() for path in folder.iterdir()):
        return []
    return _present(folder, script_outputs(folder))


def _whole(folder: Path, written: tuple[str, ...]) -> bool:
    """Whether ``folder`` holds a run of the script that writes ``written``. A drawing script's (one with
    :data:`DRAWINGS`) where it holds drawings is there when the :data:`RECORD` beside them names every file of one of
    its drawings folders (the rule of :func:`_check_recorded`: a run killed after its first drawing left no other
    file, and is one), else when each of its files and an (empty) drawings folder or its record
    (:func:`_drawing_record`) are: a kill between :func:`remove_outputs`' removal of the drawings and of the record
    left the record and the other files, which ``train.py --overwrite`` then kept, and every script refused; another
    script's when each of its files is."""
    drawings = [name for name in written if name in DRAWINGS]
    drawn = [folder / name for name in drawings if _held(folder, name)]
    if drawn:
        named = recorded_names(folder)
        return any(not _unrecorded(path, named) for path in drawn)
    made = not drawings or any((folder / name).is_dir() for name in drawings) or _drawing_record(folder, written)
    return made and all((folder / name).is_file() for name in written if name not in DRAWINGS)


def _drawing_record(folder: Path, written: tuple[str, ...]) -> bool:
    """Whether the :data:`RECORD` in ``folder`` is one that a run of the drawing script writing ``written`` wrote
    (:class:`DrawingRecord`): its keys drawings' file names (:data:`NUMBERED`) and :data:`RECORD_SCRIPT` alone, which,
    where there, names that script (a finished run's record names none)."""
    record = _record(folder)
    scripts = [script for scripts in OUTPUT_DIR_FILES.values() for script, names in scripts.items() if names == written]
    keys_drawn = all(key == RECORD_SCRIPT or NUMBERED.fullmatch(key) for key in record)
    return bool(record) and keys_drawn and record.get(RECORD_SCRIPT) in (None, *scripts)


def _present(folder: Path, patterns: Iterable[str]) -> list[str]:
    """The names of what ``folder`` holds of the outputs ``patterns`` (glob patterns): files, and folders holding
    anything."""
    paths = [p for pattern in patterns for p in sorted(folder.glob(pattern))]
    return [p.name for p in paths if p.is_file() or p.is_dir() and _visible(p)]


def _held(folder: Path, name: str) -> bool:
    """Whether ``folder`` holds the output ``name`` (a glob pattern)."""
    return bool(_present(folder, [name]))


def _names(scripts: dict[str, tuple[str, ...]]) -> list[str]:
    """The names ``scripts`` (a task's of :data:`OUTPUT_DIR_FILES`) write, each once."""
    return list(dict.fromkeys(name for written in scripts.values() for name in written))


def shared_names(task: str) -> tuple[str, ...]:
    """The names of ``task``'s scripts (:data:`OUTPUT_DIR_FILES`) that another task's scripts write too
    (``eval.json``; ``sources.json``): which task's one is, only its task's other names beside it tell."""
    others = {name for other, scripts in OUTPUT_DIR_FILES.items() if other != task for name in _names(scripts)}
    return tuple(name for written in OUTPUT_DIR_FILES[task].values() for name in written if name in others)


def held_outputs(folder: str | os.PathLike, task: str) -> dict[str, list[str]]:
    """What ``folder`` holds of the outputs of scripts that are not ``task``'s, by script: another task's script's
    (:data:`OUTPUT_DIR_FILES`) where its whole set is there (:func:`_whole`: one of its names alone is the user's
    file), ``extract_features.py``'s or ``visualize.py``'s (:data:`FOLDER_FILES`) where one of its files is (its
    ``features/`` alone is no file of it: a run's ``features/`` is an extraction's folder of its own)."""
    folder = Path(folder)
    held: dict[str, list[str]] = {}
    for other, scripts in OUTPUT_DIR_FILES.items():
        for script, written in scripts.items():
            if other != task and _whole(folder, written):
                held[script] = [name for name in written if _held(folder, name)]
    for script, patterns in FOLDER_FILES.items():
        found = _present(folder, patterns)
        if any((folder / name).is_file() for name in found):
            held[script] = found
    return held


# What the scripts that write an --output folder of their own write there (glob patterns: visualize.py draws one
# bias map a stage). Each such folder holds one script's outputs of one run (check_folder_alone).
FOLDER_FILES: dict[str, tuple[str, ...]] = {
    "extract_features.py": ("settings.json", "embeddings.safetensors", "failures.txt", "features"),
    "visualize.py": ("bias_stage*.png", "features.png"),
}


def check_folder_alone(folder: str | os.PathLike, script: str, example: str) -> None:
    """Refuse, before any work, the folder ``script`` (of :data:`FOLDER_FILES`) would write its outputs into beside
    what they must not mix with: a training run (:func:`is_training_run`; ``train.py --overwrite`` replaces its
    weights and left features and plots of the old ones beside them), or another script's outputs (the other
    :data:`FOLDER_FILES` script's, an evaluation's or drawings: :func:`script_outputs`), two runs in one folder.

    Args:
        folder: the ``--output`` given.
        script: the script writing it.
        example: what to suggest beside a run's folder (``features``: ``RUN_features``; not inside it, where the
            outputs would outlive the weights they are of when the run is resumed or started over).

    Raises:
        ValueError: one line naming ``--output`` and what the folder is or holds.
    """
    given = Path(folder)
    real = given.resolve()
    if is_training_run(real):
        raise ValueError(
            f"--output {given} is a training run's folder (its --overwrite replaces the weights, and would leave these "
            f"outputs of the old ones): choose another --output, e.g. {real.parent / f'{real.name}_{example}'}"
        )
    others = [pattern for other, names in FOLDER_FILES.items() if other != script for pattern in names]
    found = _present(real, [*others, *script_outputs(real)])
    if found:
        raise ValueError(
            f"--output {given} holds another script's outputs ({', '.join(found)}): {script} writes a folder of its "
            "own; choose another --output"
        )


def check_output_dir(
    task: str,
    out: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None],
    overwrite: bool,
    option: str = "--output-dir",
) -> list[Path]:
    """Check ``out``, the ``--output-dir`` of a script of ``task`` (:data:`OUTPUT_DIR_FILES`), before any work;
    return what earlier runs of that task's scripts left in it, for the caller to remove (:func:`remove_outputs`)
    once its own checks have passed (or a :class:`DrawingRecord`).

    The run writes its own files, and ``--overwrite`` removes those of the task's other script too
    (evaluate_detection.py's detections.json beside detect.py's drawings of another checkpoint was a mix of two
    runs): :func:`check_output` is given all of them (no input may be replaced, nor lie in a folder that is
    emptied), and :func:`earlier_outputs` refuses a folder holding any unless ``overwrite`` (a folder of
    :data:`DRAWINGS` holding files no run wrote, or drawings its script's record of the run beside it does not name
    (:func:`_check_recorded`: a dataset's ``images/``), even then). A folder holding another script's outputs
    (:func:`held_outputs`: another task's, ``extract_features.py``'s, ``visualize.py``'s) is refused even with
    ``overwrite``, naming them (evaluate_detection.py --overwrite removed segment.py's sources.json and left its
    label maps beside its results), and so is one holding a name several tasks write (``eval.json``) without the
    other outputs that make it this task's (:func:`_check_shared`). A training run's own files are none of these:
    the evaluations write beside the checkpoint by default.

    Raises:
        ValueError: :func:`check_output`'s and :func:`earlier_outputs`' refusals, and those above, naming ``option``.
    """
    names = _names(OUTPUT_DIR_FILES[task])
    check_output(out, inputs, option=option, folder=True, names=names)
    theirs = held_outputs(out, task)
    if theirs:
        held = "; ".join(f"{script}'s outputs ({', '.join(found)})" for script, found in theirs.items())
        why = f"--overwrite replaces only {task}'s"
        raise ValueError(f"{option} {out} holds {held}: choose another --output-dir ({why})")
    _check_shared(Path(out), task, option)
    _check_numbered(Path(out), names, DRAWINGS, option)
    _check_recorded(Path(out), task, option)
    return [*earlier_outputs(out, names, overwrite, option), *_interrupted_writes(Path(out), names)]


def _interrupted_writes(folder: Path, names: list[str]) -> list[Path]:
    """The temporary files of :func:`atomic_write` a kill left in ``folder``: of the outputs ``names``, and any in the
    drawings folders among them (hidden, so not an earlier run's output that refuses the folder: a run killed before
    its first drawing was whole left ``labels/`` holding one, which ``--overwrite`` then kept). Removed with the
    earlier outputs, before the run's first write."""
    drawings = [folder / name for name in names if name in DRAWINGS]
    return [
        *(p for name in names for p in interrupted_writes(folder, name)),
        *(p for d in drawings for p in interrupted_writes(d)),
    ]


def _check_shared(folder: Path, task: str, option: str) -> None:
    """Refuse ``folder`` where it holds one of ``task``'s names that another task's scripts write too
    (:func:`shared_names`: ``eval.json``) beside none of ``task``'s own names (``eval.json`` beside
    ``confusion_matrix.png`` is classification's, beside ``segment.py``'s label maps segmentation's): it records no
    task, and removing it with ``--overwrite`` could remove another task's. A :data:`RECORD` that names
    ``task``'s drawing script as its writer (:func:`record_script`: that script's run killed before its first drawing)
    is ``task``'s."""
    shared = shared_names(task)
    if any(_held(folder, name) for name in _names(OUTPUT_DIR_FILES[task]) if name not in shared):
        return
    writer = record_script(folder)
    own = RECORD if writer is not None and writer == drawing_script(task) else None
    lone = next((name for name in shared if name != own and _held(folder, name)), None)
    if lone is None:
        return
    if lone == RECORD and writer in {drawing_script(other) for other in OUTPUT_DIR_FILES} - {None}:  # killed early
        raise ValueError(
            f"{option} {folder} holds {lone} alone, the record of a {writer} run (killed before its first drawing), "
            f"none of {task}'s outputs; move it, or choose another folder"
        )
    raise ValueError(
        f"{option} {folder} holds {lone} beside none of {task}'s other outputs: it may be another task's (several "
        f"tasks write a {lone}, and it records none); move it, or choose another folder"
    )


def _check_recorded(folder: Path, task: str, option: str) -> None:
    """Refuse ``folder`` where a :data:`DRAWINGS` folder of ``task``'s scripts holds a drawing that the record of the
    run beside it (:data:`RECORD`, which its script writes before its first drawing: :class:`DrawingRecord`) does not
    name: such a drawing is the user's (a dataset's ``images/`` of files named ``<n>_<name>.png``), which
    ``--overwrite`` removed as an earlier run's; the drawings of a run killed before its end are named, and replaced."""
    named = recorded_names(folder)
    for script, written in OUTPUT_DIR_FILES[task].items():
        for drawn in (folder / name for name in written if name in DRAWINGS and _held(folder, name)):
            lone = _unrecorded(drawn, named)
            if not lone:
                continue
            more = f" and {len(lone) - 1} more" if len(lone) > 1 else ""
            why = (f"{RECORD} beside it names no {lone[0]}{more}" if (folder / RECORD).is_file()
                   else f"no {RECORD} beside it")  # fmt: skip
            raise ValueError(
                f"{option} {folder}: {drawn} is not {script}'s output ({why}: {script} writes the {RECORD} naming its "
                "drawings before the first), so it is kept as yours, even with --overwrite: move it, or choose "
                "another folder"
            )


def _unrecorded(drawn: Path, named: set[str]) -> list[str]:
    """The names of what the drawings folder ``drawn`` holds (hidden names left out) that ``named`` (the drawings its
    :data:`RECORD` names: :func:`recorded_names`) does not name."""
    return [p.name for p in _visible(drawn) if p.name not in named]


def recorded_names(folder: Path) -> set[str]:
    """The drawings' file names that the :data:`RECORD` in ``folder`` names (none where it is missing or not a JSON
    object of them)."""
    return {name for name in _record(folder) if name != RECORD_SCRIPT}


def record_script(folder: Path) -> str | None:
    """The script that the :data:`RECORD` in ``folder`` names as its writer (:data:`RECORD_SCRIPT`), or None: a
    finished run's record, one written before it named its writer, or a file no script wrote."""
    script = _record(folder).get(RECORD_SCRIPT)
    return script if isinstance(script, str) else None


def _record(folder: Path) -> dict[str, Any]:
    """The :data:`RECORD` in ``folder`` (empty where it is missing or not a JSON object)."""
    try:
        record = json.loads((folder / RECORD).read_bytes())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def drawing_script(task: str) -> str | None:
    """``task``'s script that writes a :data:`RECORD` (:data:`OUTPUT_DIR_FILES`), or None where it has none."""
    return next((script for script, written in OUTPUT_DIR_FILES[task].items() if RECORD in written), None)


# The key of a DrawingRecord's first write that names its script ({"script": "detect.py", "00000_a.png": ...}): no
# drawing's file name (numbered_name), so a reader of the record as a mapping of drawings leaves it out.
RECORD_SCRIPT = "script"


class DrawingRecord:
    """A drawing script's record of its run (``detect.py``, ``segment.py``): :data:`RECORD` in its output folder, each
    drawing's file name (:func:`numbered_name`) -> the image it is drawn from.

    It is written before the first drawing, naming every drawing the run may write, so that the drawings of a run
    killed before its end are recognizably its (:func:`_check_recorded`): ``--overwrite`` replaces them. That first
    write also names ``script``, the one writing it (:data:`RECORD_SCRIPT`), so that a record a run killed before
    its first drawing left alone is recognizably its script's (:func:`_check_shared`). The script writes it again at
    its end with those it wrote (:attr:`drawn`).
    """

    def __init__(self, out: str | os.PathLike, earlier: list[Path], images: Sequence[Path], script: str) -> None:
        """``earlier``: an earlier run's outputs (:func:`check_output_dir`), removed before the first drawing;
        ``images``: the run's inputs, in order."""
        self.path = Path(out) / RECORD
        self.drawn: dict[str, str] = {}
        self._earlier = earlier
        self._planned = {numbered_name(index, path): str(path) for index, path in enumerate(images)}
        self._first = {RECORD_SCRIPT: script} | self._planned
        self._started = False

    def add(self, name: str) -> None:
        """Call before writing the drawings named ``name``: the first call removes the earlier outputs
        (:func:`remove_before_first_write`) and writes the record of every drawing the run may write."""
        if not self._started:
            remove_before_first_write(self._earlier)
            atomic_write_bytes(self.path, json_bytes(self._first, indent=1))
            self._started = True
        self.drawn[name] = self._planned[name]


def _check_numbered(folder: Path, names: list[str], numbered: Iterable[str], option: str) -> None:
    """Refuse ``folder`` where a folder of ``names`` among ``numbered`` holds anything but :func:`numbered_name`
    files (hidden names left out), or, beside a :data:`RECORD`, a drawing it does not name: the user's own files,
    which no run wrote (a numbered one in ``overlays/`` beside ``labels/`` that the record names all went with them)."""
    named = recorded_names(folder) if (folder / RECORD).is_file() else None
    for path in (folder / name for name in numbered if name in names and (folder / name).is_dir()):
        others = _not_numbered(path)
        if others:
            more = f" and {len(others) - 1} more" if len(others) > 1 else ""
            raise ValueError(
                f"{option} {folder}: {path} holds files no run wrote there ({others[0]}{more}; its "
                f"files are named <number>_<image name>.png): move them, or choose another folder"
            )
        unnamed = _unrecorded(path, named) if named is not None else []
        if unnamed:
            more = f" and {len(unnamed) - 1} more" if len(unnamed) > 1 else ""
            raise ValueError(
                f"{option} {folder}: {path} holds drawings no run wrote there ({RECORD} beside it names no "
                f"{unnamed[0]}{more}): move them, or choose another folder"
            )


def earlier_outputs(
    folder: str | os.PathLike,
    names: Iterable[str],
    overwrite: bool,
    option: str = "--output-dir",
    numbered: Iterable[str] = (),
) -> list[Path]:
    """The outputs among ``names`` that an earlier run left in ``folder`` (files, and folders holding anything).

    A run that only added its own files to them would leave a mix of two runs (the earlier run's drawings of images
    this one was not given, beside its own): they are refused, or with ``overwrite`` returned for the caller to
    remove (:func:`remove_outputs`) once its own checks have passed. The folders among ``names`` in ``numbered`` hold
    :func:`numbered_name` files only: one that holds anything else (the user's own images) is refused even with
    ``overwrite``, naming what it holds, as no run's outputs to replace. Hidden names in a folder (.DS_Store,
    .ipynb_checkpoints/: OS and tool metadata) are left out of both checks, and go with the folder it removes.

    Raises:
        ValueError: ``folder`` holds some and not ``overwrite``, or a ``numbered`` folder holds other files.
    """
    names = list(names)
    paths = [Path(folder) / name for name in names]
    found = [p for p in paths if p.is_file() or p.is_dir() and _visible(p)]
    _check_numbered(Path(folder), names, numbered, option)
    if found and not overwrite:
        raise ValueError(
            f"{option} {folder} holds an earlier run's {', '.join(p.name for p in found)}: pass --overwrite to "
            f"replace {'them' if len(found) > 1 else 'it'}, or choose another folder"
        )
    return found


def removal_order(paths: Iterable[Path]) -> list[Path]:
    """``paths`` (an earlier run's outputs) in the order :func:`remove_outputs` removes them, so that a kill between two
    removals leaves what the rerun's :func:`check_output_dir` takes for its task's, as it took the whole: first a name
    several tasks write that only the others beside it make a task's (``eval.json``: :func:`_check_shared`), then the
    drawings (:data:`DRAWINGS`), which the :data:`RECORD` beside them makes a run's (:func:`_check_recorded`), then the
    record, which the task's own names beside it make the task's, and those last. Removed in the order of
    :data:`OUTPUT_DIR_FILES`, a kill left ``evaluate_detection.py``'s ``eval.json``, or ``detect.py``'s record of a
    finished run (which names no script), alone: refused by every later run, ``--overwrite`` too."""
    shared = {name for task in OUTPUT_DIR_FILES for name in shared_names(task)} - {RECORD}

    def rank(path: Path) -> int:
        return 0 if path.name in shared else 1 if path.name in DRAWINGS else 2 if path.name == RECORD else 3

    return sorted(paths, key=rank)


def remove_outputs(paths: Iterable[Path]) -> None:
    """Remove the files and folders ``paths`` (an earlier run's outputs: :func:`earlier_outputs`), in
    :func:`removal_order`; an OSError names the file it failed at in full (``shutil.rmtree``'s names it as in its
    folder: ``00007_000008.png``)."""

    def failed(function: Callable[..., Any], name: str, error: OSError | tuple[type, OSError, Any]) -> None:
        error = error if isinstance(error, OSError) else error[1]  # onerror's sys.exc_info() (Python 3.11)
        raise OSError(error.errno, error.strerror, name) from error

    for path in removal_order(paths):
        if path.is_dir() and not path.is_symlink():
            if sys.version_info >= (3, 12):
                shutil.rmtree(path, onexc=failed)
            else:  # onerror: deprecated from 3.12 on
                shutil.rmtree(path, onerror=failed)
        else:
            path.unlink(missing_ok=True)


def remove_before_first_write(earlier: list[Path]) -> None:
    """For a script that writes its outputs one by one (``detect.py``, ``segment.py``): remove ``earlier`` (an earlier
    run's outputs, with ``--overwrite``) just before the first file, then empty the list, so that later calls remove
    nothing. A run that writes nothing (every image skipped, an error first) leaves them as they were, and one that
    writes leaves none of them beside its own."""
    remove_outputs(earlier)
    earlier.clear()


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it; restored at once
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Fill a temporary file beside ``path`` through ``write(file)``, fsync it, rename it over ``path``.

    A kill at any moment leaves either the previous file or the complete new one under ``path``; a
    kill mid-write leaves a ``.<name>.tmp*`` file beside it (:func:`_temporary_prefix`), which the next write does not
    need. A failed write (a full disk) removes the temporary file and raises an OSError that names ``path``. A ``path``
    that is a symlink stays one: the file it points to is replaced, beside it (on its filesystem, in the folder
    :func:`check_output` checked, which resolves it), as a shell's ``>`` would (the link was replaced by a regular
    file, and its target kept its old content).

    Args:
        path: destination; its folder is created if missing.
        write: fills the open binary file it is given.
    """
    given, path = path, Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path.name), dir=path.parent)
    try:
        with contextlib.suppress(OSError):  # a filesystem without locks writes as before
            fcntl.flock(fd, fcntl.LOCK_EX)  # held while it is written: interrupted_writes leaves a live write's alone
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno is not None and e.filename is None:  # a full disk names no file
            raise OSError(e.errno, e.strerror, str(given)) from e
        raise
    fsync_folder(path.parent)  # make the rename itself durable


def _temporary_prefix(name: str) -> str:
    """How the name of :func:`atomic_write`'s temporary file of the file ``name`` begins: ``.<name>.tmp``, ``name`` cut
    (:func:`fitting_name`) where the whole, with the 8 random characters :func:`tempfile.mkstemp` adds, would exceed
    :data:`NAME_MAX` bytes (a file whose name fitted failed with [Errno 36] File name too long: its temporary file's
    did not)."""
    return "." + fitting_name(name, ".tmp", NAME_MAX - len(".") - 8)


def interrupted_writes(folder: Path, name: str | None = None, recursive: bool = False) -> list[Path]:
    """The temporary files :func:`atomic_write` left in ``folder`` (``recursive``: and below it) where a kill broke
    off its write, of the file ``name`` (:func:`_temporary_prefix`) or of any: ``.<name>.tmp*``, never needed again
    (the file under its name is whole). Not one another process is writing now (:func:`_abandoned`): a second
    ``predict.py`` into the same CSV removed the first one's, which then failed. An empty list for a folder that does
    not exist."""
    pattern = f"{glob.escape(_temporary_prefix(name))}*" if name is not None else ".*.tmp*"
    return sorted(p for p in (folder.rglob(pattern) if recursive else folder.glob(pattern)) if _abandoned(p))


def _abandoned(path: Path) -> bool:
    """Whether no write holds the temporary file ``path`` (:func:`atomic_write` holds its ``flock`` while it writes;
    the system releases it when the writer ends in any way, a kill too). False for a file gone meanwhile."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError:  # a filesystem without locks: as before them, the name alone
        return True
    finally:
        os.close(fd)


def remove_interrupted_writes(path: str | os.PathLike) -> None:
    """Remove the temporary files of writes of ``path`` that a kill broke off (:func:`interrupted_writes`): a killed
    run left one of the file's size beside it per kill. Where ``path`` is a symlink, those beside the file it names,
    where :func:`atomic_write` writes."""
    real = Path(os.path.realpath(path))
    for stale in interrupted_writes(real.parent, real.name):
        stale.unlink(missing_ok=True)


def fsync_folder(folder: str | os.PathLike) -> None:
    """Make a rename in ``folder`` durable (a no-op where the filesystem cannot fsync a folder)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot fsync a folder
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(data))


def atomic_write_png(path: str | os.PathLike, image: Image.Image) -> None:
    """Write ``image`` to ``path`` as a PNG, atomically (see :func:`atomic_write`)."""
    atomic_write(path, lambda f: image.save(f, format="PNG"))
