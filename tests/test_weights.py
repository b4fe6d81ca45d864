"""Self-describing weights (swinlite.weights): the metadata round trip, the strict rebuild, clear file errors."""

import json
import os
import re
import warnings
from pathlib import Path

import pytest
import timm
import torch
from pico import PICO
from safetensors.torch import save_file
from scriptkit import run_script
from timm.utils import ModelEmaV3

import swinlite
from swinlite.engine.checkpoint import save_resume
from swinlite.export import FeatureExtractor
from swinlite.files import check_model_path
from swinlite.io import read_state_dict, save_safetensors
from swinlite.weights import ema_counterpart, load_model, pretrained_model, read_info, weights_metadata

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
    assert rebuilt.pretrained_cfg["num_classes"] == 3  # the file's, not the variant's
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)


OVERLAY_ROUTES = {  # how a user gets the file's model, or its feature levels, besides load_model (docs/deployment.md)
    "feature_extractor": lambda path: FeatureExtractor(load_model(path), 2),
    "overlay": lambda path: timm.create_model(PICO, num_classes=3, pretrained=True,
                                              pretrained_cfg_overlay=dict(file=str(path))),
    "overlay_features_only": lambda path: timm.create_model(PICO, num_classes=3, features_only=True, pretrained=True,
                                                            pretrained_cfg_overlay=dict(file=str(path))),
}  # fmt: skip


@pytest.mark.parametrize("route", OVERLAY_ROUTES)
def test_the_files_data_config_reaches_its_feature_levels_and_the_overlay_route(trained, route):
    """FeatureExtractor (no pretrained_cfg) resolved to timm's defaults (224, bicubic, ImageNet's statistics, 0.875),
    pretrained_cfg_overlay=dict(file=...) to the variant's (32, bicubic, ImageNet's), not the file's preprocessing.
    The overlay's classifier had no class names (load_model's has them); its features_only wrapper, and the Swin inside,
    have no classifier: no names."""
    model = OVERLAY_ROUTES[route](trained[1])
    config = timm.data.resolve_model_data_config(model)
    assert config == {k: tuple(v) if isinstance(v, list) else v for k, v in PRE.items()}
    if route == "overlay":
        assert (model.pretrained_cfg["label_names"], model.pretrained_cfg["num_classes"]) == (["cat", "dog", "eel"], 3)
    elif route == "overlay_features_only":  # timm's wrapper and the Swin it holds
        assert model.pretrained_cfg.get("label_names") is model.model.pretrained_cfg.get("label_names") is None
    else:  # the Swin of load_model's classifier keeps its names; its levels have no classifier, as timm's wrapper
        assert "label_names" not in model.pretrained_cfg and model.model.pretrained_cfg["label_names"]
        model.default_cfg = {**model.pretrained_cfg, "mean": (0.1, 0.2, 0.3)}  # set as on any timm model: it was
        assert timm.data.resolve_model_data_config(model)["mean"] == (0.1, 0.2, 0.3)  # "no setter" (a property)


def test_a_key_the_overlay_sets_itself_stays(trained):
    overlay = dict(file=str(trained[1]), mean=(0.1, 0.2, 0.3))
    model = timm.create_model(PICO, num_classes=3, features_only=True, pretrained=True, pretrained_cfg_overlay=overlay)
    for net in (model, model.model):  # timm's wrapper and the Swin it holds
        assert (net.pretrained_cfg["mean"], net.pretrained_cfg["std"]) == ((0.1, 0.2, 0.3), (0.25,) * 3)


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
    # a features_only wrapper: its keys (model.*) were all "missing from the file", which holds them unprefixed
    said = r"wrapper of it: .* FeatureExtractor\(load_model\(path\), out_indices\) \(from swinlite\.export"
    with pytest.raises(ValueError, match=said):
        load_model(path, features_only=True)


