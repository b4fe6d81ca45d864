"""Self-describing weights (swinlite.weights): the metadata round trip, the strict rebuild, clear file errors."""

import os
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file

import swinlite
from swinlite.io import read_state_dict, save_safetensors
from swinlite.weights import ema_counterpart, load_model, read_info, weights_metadata

PICO = "swinlite_pico_patch2_window4_32"
PRE = {"input_size": [3, 16, 16], "interpolation": "bilinear", "mean": [0.5] * 3, "std": [0.25] * 3}
PRE |= {"crop_pct": 1.0, "crop_mode": "center"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    """A 3-class pico and its self-describing file, as scripts/train.py writes it."""
    torch.manual_seed(0)
    model = timm.create_model(PICO, num_classes=3).eval()
    path = tmp_path_factory.mktemp("w") / "best.safetensors"
    meta = weights_metadata(PICO, {"num_classes": 3}, ["cat", "dog", "eel"], PRE, epoch=2, val_top1=50.0)
    save_safetensors(path, model.state_dict(), meta)
    return model, path


def test_metadata_round_trip_and_strict_rebuild(trained):
    model, path = trained
    info = read_info(path)
    assert (info.model, info.model_args, info.classes) == (PICO, {"num_classes": 3}, ["cat", "dog", "eel"])
    assert (info.preprocessing, info.weights, info.task) == (PRE, "raw", "classification")
    assert info.extra == {"swinlite": swinlite.__version__, "epoch": 2, "val_top1": 50.0}
    rebuilt = swinlite.load_model(path)
    assert not rebuilt.training and rebuilt.num_classes == 3
    for key, value in model.state_dict().items():
        torch.testing.assert_close(rebuilt.state_dict()[key], value, rtol=0, atol=0)
    config = timm.data.resolve_model_data_config(rebuilt)
    assert config["input_size"] == (3, 16, 16) and config["interpolation"] == "bilinear"
    assert config["mean"] == (0.5,) * 3 and rebuilt.pretrained_cfg["label_names"] == ["cat", "dog", "eel"]
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)


def test_a_weight_that_does_not_load_is_an_error(trained, tmp_path):
    model, path = trained
    state = model.state_dict()
    meta = {k: v for k, v in read_info(path).__dict__.items() if k != "extra"}
    partial = dict(list(state.items())[:2])  # "2 of 77 tensors" once scored 33 % with exit 0
    save_safetensors(tmp_path / "partial.safetensors", partial, meta)
    with pytest.raises(ValueError, match=r"partial.safetensors does not fit SwinTransformer exactly; missing"):
        load_model(tmp_path / "partial.safetensors")
    save_safetensors(tmp_path / "extra.safetensors", state | {"surplus": torch.zeros(1)}, meta)
    with pytest.raises(ValueError, match="extra.safetensors: .*did not map onto SwinTransformer: surplus"):
        load_model(tmp_path / "extra.safetensors")
    torch.save({k: v for k, v in state.items() if not k.startswith("head.")}, tmp_path / "headless.pth")
    headless = load_model(tmp_path / "headless.pth", PICO)  # a raw file without classifier: none, never a random one
    assert headless.num_classes == 0


def test_flags_that_contradict_the_file_are_errors(trained):
    _, path = trained
    with pytest.raises(ValueError, match="--model swinlite_nano_patch2_window4_64 contradicts .* drop --model"):
        load_model(path, "swinlite_nano_patch2_window4_64")
    with pytest.raises(ValueError, match="--num-classes 10 contradicts .* which has 3 classes"):
        load_model(path, num_classes=10)
    assert load_model(path, PICO, num_classes=3).num_classes == 3  # agreeing flags are fine


def test_raw_files_need_a_model_and_load_in_other_layouts(tmp_path):
    torch.manual_seed(0)
    reference = timm.create_model("swin_tiny_patch4_window7_224", num_classes=4, embed_dim=24, depths=(1, 1, 1, 1),
                                  num_heads=(1, 1, 1, 1), img_size=64, patch_size=2, window_size=4).eval()  # fmt: skip
    torch.save({"model": reference.state_dict()}, tmp_path / "timm.pth")
    with pytest.raises(ValueError, match="does not record its model; pass --model"):
        load_model(tmp_path / "timm.pth")
    with pytest.raises(ValueError, match="did you mean swinlite_pico_patch2_window4_32"):
        load_model(tmp_path / "timm.pth", "swinlite_pico_patch2_windw4_32")
    model = load_model(tmp_path / "timm.pth", PICO, embed_dim=24, depths=(1, 1, 1, 1), num_heads=(1, 1, 1, 1))
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert model.num_classes == 4
        torch.testing.assert_close(model(x), reference(x), rtol=1e-4, atol=1e-4)


def test_files_that_are_not_checkpoints_are_named(tmp_path):
    (tmp_path / "empty.safetensors").write_bytes(b"")
    (tmp_path / "notes.pth").write_text("not a checkpoint")
    save_file({}, tmp_path / "none.safetensors")
    for name, message in [
        ("missing.pth", "checkpoint '.*missing.pth' does not exist"),
        ("empty.safetensors", "checkpoint '.*empty.safetensors' is empty \\(0 bytes\\)"),
        ("notes.pth", "'.*notes.pth' is not a weights file"),
        ("none.safetensors", "'.*none.safetensors' holds no tensors"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_model(tmp_path / name, PICO)
    with pytest.raises(ValueError, match="is not a file"):
        read_state_dict(tmp_path)


def test_ema_counterpart(trained, tmp_path):
    model, path = trained
    meta = weights_metadata(PICO, {"num_classes": 3}, ["cat", "dog", "eel"], PRE, weights="ema")
    for name in ("best.safetensors", "best_ema.safetensors", "last.safetensors", "ema.safetensors"):
        kind = "ema" if "ema" in name else "raw"
        save_safetensors(tmp_path / name, model.state_dict(), meta | {"weights": kind})
    assert ema_counterpart(tmp_path / "best.safetensors") == tmp_path / "best_ema.safetensors"
    assert ema_counterpart(tmp_path / "last.safetensors") == tmp_path / "ema.safetensors"
    assert ema_counterpart(tmp_path / "ema.safetensors") == tmp_path / "ema.safetensors"
    with pytest.raises(ValueError, match="--ema: .* holds raw weights .*trained without train.ema_decay"):
        ema_counterpart(path)


def test_written_files_get_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        save_safetensors(tmp_path / "a.safetensors", {"x": torch.zeros(1)})
        os.umask(0o027)
        save_safetensors(tmp_path / "b.safetensors", {"x": torch.zeros(1)})
    finally:
        os.umask(old)
    assert (tmp_path / "a.safetensors").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.safetensors").stat().st_mode & 0o777 == 0o640


def test_files_of_the_earlier_flat_metadata_still_load(trained, tmp_path):
    model, _ = trained
    flat = {"model": PICO, "classes": ["a", "b", "c"], "img_size": 16, "crop_pct": 1.0, "interpolation": "bilinear"}
    save_safetensors(tmp_path / "old.safetensors", model.state_dict(), flat | {"mean": [0.5] * 3, "std": [0.25] * 3})
    info = read_info(tmp_path / "old.safetensors")
    assert info.model_args == {"num_classes": 3} and info.preprocessing == PRE and info.weights == "raw"
    assert load_model(tmp_path / "old.safetensors").pretrained_cfg["label_names"] == ["a", "b", "c"]
