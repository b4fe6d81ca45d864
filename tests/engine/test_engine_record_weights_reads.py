"""A pretrained weights file is read once where its weights load and its EMA is warned of, and the meta-device check
of whether they fit leaves aside only failures of the meta device itself."""

import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import timm
import torch

from swinlite.engine.preflight import check_weights_fit
from swinlite.weights import load_checkpoint

PICO = "swinlite_pico_patch2_window4_32"


def test_a_resume_file_loads_and_is_warned_of_with_one_read(tmp_path, monkeypatch):
    """load_checkpoint read the torch file for its weights, then again for whether it holds EMA."""
    model = timm.create_model(PICO)
    weights = model.state_dict()
    torch.save({"model": weights, "ema": dict(weights), "epoch": 1}, path := tmp_path / "resume.pt")
    reads, load, read_bytes = [], torch.load, Path.read_bytes  # the file's reads: whole, or by torch.load

    def counted(read):
        def reading(source, *args, **kwargs):
            if isinstance(source, Path) and source == path:
                reads.append(source)
            return read(source, *args, **kwargs)

        return reading

    monkeypatch.setattr(torch, "load", counted(load))
    monkeypatch.setattr(Path, "read_bytes", counted(read_bytes))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_checkpoint(model, path)
    assert reads == [path]
    assert any("is a run's resume state" in str(w.message) for w in caught)


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