@pytest.mark.parametrize(
    ("model", "got", "hint"),
    [
        (
            lambda: timm.create_model(PICO, features_only=True),
            "swinlite.models.variants.SwinFeatureBody",
            "pass its Swin, SwinFeatureBody.model",
        ),
        (
            lambda: timm.create_model("swin_tiny_patch4_window7_224", embed_dim=8, depths=(1,) * 4, num_heads=(1,) * 4),
            "timm.models.swin_transformer.SwinTransformer",
            "build swinlite's counterpart of swin_tiny_patch4_window7_224, "
            "timm.create_model('swinlite_tiny_patch4_window7_224')",
        ),
        (
            lambda: torch.nn.Linear(2, 2),
            "torch.nn.modules.linear.Linear",
            "build one with timm.create_model('swinlite_...') (timm.list_models('swinlite_*'))",
        ),
    ],
    ids=["features_only", "timm_swin", "other"],
)
def test_load_checkpoint_into_what_is_no_swin_says_what_to_pass(model, got, hint):
    """A features-only wrapper warned of a dropped classifier, then raised AttributeError ('SwinFeatureBody' object
    has no attribute 'patch_embed') from the mismatch message; timm's Swin was "a SwinTransformer", as swinlite's."""
    state = timm.create_model(PICO).state_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no note before the refusal
        with pytest.raises(ValueError) as refused:
            swinlite.load_checkpoint(model(), state)
    swin = "swinlite.models.swin.SwinTransformer"
    assert str(refused.value) == f"load_checkpoint loads a swinlite SwinTransformer ({swin}), got a {got}: {hint}"


