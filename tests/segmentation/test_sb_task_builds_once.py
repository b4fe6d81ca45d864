"""A segmentation run builds its UperNet once, before the mask scan (the val split's thin check needs it), and trains
that one: beside it only the engine's meta-device builds (the model's normalisation, and with model.pretrained the
preflight fit of the weights), which allocate no weights."""

import contextlib
import io

import pytest
import timm
import torch
from pico import PICO
from scriptkit import load_script
from segkit import make_seg_folder, tiny_overrides

from swinlite.io import save_safetensors


@pytest.mark.parametrize("pretrained", [False, True])
def test_a_run_builds_its_model_once(tmp_path, monkeypatch, pretrained):
    extra = {}
    if pretrained:  # a backbone file: the preflight builds the model on the meta device to fit it
        save_safetensors(tmp_path / "swin.safetensors", timm.create_model(PICO).state_dict(), {})
        extra["model.pretrained"] = tmp_path / "swin.safetensors"
    devices, create = [], timm.create_model

    def counted(*args, **kwargs):
        devices.append(torch.empty(0).device.type)  # where the model is built: torch's default device
        return create(*args, **kwargs)

    monkeypatch.setattr(timm, "create_model", counted)
    (tmp_path / "defaults.yaml").write_text("{}\n")
    data = make_seg_folder(tmp_path / "data", count=2)
    argv = ["--config", str(tmp_path / "defaults.yaml"), *tiny_overrides(data, tmp_path / "run", **extra)]
    with contextlib.redirect_stdout(io.StringIO()):
        assert load_script("train_segmentation").main(argv) == 0
    assert [device for device in devices if device != "meta"] == ["cpu"]
