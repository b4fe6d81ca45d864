"""Weights of a model of other than 3 input channels (written from Python: training refuses ``in_chans``): the
scripts, which feed RGB images, refuse them at once; the metadata's channels agree with the model's."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from PIL import Image
from scriptkit import run_script
from weightkit import random_state_dict

from swinlite import load_model
from swinlite.engine.checkpoint import save_weights
from swinlite.metadata import weights_metadata

PICO = "swinlite_pico_patch2_window4_32"


def preprocessing(channels: int) -> dict:
    return {"input_size": [channels, 32, 32], "interpolation": "bicubic", "mean": [0.5] * channels,
            "std": [0.5] * channels, "crop_pct": 1.0, "crop_mode": "center"}  # fmt: skip


def weights(path: Path, in_chans: int) -> Path:
    model = timm.create_model(PICO, in_chans=in_chans, num_classes=2)
    save_weights(path, model.state_dict(), weights_metadata(PICO, {"in_chans": in_chans, "num_classes": 2}, ["a", "b"],
                                                            preprocessing(in_chans)))  # fmt: skip
    return path


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("images")
    for name in ("a", "b"):
        (root / "val" / name).mkdir(parents=True)
        Image.new("RGBA", (40, 40), (200, 10, 10, 128)).save(root / "val" / name / "0.png")
    return root


ARGV = {
    "predict": lambda w, data, out: ["--checkpoint", w, data / "val", "--output", out / "p.csv"],
    "evaluate": lambda w, data, out: ["--checkpoint", w, "--data-dir", data, "--output-dir", out],
    "extract_features": lambda w, data, out: ["--checkpoint", w, "--input", data / "val", "--output", out],
    "visualize": lambda w, data, out: ["--checkpoint", w, "--image", data / "val" / "a" / "0.png", "--output", out],
    "export_onnx": lambda w, data, out: ["--checkpoint", w, "--output", out / "m.onnx", "--no-check"],
}


@pytest.mark.parametrize("in_chans", [4, 1])
@pytest.mark.parametrize("script", ARGV)
def test_scripts_refuse_weights_of_other_channels_at_once(script, in_chans, images, tmp_path, capsys):
    path = weights(tmp_path / "w.safetensors", in_chans)
    out = tmp_path / "out"
    assert run_script(script, ARGV[script](path, images, out)) == 2
    expected = f"error: {path} holds a model of {in_chans}-channel images (input_size [{in_chans}, 32, 32]): the " \
               "scripts feed RGB images, expected [3, H, W]\n"  # fmt: skip
    assert capsys.readouterr().err.endswith(expected)
    assert not out.exists()  # no output folder, no settings.json


def test_python_still_loads_and_runs_them(tmp_path):
    model = load_model(weights(tmp_path / "w.safetensors", 4))
    assert model(torch.zeros(1, 4, 32, 32)).shape == (1, 2)
    assert model.pretrained_cfg["input_size"] == (4, 32, 32)


@pytest.mark.parametrize(
    ("model_args", "channels", "message"),
    [
        ({"in_chans": 1}, 3, r"input_size \[3, 32, 32\] has 3 channels but model_args in_chans is 1$"),
        ({}, 1, r"input_size \[1, 32, 32\] has 1 channels but model_args in_chans is 3 \(the default\)$"),
    ],
)
def test_metadata_channels_contradicting_in_chans_are_refused(model_args, channels, message):
    with pytest.raises(ValueError, match=r"^weights metadata: metadata preprocessing " + message):
        weights_metadata(PICO, model_args | {"num_classes": 2}, ["a", "b"], preprocessing(channels))


@pytest.fixture(scope="module")
def run_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run's file recording training settings and an architecture argument, as train.py writes model_args."""
    args = {"drop_path_rate": 0.1, "attn_drop_rate": 0.1, "window_size": 4, "num_classes": 2}
    model = timm.create_model(PICO, **args)
    path = tmp_path_factory.mktemp("run") / "best.safetensors"
    save_weights(path, model.state_dict(), weights_metadata(PICO, args, ["a", "b"], preprocessing(3)))
    return path