@pytest.mark.parametrize(
    ("recorded", "ignored"),
    [
        ({"mask_padding": False}, "mask_padding=False"),
        ({"act_layer": "relu", "drop_path_rate": 0.3}, "act_layer='relu'"),
        ({"mask_padding": True, "img_size": 48, "drop_path_rate": 0.3}, None),  # defaults, V1's size, training
    ],
    ids=["mask_padding", "act_layer", "defaults"],
)
def test_load_checkpoint_warns_of_settings_the_file_records_and_the_model_lacks(tmp_path, recorded, ignored):
    """A file of a model built with mask_padding=False (or act_layer='relu') loaded every weight into a plain
    timm.create_model(PICO, num_classes=3), which computed other logits (by 0.021, 0.080 at 36x44), without a word
    (load_model rebuilds the file's model). What the user chose otherwise is no such setting: training settings, the
    reference path, a features_only wrapper's Swin."""
    torch.manual_seed(0)
    path = tmp_path / "w.safetensors"
    meta = weights_metadata(PICO, {"num_classes": 3, **recorded}, ["cat", "dog", "eel"], PRE)
    save_safetensors(path, timm.create_model(PICO, num_classes=3, **recorded).state_dict(), meta)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        swinlite.load_checkpoint(timm.create_model(PICO, num_classes=3), path)
    said = f"{path} records its {PICO} built with {ignored}, the model without: the weights are loaded into the model"
    assert [str(w.message)[: len(said)] for w in caught] == ([said] if ignored else [])
    assert all(w.filename == __file__ for w in caught)  # the line that called load_checkpoint
    built = {**recorded, "drop_path_rate": 0.1}
    for model in (
        timm.create_model(PICO, num_classes=3, **built, fast=False),
        timm.create_model(PICO, features_only=True, out_indices=(0, 1), **built).model,
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warnings.filterwarnings("ignore", re.escape("dropping the checkpoint's classifier head.fc: the model has"))
            swinlite.load_checkpoint(model, path)


def test_raw_files_need_a_model_and_load_in_other_layouts(tmp_path):
    torch.manual_seed(0)
    reference = timm.create_model("swin_tiny_patch4_window7_224", num_classes=4, embed_dim=24, depths=(1, 1, 1, 1),
                                  num_heads=(1, 1, 1, 1), img_size=64, patch_size=2, window_size=4).eval()  # fmt: skip
    torch.save({"model": reference.state_dict()}, tmp_path / "timm.pth")
    with pytest.raises(
        ValueError,
        match=r"does not record its model; pass --model \(load_model's model=\), its timm name, .* \(best.safetensors",
    ):
        load_model(tmp_path / "timm.pth")  # the run's weights record it, its resume.pt does not
    with pytest.raises(ValueError, match="did you mean swinlite_pico_patch2_window4_32"):
        load_model(tmp_path / "timm.pth", "swinlite_pico_patch2_windw4_32")
    model = load_model(tmp_path / "timm.pth", PICO, embed_dim=24, depths=(1, 1, 1, 1), num_heads=(1, 1, 1, 1))
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert model.num_classes == 4
        torch.testing.assert_close(model(x), reference(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])  # the latter: save_for_hf's default
def test_a_folder_timms_save_for_hf_wrote_rebuilds_its_model(tmp_path, weights):
    """load_model(folder) was "not a file", its model.safetensors "does not record its model", and that file with
    --model the variant ran with its defaults (window 4, masked padding, ImageNet's statistics, unnamed classes) without
    a word: 46 of 360 top-1 differed. config.json's architecture, model_args and pretrained_cfg rebuild it; a --model
    that contradicts it and timm's hf-hub: / local-dir: names are refused. Another file in the folder is no file
    config.json describes: other.pth of another model was refused as contradicting it, or took its class names."""
    torch.manual_seed(0)
    v2 = "swinlite_v2_pico_patch2_window4_32"
    model = timm.create_model(v2, num_classes=3, window_size=2, mask_padding=False).eval()
    with torch.no_grad():
        for weight in model.parameters():  # V2's post-norms start at zero: each block the identity
            weight.add_(0.2 * torch.randn_like(weight))
    model.pretrained_cfg = {**model.pretrained_cfg, "mean": (0.5,) * 3, "std": (0.25,) * 3, "crop_pct": 0.75,
                            "label_names": ["cat", "dog", "eel"], "num_classes": 3}  # fmt: skip
    timm.models.save_for_hf(model, tmp_path / "shared", safe_serialization=weights == "model.safetensors")
    x = torch.randn(2, 3, 36, 36)  # 9x9 maps in stage 2: padded, where mask_padding counts
    for path, name in ((tmp_path / "shared", None), (tmp_path / "shared" / weights, v2)):
        rebuilt = load_model(path, name)
        with torch.no_grad():
            torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)
        config = timm.data.resolve_model_data_config(rebuilt)
        assert (config["mean"], config["std"], config["crop_pct"]) == ((0.5,) * 3, (0.25,) * 3, 0.75)
        assert rebuilt.pretrained_cfg["label_names"] == ["cat", "dog", "eel"]
        assert "file" not in rebuilt.pretrained_cfg and "source" not in rebuilt.pretrained_cfg  # where timm read it
    with pytest.raises(ValueError, match=f"--model {PICO} contradicts .*config.json, which records a {v2}; drop"):
        load_model(tmp_path / "shared", PICO)
    with pytest.raises(ValueError, match=re.escape(f"is not a file (did you mean {str(path)!r}?)")):
        check_model_path(tmp_path / "shared", "--checkpoint")  # the scripts' --checkpoint FOLDER
    torch.save(timm.create_model(PICO, num_classes=5).state_dict(), tmp_path / "shared" / "other.pth")
    other = load_model(tmp_path / "shared" / "other.pth", PICO)
    assert other.num_classes == 5 and "label_names" not in other.pretrained_cfg
    (tmp_path / "shared" / "config.json").write_text('{"architecture": "swinlite_nope", "model_args": {}}')
    with pytest.raises(ValueError, match="shared/config.json records unknown timm model 'swinlite_nope'"):
        load_model(tmp_path / "shared")
    (tmp_path / "shared" / "config.json").write_text('{"architecture": "newer_timm_net", "model_args": {}}')
    assert load_model(tmp_path / "shared" / weights, v2).num_classes == 3  # a model this timm lacks: its weights
    for name in ("hf-hub:me/shared", f"local-dir:{tmp_path / 'shared'}"):  # predict.py --model NAME
        with pytest.raises(ValueError, match=r"no (hf-hub|local-dir): model names .* --checkpoint FOLDER/model"):
            pretrained_model(name)


