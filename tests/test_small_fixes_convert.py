"""The warnings of fitting a checkpoint to a model name the user's line, not one inside swinlite, timm or torch."""

import warnings
from pathlib import Path

import pytest
import timm
import torch
from pico import PICO

import swinlite


@pytest.mark.parametrize("route", ["convert_state_dict", "pretrained_file"])
def test_a_fitting_warning_names_the_line_that_loads(route: str, tmp_path: Path) -> None:
    """It named swinlite/convert.py (stacklevel=3 from inside the conversion)."""
    weights = timm.create_model(PICO, num_classes=10).state_dict()  # another classifier: dropped, warned
    torch.save(weights, tmp_path / "w.pth")
    model = timm.create_model(PICO, num_classes=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if route == "convert_state_dict":
            swinlite.convert_state_dict(weights, model)
        else:  # through timm's pretrained loading
            timm.create_model(
                PICO, num_classes=3, pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / "w.pth"))
            )
    assert [w.filename for w in caught if "dropping classifier" in str(w.message)] == [__file__]