def test_training_settings_may_differ_from_the_record(run_weights):
    """A run's weights reload for fine-tuning at another rate (the file records drop_path_rate 0.1)."""
    assert isinstance(load_model(run_weights, drop_path_rate=0.0).layers[-1].blocks[-1].drop_path1, torch.nn.Identity)
    others = {"drop_rate": 0.2, "proj_drop_rate": 0.1, "attn_drop_rate": 0.0, "frozen_stages": 1}
    assert load_model(run_weights, **others).frozen_stages == 1


def test_architecture_contradictions_are_still_refused(run_weights):
    with pytest.raises(ValueError, match=r"^window_size contradict .*: it records .* \(only training settings, "):
        load_model(run_weights, window_size=2, drop_path_rate=0.0)


@pytest.mark.parametrize(
    ("name", "setting", "refused"),
    [
        (PICO, {"mask_padding": False}, True),  # every weight loads, the logits differ (by up to 3.6 on the demo)
        (PICO, {"act_layer": "relu"}, True),
        (PICO, {"mask_padding": True, "img_size": 64}, False),  # the default; a V1 computes alike at any img_size
        (PICO, {"fast": False, "device": "cpu", "dtype": torch.float32}, False),  # where it runs: they were refused
        (PICO, {"act_layer": "gelu", "window_size": [4, 4, 4, 2]}, False),  # timm's names of the same model
        ("swinlite_v2_pico_patch2_window4_32", {"img_size": 64}, True),  # its last stage's window grows to 4
    ],
)
def test_a_setting_the_file_does_not_record_may_not_build_another_model(tmp_path, name, setting, refused):
    """The file records the settings its run gave (num_classes); it was built with the model's defaults for the
    rest, and a setting that builds another model was accepted silently."""
    args = {"num_classes": 2}
    path = tmp_path / "best.safetensors"
    model = timm.create_model(name, **args)
    save_weights(path, model.state_dict(), weights_metadata(name, args, ["a", "b"], preprocessing(3)))
    if refused:
        said = rf"^{next(iter(setting))} contradict .*: it records \{{'num_classes': 2\}}, the rest the model's "
        with pytest.raises(ValueError, match=said):
            load_model(path, **setting)
    else:
        x = torch.randn(1, 3, 24, 40)
        torch.testing.assert_close(load_model(path, **setting)(x), model.eval()(x))


def test_a_tuple_the_file_records_as_a_list_agrees(tmp_path: Path):
    """The record is JSON: depths=(1, 1, 2, 1) given, the same as the file records, was refused as a contradiction of
    [1, 1, 2, 1]."""
    args = {"num_classes": 2, "depths": (1, 1, 2, 1)}
    path = tmp_path / "best.safetensors"
    save_weights(
        path, timm.create_model(PICO, **args).state_dict(), weights_metadata(PICO, args, ["a", "b"], preprocessing(3))
    )
    assert load_model(path, depths=(1, 1, 2, 1)).num_classes == 2
    with pytest.raises(ValueError, match=r"^depths contradict "):
        load_model(path, depths=(1, 1, 1, 1))


@pytest.mark.parametrize("in_chans", [1, 4])
def test_convert_checkpoint_with_model_refuses_a_first_conv_of_other_channels(in_chans, tmp_path, capsys):
    """It wrote the file, which then did not load into --model; without --model the first conv passes as it is."""
    source = tmp_path / "in.pth"
    torch.save(random_state_dict(PICO, in_chans=in_chans, num_classes=2), source)
    assert run_script("convert_checkpoint", [source, tmp_path / "out.safetensors", "--model", PICO]) == 2
    assert capsys.readouterr().err == (
        f"error: {source}: patch_embed.proj.weight (32, {in_chans}, 2, 2) vs (32, 3, 2, 2): its first conv takes "
        f"{in_chans}-channel images, the model 3; convert it without --model and load it into a model of "
        f"in_chans={in_chans} (swinlite.load_model(path, model, in_chans={in_chans}))\n"
    )
    assert not (tmp_path / "out.safetensors").exists()
    assert run_script("convert_checkpoint", [source, tmp_path / "out.safetensors"]) == 0
    assert load_model(tmp_path / "out.safetensors", PICO, in_chans=in_chans).in_chans == in_chans