def test_a_hub_snapshot_of_timms_swin_converts_into_a_swinlite_model(tmp_path):
    """A snapshot_download of a timm repo (model.safetensors beside timm's config.json naming timm's Swin) with
    --model swinlite_* was refused as contradicting config.json: timm's own model is converted, as any timm file."""
    small = dict(depths=(1, 1, 1, 1), embed_dim=16, num_heads=(1, 1, 1, 1))
    torch.manual_seed(0)
    reference = timm.create_model("swin_tiny_patch4_window7_224", **small).eval()
    timm.models.save_for_hf(reference, tmp_path / "snapshot", safe_serialization=True)
    lite = load_model(tmp_path / "snapshot" / "model.safetensors", "swinlite_tiny_patch4_window7_224", **small)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(lite(x), reference(x), rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", [PICO, "swinlite_v2_pico_patch2_window4_32"])
def test_a_file_rebuilds_its_model_without_drawing_weights_it_replaces(tmp_path, name):
    """load_model drew the model's random weights (most of the time of loading Swin-T's file) and replaced every one;
    it now allocates them empty and fills the position-bias buffers: the same function, the generator left alone."""
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=3).eval()
    path = tmp_path / "w.safetensors"
    save_safetensors(path, model.state_dict(), weights_metadata(name, {"num_classes": 3}, ["a", "b", "c"], PRE))
    generator = torch.get_rng_state()
    rebuilt = load_model(path)
    assert torch.equal(torch.get_rng_state(), generator)
    x = torch.randn(2, 3, 27, 41)  # padded windows: the masks and the bias buffers at work
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)


def test_a_file_of_another_width_says_so_before_the_keys(trained, tmp_path):
    """A pico's file given as a nano's listed 40 missing keys and shape mismatches without a word on why (a file of
    other depths said so, one of another width did not)."""
    model, _ = trained
    torch.save(model.state_dict(), tmp_path / "pico.pth")
    with pytest.raises(
        ValueError,
        match=r"exactly; the checkpoint's embed_dim is 32 \(patch_embed.proj.weight\), "
        r"the model's 48: a checkpoint of another model \(build one with embed_dim=32\); missing",
    ):
        load_model(tmp_path / "pico.pth", "swinlite_nano_patch2_window4_64", num_classes=3)


