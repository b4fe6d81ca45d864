"""build_upernet given a weights file's path as its model name: one ValueError naming what it takes instead (a swinlite
model name, or a SegModelConfig whose pretrained is the file), before anything is built."""

import re

import pytest
import timm
from pico import PICO

from swinlite.segmentation import build_upernet


def _refuse_any_build(*args, **kwargs):
    raise AssertionError("build_upernet built a model before refusing the file's path")


@pytest.mark.parametrize("name", ["/path/to/run/best.safetensors", "best.safetensors", "runs/seg/last.pth"])
def test_a_files_path_as_the_name_says_what_build_upernet_takes(name, monkeypatch):
    """Was timm's "unknown model (expected swinlite_*) '/path/to/run/best.safetensors'", of no hint at files."""
    monkeypatch.setattr(timm, "create_model", _refuse_any_build)
    expected = (
        f"build_upernet: '{name}' is a file's path, not a model name; build_upernet expects a swinlite model name "
        "(e.g. 'swinlite_tiny_patch4_window7_224') or a SegModelConfig, whose pretrained takes a file: "
        f"build_upernet(SegModelConfig(name='<its swinlite model>', pretrained='{name}'), 3)"
    )
    with pytest.raises(ValueError, match="^" + re.escape(expected)):
        build_upernet(name, 3)


def test_an_existing_file_without_a_weights_suffix_is_a_file_too(tmp_path, monkeypatch):
    (tmp_path / "weights").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^build_upernet: 'weights' is a file's path, not a model name"):
        build_upernet("weights", 3)


def test_model_names_are_not_taken_for_files():
    assert build_upernet(PICO, 3).decode_head.classifier.out_channels == 3
    with pytest.raises(ValueError, match="unknown model"):
        build_upernet("swinlite_tiny", 3)
