"""The meta-device check of whether pretrained weights fit leaves aside only failures of the meta device itself."""

from types import SimpleNamespace

import pytest

from swinlite.engine.preflight import check_weights_fit

PICO = "swinlite_pico_patch2_window4_32"


def fails_with(error: Exception) -> type:
    class Task:
        @staticmethod
        def model_for(cfg, classes):
            raise error

    return Task


def test_only_a_failure_of_the_meta_device_is_left_to_the_build():
    """An error whose text held "meta" anywhere ("metadata") was taken for one of the meta device, and passed."""
    cfg = SimpleNamespace(model=SimpleNamespace(pretrained="w.safetensors"))
    check_weights_fit(fails_with(NotImplementedError("Cannot copy out of meta tensor; no data!")), cfg)
    check_weights_fit(fails_with(RuntimeError("Tensor.item() cannot be called on meta tensors")), cfg)
    with pytest.raises(RuntimeError, match="metadata"):
        check_weights_fit(fails_with(RuntimeError("w.safetensors: its metadata does not fit")), cfg)