def test_files_that_are_not_checkpoints_are_named(tmp_path):
    (tmp_path / "empty.safetensors").write_bytes(b"")
    (tmp_path / "notes.pth").write_text("not a checkpoint")
    save_file({}, tmp_path / "none.safetensors")
    for name, message in [
        ("missing.pth", "checkpoint '.*missing.pth' does not exist"),
        ("empty.safetensors", "checkpoint '.*empty.safetensors' is empty \\(0 bytes\\)"),
        # not followed by the unpickler's error, which said nothing (KeyError: 101)
        ("notes.pth", "'.*notes.pth' is not a weights file \\(expected safetensors or a torch checkpoint\\)$"),
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
    # a run resumed with train.ema_decay off wrote last.safetensors of epoch 4 beside epoch 3's ema.safetensors,
    # which --ema gave as the last epoch's EMA; best_ema.safetensors is the best EMA epoch, which may differ
    for name, epoch in [("last.safetensors", 4), ("ema.safetensors", 3), ("best.safetensors", 4)]:
        kind = "ema" if "ema" in name else "raw"
        save_safetensors(tmp_path / name, model.state_dict(), meta | {"weights": kind, "epoch": epoch})
    stale = r"^--ema: .*ema.safetensors holds the EMA weights of epoch 3, .*last.safetensors those of epoch 4 .*"
    with pytest.raises(ValueError, match=stale + r": give .*ema.safetensors itself"):
        ema_counterpart(tmp_path / "last.safetensors")
    assert ema_counterpart(tmp_path / "best.safetensors") == tmp_path / "best_ema.safetensors"


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


@pytest.mark.parametrize(
    ("key", "bad", "message"),
    [
        ("layers.2.blocks.0.mlp.fc1.weight", float("nan"), "holds NaN or infinite values in 1 weights"),
        ("norm.bias", float("inf"), "holds NaN or infinite values in 1 weights"),
        ("head.fc.weight", "int64", "holds 1 weights that are not floating point"),
    ],
)
def test_nan_infinite_or_integer_weights_are_refused_naming_the_file_and_key(trained, tmp_path, key, bad, message):
    """Such files once loaded: evaluate reported chance top-1 and predict wrote ``nan``."""
    model, path = trained
    state = dict(model.state_dict())
    state[key] = state[key].long() if bad == "int64" else torch.full_like(state[key], bad)
    save_safetensors(tmp_path / "bad.safetensors", state, {k: v for k, v in read_info(path).__dict__.items()
                                                             if k != "extra"})  # fmt: skip
    torch.save(state, tmp_path / "bad.pth")
    for name, model_name in (("bad.safetensors", None), ("bad.pth", PICO)):
        with pytest.raises(ValueError, match=f"{name} {message}.*{key}"):
            load_model(tmp_path / name, model_name)


META = {"model": PICO, "model_args": {"num_classes": 3}, "classes": ["cat", "dog", "eel"], "preprocessing": PRE}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"classes": ["cat", "dog"]}, "names 2 classes for a classifier of 3 outputs"),
        ({"classes": "cat,dog,eel"}, "classes must be a JSON list of names, got the string 'cat,dog,eel'"),
        ({"classes": [1, 2, 3]}, "classes must be a non-empty JSON list of strings"),
        ({"classes": ["cat", "cat", "eel"]}, "classes name cat more than once"),
        ({"model_args": [3]}, "model_args must be a JSON object"),
        ({"preprocessing": PRE | {"crop_pct": 0}}, "preprocessing crop_pct must be a number in \\(0, 1\\]"),
        ({"preprocessing": PRE | {"crop_pct": 1.5}}, "preprocessing crop_pct must be"),
        ({"preprocessing": PRE | {"input_size": [3, 0, 16]}}, "preprocessing input_size must be"),
        ({"preprocessing": PRE | {"std": [0.2, 0.0, 0.2]}}, "preprocessing std must be positive"),
        # every prediction NaN, without an error
        ({"preprocessing": PRE | {"mean": [float("nan"), 0.5, 0.5]}}, "preprocessing mean must be 3 finite numbers"),
        ({"preprocessing": PRE | {"std": [0.2, float("inf"), 0.2]}}, "preprocessing std must be 3 finite numbers"),
        ({"weights": "best"}, "weights must be one of raw, ema"),
        ({"format": 2}, "metadata format 2 is not 1"),
    ],
)
def test_metadata_of_the_wrong_type_or_range_is_an_error_naming_the_file(trained, tmp_path, change, message):
    """Values a file could hold that once loaded as a silently different model (or preprocessing)."""
    model, _ = trained
    path = tmp_path / "lying.safetensors"
    meta = {k: v if isinstance(v, str) and k == "classes" else json.dumps(v) for k, v in (META | change).items()}
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path, meta)
    with pytest.raises(ValueError, match=f"lying.safetensors: .*{message}"):
        load_model(path)
    with pytest.raises(ValueError, match=message):
        weights_metadata(**{k: v for k, v in (META | change).items() if k != "format"}, format=change.get("format", 1))


@pytest.mark.parametrize(
    ("normalization", "message"),
    [
        ({"mean": [0.5], "std": [0.25] * 3}, r"mean must be 3 finite numbers \(its model's in_chans\), got \[0.5\]"),
        ({"mean": [0.5] * 3, "std": [0.25, 0, 0.25]}, "std must be 3 positive finite numbers"),
        ({"mean": "0.5", "std": [0.25] * 3}, "mean must be 3 finite numbers"),
    ],
)
def test_a_model_records_wrong_normalization_is_an_error(trained, tmp_path, normalization, message):
    """The mean and std convert_checkpoint.py keeps of a run (a model record's preprocessing) go into the model's
    pretrained_cfg: a wrong one is refused, naming the file, as a classifier's is."""
    path = tmp_path / "record.safetensors"
    record = {"model": PICO, "model_args": {"num_classes": 3}, "preprocessing": normalization}
    save_safetensors(path, trained[0].state_dict(), record)
    with pytest.raises(ValueError, match=f"record.safetensors: its recorded {message}"):
        load_model(path)


