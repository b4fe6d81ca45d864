"""load_rgb, the one image decoder of training, evaluation, prediction and extraction: 16-bit and EXIF."""

from pathlib import Path

import numpy as np
from PIL import Image

from swinlite.images import load_rgb


def test_16_bit_png_is_scaled_not_clipped(tmp_path: Path):
    gray = np.linspace(0, 65535, 32 * 32).reshape(32, 32).astype(np.uint16)
    Image.fromarray(gray).save(tmp_path / "g16.png")
    with Image.open(tmp_path / "g16.png") as img:
        assert img.mode.startswith("I")  # really stored as 16 bits
    rgb = np.asarray(load_rgb(tmp_path / "g16.png"))
    assert rgb.shape == (32, 32, 3) and rgb.dtype == np.uint8
    want = np.round(gray / 257.0)  # 65535 -> 255, linear
    assert np.abs(rgb[..., 0] - want).max() <= 1 and (rgb[..., 0] == rgb[..., 2]).all()
    assert (rgb == 255).mean() < 0.01  # the plain conversion made 99.6 % of pixels white


def test_exif_orientation_is_applied(tmp_path: Path):
    stored = np.zeros((20, 40, 3), np.uint8)  # landscape as stored: left half red, right half blue
    stored[:, :20] = (255, 0, 0)
    stored[:, 20:] = (0, 0, 255)
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: the camera was turned; show rotated 90 degrees clockwise
    Image.fromarray(stored).save(tmp_path / "photo.jpg", exif=exif, quality=95)
    shown = np.asarray(load_rgb(tmp_path / "photo.jpg")).astype(int)
    want = np.rot90(stored, k=-1).astype(int)  # clockwise: red ends up on top
    assert shown.shape == want.shape == (40, 20, 3)
    error = np.abs(shown - want)
    assert error[:14].max() < 40 and error[26:].max() < 40  # JPEG noise near the colour edge (row 20) left out
