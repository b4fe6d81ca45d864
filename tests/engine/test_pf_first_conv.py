"""model.pretrained weights of 1- or 4-channel images: classification's run ended in timm's RuntimeError traceback
(exit 1); detection's and segmentation's said one line. Now classification says one before any data is read."""

import re
from pathlib import Path

import pytest
from enginekit import TASKS, tiny_config
from pico import PICO
from safetensors.torch import save_file
from weightkit import random_state_dict

from swinlite.engine.preflight import check_weights_fit


def _weights_of(channels: int, folder: Path) -> Path:
    path = folder / f"in{channels}.safetensors"
    save_file(random_state_dict(PICO, in_chans=channels, num_classes=2), str(path))
    return path


@pytest.mark.parametrize("channels", [1, 4])
def test_weights_of_other_channels_are_one_line_naming_the_shapes(channels: int, tmp_path: Path):
    path = _weights_of(channels, tmp_path)
    cfg = tiny_config("classification", tmp_path / "data", tmp_path / "out", **{"model.pretrained": path})
    expected = (
        f"model.pretrained {path}: checkpoint does not fit SwinTransformer exactly; shape (file vs model): "
        f"patch_embed.proj.weight (32, {channels}, 2, 2) vs (32, 3, 2, 2)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}"):
        check_weights_fit(TASKS["classification"], cfg)