def test_a_detection_checkpoint_says_which_script_reads_it(tmp_path):
    meta = {"task": "detection", "classes": ["a"], "category_ids": [1], "detector": {"kind": "faster_rcnn"}}
    save_safetensors(tmp_path / "det.safetensors", {"backbone.body.x": torch.zeros(1)}, meta)
    with pytest.raises(
        ValueError, match="det.safetensors is a detection checkpoint, not a classifier's; use scripts/d"
    ):
        load_model(tmp_path / "det.safetensors", PICO)  # once: "pass --model", then a 112-key mismatch


def test_other_num_heads_than_the_file_is_one_error_naming_them(trained, tmp_path):
    model, _ = trained
    torch.save(model.state_dict(), tmp_path / "pico.pth")
    heads = {"num_heads": (2, 2, 4, 8)}
    with pytest.raises(
        ValueError,
        match="pico.pth does not fit .*layers.0.blocks.0.attn.rel_pos.table holds 1 attention heads, the model has 2",
    ):
        load_model(tmp_path / "pico.pth", PICO, **heads)
    with pytest.raises(ValueError, match="num_heads differs from the checkpoint's"):  # once a RuntimeError from torch
        timm.create_model(PICO, pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / "pico.pth")), **heads)


def test_a_truncated_file_in_the_hub_cache_is_named(offline_hub):
    tag = "swinlite_tiny_patch4_window7_224.ms_in1k"
    path = offline_hub.add("timm/swin_tiny_patch4_window7_224.ms_in1k", {"w": torch.zeros(1000)})
    path.write_bytes(path.read_bytes()[:100])  # an interrupted download
    with pytest.raises(ValueError, match=f"could not be loaded from {path} \\(damaged or truncated"):
        pretrained_model(tag)


def _resume_file(path: Path, model: torch.nn.Module, ema: bool, task: str = "classification") -> Path:
    """A ``task`` run's resume.pt as the engine writes it (Trainer.resume_state): its model, and where trained with
    train.ema_decay the state of its EMA (timm's ModelEmaV3, the engine's), here weights apart from the model's."""
    averaged = {k: v + 1 for k, v in ModelEmaV3(model, decay=0.5).state_dict().items()} if ema else None
    save_resume(path, {"task": task, "model": model.state_dict(), "optimizer": {}, "ema": averaged, "epoch": 1})
    return path


def _read_as_weights(route: str, path: Path, tmp_path: Path) -> dict[str, torch.Tensor]:
    """The weights a 3-class pico gets of the file ``path`` by ``route``."""
    if route == "load_model":  # what every classifier's script's --checkpoint (with --model) reads it by
        return load_model(path, PICO).state_dict()
    if route == "load_checkpoint":
        model = timm.create_model(PICO, num_classes=3)
        swinlite.load_checkpoint(model, path)
        return model.state_dict()
    assert run_script("convert_checkpoint", [path, tmp_path / "out.safetensors"]) == 0
    return read_state_dict(tmp_path / "out.safetensors")


@pytest.mark.parametrize("ema", [True, False])
@pytest.mark.parametrize("route", ["load_model", "load_checkpoint", "convert_checkpoint"])
def test_a_resume_file_gives_its_raw_weights_saying_so_where_it_holds_their_ema(trained, tmp_path, route, ema):
    """A run's resume.pt read as weights gives its raw weights, as before: said once where it also holds their EMA,
    which a user who trained with EMA may have expected (they were given without a word); nothing said for a
    resume.pt without EMA. load_model reads a task's of the user's own so (it refuses swinlite's tasks')."""
    model, _ = trained
    path = _resume_file(tmp_path / "resume.pt", model, ema, "brightness" if route == "load_model" else "classification")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = _read_as_weights(route, path, tmp_path)
    note = (
        f"{path} is a run's resume state: its weights are the raw ones (its 'model'), though it also holds their EMA "
        "(its 'ema'); for the EMA weights load the run's ema.safetensors (a script's --ema with the run's "
        "last.safetensors)"
    )
    assert [str(w.message) for w in caught] == ([note] if ema else [])
    if route != "convert_checkpoint":  # the line that called the loader
        assert all(w.filename == __file__ for w in caught)
    assert loaded.keys() == model.state_dict().keys()
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())  # the raw weights


