"""The embedded demo dataset: scikit-learn's 1,797 handwritten 8x8 digits as a PNG ImageFolder.

Built deterministically (same files, same split on every machine) with no download: the digits ship
inside scikit-learn. Images are upscaled to 32x32 RGB; 20% of each class goes to ``val``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from ..io import build_folder_once

_MARKER = ".swinlite_digits"


def _render(pixels: np.ndarray, size: int) -> Image.Image:
    """One digit, ``pixels`` [8, 8] with values 0..16, as a ``size`` x ``size`` RGB image."""
    gray = Image.fromarray((pixels * (255.0 / 16.0)).round().astype(np.uint8), mode="L")
    return gray.resize((size, size), Image.Resampling.BICUBIC).convert("RGB")


def _description(size: int, val_fraction: float) -> str:
    """What the marker file of a finished build says."""
    return f"scikit-learn digits, {size}x{size} RGB, val_fraction={val_fraction}\n"


def check_digits(root: str | Path, size: int = 32, val_fraction: float = 0.2) -> None:
    """ValueError when ``root`` holds a digits build made with other settings (another ``data.img_size``): it would
    be used as it is, its images of the old size (nothing here deletes a data folder)."""
    marker = Path(root) / _MARKER
    if not marker.is_file():
        return
    built = marker.read_text()
    if built != _description(size, val_fraction):
        raise ValueError(
            f"{root} holds the digits demo built otherwise ({marker.name}: {built.strip()}), not at "
            f"data.img_size={size} ({_description(size, val_fraction).strip()}); pass another data.data_dir to "
            f"build one at {size}, or the data.img_size it was built at"
        )


def build_digits(root: str | Path, size: int = 32, val_fraction: float = 0.2) -> Path:
    """Write ``root/{train,val}/<digit>/<index>.png`` unless a finished copy is already there.

    The folder is built under a temporary name and renamed into place, so an interrupted build
    never leaves a partial dataset behind.

    Args:
        root: destination folder (created, with parents).
        size: image side in pixels.
        val_fraction: share of each class held out for validation.

    Returns:
        ``root``.

    Raises:
        ValueError: ``root`` holds a build of another size or split (:func:`check_digits`), or other files.
    """
    check_digits(root, size, val_fraction)

    def build(tmp: Path) -> str:
        from sklearn.datasets import load_digits  # scikit-learn: needed by the demos only, and only to build them
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        index = np.arange(len(digits.target))
        train_idx, val_idx = train_test_split(index, test_size=val_fraction, random_state=0, stratify=digits.target)
        for split, ids in (("train", train_idx), ("val", val_idx)):
            for i in sorted(ids):
                folder = tmp / split / str(digits.target[i])
                folder.mkdir(parents=True, exist_ok=True)
                _render(digits.images[i], size).save(folder / f"{i:04d}.png")
        return _description(size, val_fraction)

    return build_folder_once(root, _MARKER, build, "digits demo")
