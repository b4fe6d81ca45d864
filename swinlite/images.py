"""Image files: which files are images, how one is decoded, and a Dataset over a list of them.

One set of rules for every reader (training, evaluation, prediction, feature extraction, detection):

- an image file is one whose extension (any case) is in :data:`IMAGE_EXTENSIONS`, torchvision's
  ``ImageFolder`` list;
- :func:`load_rgb` decodes it as 8-bit RGB, upright (EXIF orientation), with high-bit-depth and float
  pixels scaled, not clipped (see its docstring for the rules);
- :func:`list_images` expands folders to their image files (:func:`list_files`: recursive, sorted, hidden
  names left out, linked folders followed once, never in a loop nor into another folder the caller lists).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image, ImageOps
from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS

IMAGE_EXTENSIONS: tuple[str, ...] = IMG_EXTENSIONS


def is_image_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` has an image extension (``.JPG`` and ``.png`` alike)."""
    return str(path).lower().endswith(IMAGE_EXTENSIONS)


def _float_to_uint8(pixels: np.ndarray, path: str | os.PathLike) -> np.ndarray:
    """Float pixels (H, W) -> uint8: 0..1 is scaled to 0..255, 0..255 is kept; any other range is an error."""
    if not np.isfinite(pixels).all():
        raise ValueError(f"{path}: float image holds NaN or infinite pixels")
    low, high = float(pixels.min()), float(pixels.max())
    if low < 0 or high > 255:
        raise ValueError(
            f"{path}: float image with pixels in [{low:g}, {high:g}]; expected 0..1 or 0..255 (convert it to 8 bits)"
        )
    scale = 255.0 if high <= 1.0 else 1.0
    return np.clip(pixels * scale + 0.5, 0, 255).astype(np.uint8)


def load_rgb(path: str | os.PathLike) -> Image.Image:
    """Open an image as 8-bit RGB, upright, whatever its mode.

    - The EXIF orientation is applied (photos from phones are stored sideways).
    - 16- and 32-bit integer images (PNG ``I;16``, ``I``) are scaled from 0..65535 to 0..255, not clipped.
    - Float images (``F``, e.g. a 32-bit float TIFF) are scaled by their range: pixels all within 0..1 are
      multiplied by 255; pixels within 0..255 (with some above 1) are kept; negative pixels, pixels above 255,
      NaN or infinity are a ValueError naming the file (no range can be assumed for them). An image in
      0..255 whose every pixel is at most 1 is read as a 0..1 image: the two cannot be told apart.
    - Transparent palette images go through RGBA first; alpha is dropped.

    Raises:
        ValueError: float pixels outside the ranges above. PIL's own errors for files that are not images.
    """
    with Image.open(path) as img:
        img = ImageOps.exif_transpose(img)
        if img.mode.startswith("I;16") or img.mode == "I":
            pixels = np.asarray(img, dtype=np.float64)  # (H, W) in 0..65535
            img = Image.fromarray(np.clip(pixels / 257.0 + 0.5, 0, 255).astype(np.uint8))
        elif img.mode == "F":
            img = Image.fromarray(_float_to_uint8(np.asarray(img, dtype=np.float64), path))  # (H, W) uint8
        elif img.mode == "P" and "transparency" in img.info:
            img = img.convert("RGBA")
        return img.convert("RGB")


def _inside(path: str, folder: str) -> bool:
    """Whether real path ``path`` is ``folder`` or lies under it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def list_files(folder: str | os.PathLike, others: Iterable[str | os.PathLike] = ()) -> list[Path]:
    """Files under ``folder`` (recursive), sorted, hidden names (``.*``) left out.

    Linked folders are followed, each real folder once. Two kinds of link are skipped, with a warning naming
    the link and its target: a link back to a folder that encloses it (``folder`` itself or above it: a loop,
    which would also list the folder's siblings), and a link into one of ``others``, folders the caller lists
    apart (e.g. the other class folders of a split: their files are theirs, not this folder's).

    Args:
        folder: the folder to list.
        others: the folders the caller lists besides ``folder``.
    """
    root = os.path.realpath(folder)
    apart = [real for real in map(os.path.realpath, others) if not _inside(root, real)]  # not folder's own parents
    files, seen = [], {root}
    for parent, dirs, names in os.walk(folder, followlinks=True):
        parent_real = os.path.realpath(parent)
        keep = []
        for name in sorted(d for d in dirs if not d.startswith(".")):
            path = os.path.join(parent, name)
            real = os.path.realpath(path)
            other = next((o for o in apart if _inside(real, o) and not _inside(real, root)), None)
            if _inside(parent_real, real) or _inside(root, real) or other is not None:
                why = f"the folder {other}, listed apart" if other else "a loop back to an enclosing folder"
                warnings.warn(f"skipping linked folder {path} -> {real}: {why}", stacklevel=2)
            elif real not in seen:  # a folder reached through another link already is listed once
                seen.add(real)
                keep.append(name)
        dirs[:] = keep
        files += [Path(parent, n) for n in names if not n.startswith(".")]
    return sorted(files)


def list_images(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Files as given, and the image files under the folders given (:func:`list_files`: recursive, sorted, hidden
    names left out, a linked folder that loops or leads into another folder given skipped with a warning).

    A file named explicitly is kept whatever its extension: the reader says so if it does not decode.

    Raises:
        ValueError: a path that does not exist, or a folder without image files.
    """
    paths = [Path(p) for p in paths]
    folders = [p for p in paths if p.is_dir()]
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            others = [f for f in folders if f != path]
            images = [p for p in list_files(path, others) if is_image_file(p)]
            if not images:
                raise ValueError(f"no image files ({', '.join(IMAGE_EXTENSIONS)}) under {str(path)!r}")
            found += images
        elif path.is_file():
            found.append(path)
        else:
            raise ValueError(f"{str(path)!r} does not exist (expected an image file or a folder of images)")
    return found


class ImageItem(NamedTuple):
    """One item of :class:`ImageFiles`: the image, or why it could not be read."""

    index: int
    image: torch.Tensor | None  # the transformed image, None when it could not be read
    size: tuple[int, int] | None  # (H, W) as decoded, upright
    error: str | None  # why it could not be read


class ImageFiles(Dataset):
    """Images of a list of files through ``transform``, each as an :class:`ImageItem`.

    A file that does not decode gives an item with the reason instead of an exception, so a loader with
    ``collate_fn=list`` carries on and the caller reports it.

    Args:
        paths: the files.
        transform: PIL RGB image -> tensor.
    """

    def __init__(self, paths: list[Path], transform: Callable[[Image.Image], torch.Tensor]) -> None:
        self.paths = paths
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> ImageItem:
        try:
            rgb = load_rgb(self.paths[i])
            return ImageItem(i, self.transform(rgb), (rgb.height, rgb.width), None)
        except Exception as e:  # PIL raises many types for files that are not images or are broken
            return ImageItem(i, None, None, f"{type(e).__name__}: {e}")