@pytest.mark.parametrize("model", [PICO, None])
def test_a_classification_runs_resume_file_is_refused_naming_its_weights(trained, tmp_path, model):
    """predict.py --checkpoint RUN/resume.pt --model NAME classified with the run's weights at the model's default size
    (32 px, where the run trained at 16) and without its class names ("0", not "c0"), without a word; without --model
    it said the file "does not record its model", which its settings do. Refused as a detection or segmentation run's
    is, naming the run's weights files, which record the model, classes and preprocessing; --ema too."""
    path = _resume_file(tmp_path / "resume.pt", trained[0], ema=True)
    said = (
        f"{path} is a classification run's resume state, not its weights (which record its model and preprocessing): "
        f"give the run's weights, {tmp_path / 'best.safetensors'} or {tmp_path / 'last.safetensors'}"
    )
    with pytest.raises(ValueError) as refused:
        load_model(path, model)
    assert str(refused.value) == said
    with pytest.raises(ValueError) as refused:
        ema_counterpart(path)
    assert str(refused.value) == said
    # timm's resume_checkpoint gives a file without "state_dict" to load_state_dict whole: its "model" was loaded
    # alone and the optimizer and epoch dropped without a word (a task of the user's own still gives its "model")
    net = timm.create_model(PICO, num_classes=3)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="^the state dict is a classification run's resume state, not its weights"):
        timm.models.resume_checkpoint(net, str(path), optimizer)
    net.load_state_dict(torch.load(path, weights_only=True) | {"task": "brightness"})


def test_a_safetensors_file_whose_header_reads_as_a_pickle_protocol_loads_without_a_word(tmp_path):
    """A header length of 0x..80 starts the file with byte 0x80, a pickle's PROTO: read as a torch file to look for
    a resume state's EMA, it gave torch's 'Detected pickle protocol' warning for a plain weights file."""
    model = timm.create_model(PICO, num_classes=3)
    path = tmp_path / "w.safetensors"
    save_file(model.state_dict(), path, {"pad": ""})
    header = path.read_bytes()[8 : 8 + int.from_bytes(path.read_bytes()[:8], "little")]
    bare = len(header.rstrip(b" "))  # safetensors pads its JSON header with spaces to a multiple of 8 bytes
    pad = next(n for n in range(256) if -(-(bare + n) // 8) * 8 % 256 == 0x80)  # each "x" lengthens the JSON by 1
    save_file(model.state_dict(), path, {"pad": "x" * pad})
    assert path.read_bytes()[0] == 0x80
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for data in (None, path.read_bytes()):
            load_model(path, PICO, data=data)
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
@pytest.mark.parametrize("route", ["load_model", "load_checkpoint"])
def test_a_file_is_read_once_and_its_weights_converted_and_checked_once(trained, tmp_path, monkeypatch, route, suffix):
    """load_model read a torch file three times (the run's task, the weights, the EMA note) and converted and checked
    its weights twice; load_checkpoint read one twice and checked its weights twice; load_model opened a safetensors
    file twice (its metadata, its tensors)."""
    model, path = trained
    if suffix == ".pth":
        path = tmp_path / "w.pth"
        torch.save(model.state_dict(), path)
    counts = {"read": 0, "convert": 0, "check": 0}

    def counting(module: object, name: str, what: str) -> None:
        original = getattr(module, name)

        def counted(*args: object, **kwargs: object) -> object:
            counts[what] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)

    counting(torch, "load", "read")
    for name in ("safe_open", "load_file", "load_safetensors_bytes"):  # whichever of them reads it
        counting(swinlite.io, name, "read")
    counting(swinlite.weights, "convert_state_dict", "convert")
    counting(swinlite.weights, "check_weight_values", "check")
    counting(swinlite.convert, "check_weight_values", "check")  # the conversion's own
    if route == "load_model":
        loaded = load_model(path, PICO if suffix == ".pth" else None)
    else:
        loaded = timm.create_model(PICO, num_classes=3)
        swinlite.load_checkpoint(loaded, path)
    described = route == "load_model" and suffix == ".safetensors"  # nothing to convert: the file names its model
    assert counts == {"read": 1, "convert": 0 if described else 1, "check": 1}
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
