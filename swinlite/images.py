"""Image files: which files are images, how one is decoded, and a Dataset over a list of them.

One set of rules for every reader (training, evaluation, prediction, feature extraction, detection):

- an image file is one whose extension (any case) is in :data:`IMAGE_EXTENSIONS`, torchvision's
  ``ImageFolder`` list;
- :func:`load_rgb` decodes it as 8-bit RGB, upright (EXIF orientation), with high-bit-depth and float
  pixels scaled, not clipped (see its docstring for the rules); :func:`upright_size` reads that size from the
  header;
- :func:`list_images` expands folders to their image files (:func:`list_files`: recursive, sorted, hidden
  names left out, linked folders followed once, never in a loop nor into another folder the caller lists).

These rules live in :mod:`swinlite.files` (no torch: the ONNX predictor reads images through them too) and are
re-exported here; :class:`ImageFiles` is the Dataset over them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

import torch
from PIL import Image
from torch.utils.data import Dataset

from .files import (
    IMAGE_EXTENSIONS,
    folders_apart,
    is_image_file,
    list_files,
    list_images,
    load_rgb,
    unreadable,
    upright_size,
)
from .io import weights_kind

__all__ = [
    "IMAGE_EXTENSIONS",
    "ImageFiles",
    "ImageItem",
    "LeftOut",
    "evaluated_data",
    "folders_apart",
    "is_image_file",
    "left_out_report",
    "list_files",
    "list_images",
    "load_rgb",
    "readable_item",
    "split_left_out",
    "unreadable",
    "upright_size",
]


class ImageItem(NamedTuple):
    """One item of :class:`ImageFiles`: the image, or why it could not be read."""

    index: int
    image: torch.Tensor | None  # the transformed image, None when it could not be read
    size: tuple[int, int] | None  # (H, W) as decoded, upright
    error: str | None  # why it could not be read


class ImageFiles(Dataset):
    """Images of a list of files through ``transform``, each as an :class:`ImageItem`.

    A file that does not decode, or that the transform refuses with a ValueError, gives an item with the reason
    instead of an exception, so a loader with ``collate_fn=list`` carries on and the caller reports it.

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
        except Exception as e:  # PIL raises many types for files that are not images or are broken
            return ImageItem(i, None, None, unreadable(e))
        try:
            return ImageItem(i, self.transform(rgb), (rgb.height, rgb.width), None)
        except ValueError as e:  # the transform refuses it (inference.eval_transform: too elongated to resize)
            return ImageItem(i, None, None, str(e))


Item = TypeVar("Item")


class LeftOut(NamedTuple):
    """A dataset item an evaluation leaves out (a file broken behind a good header, an image too thin for the
    model): a small record in place of the item, so the loader's batches carry it back to the main process (from
    worker processes too) and the evaluation's report names it, not only a worker's warning."""

    index: int  # in the dataset
    path: str
    reason: str


def readable_item(read: Callable[[int], Item | LeftOut], index: int, count: int, evaluation: bool) -> Item | LeftOut:
    """Item ``index`` of a dataset of ``count`` through ``read``, which gives a :class:`LeftOut` (having named why
    in a warning) for a file it cannot use: in an evaluation that record, for the collate to set apart
    (:func:`split_left_out`: an evaluation scores the items it was given); in training the next item that reads (a
    broken file must not stop a long run).

    Raises:
        RuntimeError: in training, no item of the dataset reads.
    """
    if evaluation:
        return read(index)
    for offset in range(count):
        item = read((index + offset) % count)
        if not isinstance(item, LeftOut):
            return item
    raise RuntimeError("no image of the dataset could be read")


def split_left_out(batch: list[Item | LeftOut]) -> tuple[list[Item], list[LeftOut]]:
    """(the items read, the records of those left out) of a batch of :func:`readable_item` results: the tasks'
    collates batch the first and pass the second along."""
    return [i for i in batch if not isinstance(i, LeftOut)], [i for i in batch if isinstance(i, LeftOut)]


def nothing_scored(scored: int, left_out: list[LeftOut], split: str, lacking: str, metric: str) -> ValueError:
    """The error of an evaluation that scored nothing, whose ``metric`` would be NaN and read as a result (a report of
    nulls; a training run that never picks best weights): ``scored`` images of ``split`` that hold no ``lacking``
    (an object to score, a pixel of a class), the others ``left_out`` as they were read (pixels that do not decode
    behind a header the scan read), the first named."""
    gone = sorted(set(left_out))  # set: a padded shard
    example = f"e.g. {gone[0].path}: {gone[0].reason}" if gone else ""
    if scored == 0 and gone:
        return ValueError(f"no {split} image could be scored: all {len(gone)} were left out as they were read, "
                          f"{example} (each named in a warning); the {metric} would be NaN")  # fmt: skip
    named = f"; those left out as they were read: {len(gone)}, {example}" if gone else ""
    return ValueError(f"the {scored} {split} images scored hold no {lacking}{named}; the {metric} would be NaN")


def evaluated_data(
    checkpoint: Path, data_dir: str | Path | None, split: str, amp: str, **folders: str | Path
) -> dict[str, object]:
    """``eval.json``'s record of what was evaluated, one layout for the three tasks' scripts: the weights file read
    (``checkpoint``) and the kind of weights it gave (``weights``: ``ema`` or ``raw``,
    :func:`~swinlite.io.weights_kind`; a timm training checkpoint holding both gives its EMA ones, with ``--ema`` or
    without), ``data_dir`` and ``split`` (both null when the data's folders were given one by one), the folders read
    (``folders``: key -> path) and ``amp``, the autocast dtype (``none``, ``bf16``, ``fp16``)."""
    record: dict[str, object] = {"checkpoint": str(checkpoint), "weights": weights_kind(checkpoint)}
    record["data_dir"] = None if data_dir is None else str(data_dir)
    record["split"] = None if data_dir is None else split
    return record | {key: str(path) for key, path in folders.items()} | {"amp": amp}


def left_out_report(skipped: list[tuple[str | Path, str]], left_out: list[LeftOut]) -> dict[str, list]:
    """``eval.json``'s ``skipped``, one layout for the three tasks' scripts: every file the evaluation left out, the
    scan's (``skipped``: path, reason) then the loader's (``left_out``), each as ``{"path", "reason"}``."""
    both = [*skipped, *((item.path, item.reason) for item in sorted(set(left_out)))]  # set: a padded shard
    return {"skipped": [{"path": str(path), "reason": reason} for path, reason in both]}
