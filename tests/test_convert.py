"""Checkpoint conversion: layouts, window resizing, classifier handling, timm's pretrained loading, the script."""

import argparse
import re
import runpy
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import timm
import torch
import torchvision
from pico import PICO
from PIL import Image
from reference import as_microsoft_release
from safetensors.torch import load_file, save_file
from scriptkit import SCRIPTS, load_script  # importing it puts scripts/ on sys.path, where the scripts find _cli
from timm.layers import to_2tuple
from timm.models.swin_transformer import checkpoint_filter_fn
from torch.optim.swa_utils import get_ema_multi_avg_fn

import swinlite
from swinlite.convert import check_weight_values
from swinlite.fpn import build_fpn_backbone
from swinlite.io import read_metadata, save_safetensors, weights_kind
from swinlite.metadata import read_info
from swinlite.weights import load_checkpoint, load_model, weights_metadata

NANO = "swinlite_nano_patch2_window4_64"
SMALL = dict(depths=(1, 1, 1, 1))  # full widths and windows, one block per stage: fast on CPU


def test_detects_layouts():
    assert (
        swinlite.detect_layout(timm.create_model("swin_tiny_patch4_window7_224", device="meta").state_dict()) == "timm"
    )
    assert swinlite.detect_layout(torchvision.models.swin_t().state_dict()) == "torchvision"
    model = timm.create_model("swinlite_pico_patch2_window4_32", device="meta")
    assert swinlite.detect_layout(model.state_dict()) == "swinlite"


def test_detects_v2_layouts():
    """Swin-V2: timm's swinv2_*, torchvision's swin_v2_*, swinlite's own (the official release: test_pretrained_v2)."""
    assert swinlite.detect_layout(timm.create_model("swinv2_tiny_window8_256", device="meta").state_dict()) == "timm"
    with torch.device("meta"):
        assert swinlite.detect_layout(torchvision.models.swin_v2_t().state_dict()) == "torchvision"
    model = timm.create_model("swinlite_v2_pico_patch2_window4_32", device="meta")
    assert swinlite.detect_layout(model.state_dict()) == "swinlite"


def test_a_bare_fpn_backbones_state_dict_gives_its_swin():
    """build_fpn_backbone(...).state_dict() (body.model.*, fpn.*) was read as swinlite's layout, its keys passed on as
    they were: no Swin's; now its Swin, the FPN left out (build_fpn_backbone loads that: test_fpn.py)."""
    backbone = build_fpn_backbone(PICO, fpn_channels=8)
    assert swinlite.detect_layout(backbone.state_dict()) == "swinlite-fpn-backbone"
    swin = backbone.body.model.state_dict()
    converted = swinlite.convert_state_dict(backbone.state_dict())
    assert converted.keys() == swin.keys() and all(torch.equal(v, swin[k]) for k, v in converted.items())


@pytest.mark.parametrize("out_norm", [False, True])
def test_a_bare_features_only_models_state_dict_gives_its_swin(out_norm):
    """timm.create_model(name, features_only=True).state_dict() (model.*) was read as swinlite's layout: as any
    task's model.pretrained, "86 checkpoint keys did not map onto SwinTransformer: model.layers.0...". Now its Swin,
    which a plain Swin loads strictly (with output norms, the last level's stands for the final norm)."""
    features = timm.create_model(PICO, features_only=True, out_norm=out_norm)
    generator = torch.Generator().manual_seed(0)  # random norms too: a norm from another level shows
    features.load_state_dict({k: torch.randn(v.shape, generator=generator) for k, v in features.state_dict().items()})
    assert swinlite.detect_layout(features.state_dict()) == "swinlite-features"
    swin = features.model.state_dict()
    if out_norm:
        swin |= {"norm.weight": swin["out_norms.3.weight"], "norm.bias": swin["out_norms.3.bias"]}
    converted = swinlite.convert_state_dict(features.state_dict())
    assert converted.keys() == swin.keys() and all(torch.equal(v, swin[k]) for k, v in converted.items())
    plain = timm.create_model(PICO, num_classes=0, out_norm=out_norm)
    plain.load_state_dict(converted, strict=out_norm)  # without output norms: no final norm either
    assert all(torch.equal(plain.state_dict()[k], v) for k, v in converted.items())


def test_unknown_layout_lists_keys():
    with pytest.raises(ValueError, match="unknown checkpoint layout.*conv1.weight"):
        swinlite.convert_state_dict({"conv1.weight": torch.zeros(1), "fc.bias": torch.zeros(1)})


def test_keys_that_do_not_map_are_listed():
    model = timm.create_model("swinlite_pico_patch2_window4_32")
    state = dict(model.state_dict(), **{"layers.9.blocks.0.extra.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"did not map.*layers\.9\.blocks\.0\.extra\.weight"):
        swinlite.convert_state_dict(state, model)


def test_keys_that_do_not_convert_are_an_error_without_a_model(tmp_path, capsys, monkeypatch):
    """Without a model to fit, a key of a layout variant the rules do not know fails at conversion, writing nothing."""
    state = timm.create_model("swin_tiny_patch4_window7_224", device="meta", **SMALL).state_dict()
    state = {k.replace(".attn.proj.", ".attn.o_proj."): torch.zeros(v.shape) for k, v in state.items()}
    with pytest.raises(ValueError, match=r"8 keys of the timm layout did not convert.*blocks\.0\.attn\.o_proj"):
        swinlite.convert_state_dict(state)
    torch.save(state, tmp_path / "t.pth")
    out = tmp_path / "t.safetensors"
    code, stderr = _run_script(capsys, monkeypatch, str(tmp_path / "t.pth"), str(out))
    assert code != 0 and "did not convert" in stderr and not out.exists()


def test_keys_that_do_not_convert_are_unexpected_keys_of_a_load_state_dict_with_strict_false():
    """The pre-hook raised "did not convert" whatever ``strict``; with strict=False torch and timm's Swin return such
    keys in ``unexpected_keys``. Reference: timm's Swin given the same state dict; strict=True stays an error."""
    state = timm.create_model("swin_tiny_patch4_window7_224", **SMALL).state_dict() | {"foo.bar": torch.zeros(1)}
    theirs = timm.create_model("swin_tiny_patch4_window7_224", **SMALL).load_state_dict(state, strict=False)
    model = timm.create_model("swinlite_tiny_patch4_window7_224", **SMALL)
    ours = model.load_state_dict(state, strict=False)
    assert (
        (ours.missing_keys, ours.unexpected_keys) == (theirs.missing_keys, theirs.unexpected_keys) == ([], ["foo.bar"])
    )
    torch.testing.assert_close(
        model.layers[2].downsample.reduction.weight, state["layers.2.downsample.reduction.weight"]
    )
    with pytest.raises(ValueError, match=r"1 keys of the timm layout did not convert .*: foo\.bar"):
        model.load_state_dict(state)


def test_timm_checkpoint_path_converts(tmp_path):
    """timm.create_model(..., checkpoint_path=...) loads with a plain load_state_dict: a timm-layout file converts."""
    narrow = dict(SMALL, embed_dim=16, num_heads=(1, 1, 1, 1), num_classes=5)
    ref = timm.create_model("swin_tiny_patch4_window7_224", **narrow).eval()
    torch.save({"state_dict": ref.state_dict()}, tmp_path / "timm.pth")
    model = timm.create_model("swinlite_tiny_patch4_window7_224", checkpoint_path=str(tmp_path / "timm.pth"), **narrow)
    x = torch.randn(1, 3, 224, 224)
    torch.testing.assert_close(model.eval()(x), ref(x), rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    ("name", "timm_name"),
    [(PICO, "swin_tiny_patch4_window7_224"), ("swinlite_v2_pico_patch2_window4_32", "swinv2_tiny_window8_256")],
)
def test_load_state_dict_takes_a_microsoft_release_file(tmp_path, name, timm_name):
    """The release files hold their state dict under "model" (the layout table's ``{"model": ...}``): a swinlite
    model's load_state_dict converts that layout, but took the file whole (torch's missing keys, then Unexpected
    key(s): "model"). Reference: timm's Swin built as the pico model, whose weights the file holds."""
    torch.manual_seed(0)
    ref = _timm_pico(timm_name).eval()
    with torch.no_grad():
        for p in ref.parameters():  # V2's post-norms start at zero: its blocks would add nothing to the logits
            p.add_(torch.randn_like(p), alpha=0.02)
    path = tmp_path / "release.pth"
    torch.save(as_microsoft_release(ref.state_dict()), path)
    model = timm.create_model(name, img_size=64).eval()
    model.load_state_dict(torch.load(path, weights_only=True))
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=1e-5)


NAN = float("nan")


@pytest.mark.parametrize("route", ["load_model", "load_state_dict"])
@pytest.mark.parametrize(
    ("file_kwargs", "model_kwargs", "saved", "note"),
    [
        ({}, {}, None, None),  # the release's coordinates are the model's: silent
        (dict(pretrained_window_sizes=(2,) * 4), dict(pretrained_window_sizes=(2,) * 4), None, None),
        # another window (torchvision's swin_v2_t into a window-16 model): the last stage's, shrunk to 4, agrees
        ({}, dict(window_size=8), None, r"in stages 0, 1, 2: the file implies window_size=4 and "
         r"pretrained_window_sizes=\(4, 4, 4, 4\) .* the model has window_size=8 and pretrained_window_sizes=None; "
         r".* build it with window_size=4 .*, or pretrained_window_sizes=\(4, 4, 4, 4\) to run it at window 8"),
        # coordinates normalised by another window (a release file fine-tuned from it)
        (dict(pretrained_window_sizes=(2,) * 4), {}, None, r"in stages 0, 1, 2, 3: the file implies window_size=4 and "
         r"pretrained_window_sizes=\(2, 2, 2, 2\) .* build it with pretrained_window_sizes=\(2, 2, 2, 2\) for its"),
        # saved in half precision (a state dict cast with .half()): its rounding (1e-3, 8e-3) is no other window
        ({}, {}, lambda key, table: table.half(), None),
        ({}, {}, lambda key, table: table.bfloat16(), None),
        # NaN was "cannot convert float NaN to integer"; a window of 1 (0/0 in torchvision's formula) says nothing
        ({}, {}, lambda key, table: table.fill_(NAN) if key.startswith("layers.0.") else table,
         r"in stage 0: they are no window's log-spaced offsets"),
        ({}, {}, lambda key, table: torch.full((1, 1, 1, 2), NAN) if key.startswith("layers.3.") else table, None),
    ],
    ids=["same", "same-pretrained-window", "other-window", "other-pretrained-window", "fp16", "bf16", "nan",
         "window-1-nan"],
)  # fmt: skip
def test_a_swin_v2_files_coordinates_of_other_windows_are_named(
    tmp_path, file_kwargs, model_kwargs, saved, note, route
):
    """A V2 file's relative_coords_table (the release's, torchvision's) states the window it was trained at and the one
    its coordinates were normalised by: it was dropped silently, and the model used its own (the tour: a release
    file fine-tuned from window 8 loaded without pretrained_window_sizes, features 0.115 off timm's). Reference:
    timm's Swin-V2 whose weights and coordinates the file holds; one warning per load, not one per block. ``saved``:
    what the file holds of each block's coordinates instead (key, timm's table -> table)."""
    torch.manual_seed(0)
    ref = _timm_pico("swinv2_tiny_window8_256", **file_kwargs).eval()
    with torch.no_grad():
        for p in ref.parameters():  # V2's post-norms start at zero: its blocks would add nothing to the logits
            p.add_(torch.randn_like(p), alpha=0.5)
    coords = {k: v if saved is None else saved(k, v.clone()) for k, v in ref.named_buffers() if "coords_table" in k}
    torch.save(as_microsoft_release(ref.state_dict(), window=4, coords=coords), tmp_path / "v2.pth")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if route == "load_model":
            model = load_model(tmp_path / "v2.pth", "swinlite_v2_pico_patch2_window4_32", img_size=64, **model_kwargs)
        else:
            model = timm.create_model("swinlite_v2_pico_patch2_window4_32", img_size=64, **model_kwargs)
            model.load_state_dict(torch.load(tmp_path / "v2.pth", weights_only=True))
    notes = [str(w.message) for w in caught if "relative_coords_table" in str(w.message)]
    assert len(notes) == (note is not None) and all(re.search(note, n) for n in notes), notes
    if note is None:  # the model computes what the file was trained to
        x = torch.randn(1, 3, 64, 64)
        with torch.no_grad():
            torch.testing.assert_close(model.eval()(x), ref(x), rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "wrap",
    [lambda state: {"model": state}, lambda state: {"state_dict": state, "epoch": 3}],
    ids=["release", "training"],
)
def test_load_state_dict_takes_a_files_state_dict_of_no_swin_layout(wrap):
    """A file's state dict was taken out only when its layout was known: a classifier alone in a file loaded nothing
    with strict=False (``unexpected_keys=['model']``) where the classifier alone loads; with strict=True the refusal
    names the model's keys the file lacks, not the file's keys, before anything loads. The keys of a model holding a
    swinlite model as ``model`` are no file: they stay as they are."""
    torch.manual_seed(0)
    head = {k: v for k, v in timm.create_model(PICO).state_dict().items() if k.startswith("head.")}
    expected = timm.create_model(PICO).load_state_dict(head, strict=False)
    model = timm.create_model(PICO)
    loaded = model.load_state_dict(wrap(head), strict=False)
    assert (loaded.missing_keys, loaded.unexpected_keys) == (expected.missing_keys, [])
    torch.testing.assert_close(model.head.fc.weight, head["head.fc.weight"])
    with pytest.raises(RuntimeError, match=r"\(nothing loaded\): missing from the file: patch_embed") as refused:
        model.load_state_dict(wrap(head))
    assert "not in the model" not in str(refused.value)
    held = {f"model.{k}": v for k, v in head.items()}
    assert model.load_state_dict(held, strict=False).unexpected_keys == list(held)


@pytest.mark.parametrize(
    ("source", "cause"),
    [
        (lambda: timm.create_model("swinlite_v2_pico_patch2_window4_32"), "checkpoint is Swin-V2"),  # swinlite's layout
        (lambda: timm.create_model("swinv2_tiny_window8_256", embed_dim=32, depths=(1,) * 4), "checkpoint is Swin-V2"),
        (lambda: timm.create_model(PICO, embed_dim=48), "the checkpoint's embed_dim is 48"),
    ],
    ids=["swinlite-v2", "timm-v2", "other-width"],
)
def test_a_strict_load_state_dict_that_does_not_fit_loads_nothing(source, cause):
    """A V2 model's state dict (swinlite's or timm's layout) or another width's into a V1 pico: torch's RuntimeError
    naming the cause, before anything loads; torch alone loaded the keys that fit first (56 of the pico's tensors
    overwritten by a V2 pico's)."""
    model = timm.create_model(PICO)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match=rf"\(nothing loaded\): {cause}"):
        model.load_state_dict(source().state_dict())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize(
    ("name", "timm_name", "img_size"),
    [
        ("swinlite_tiny_patch4_window7_224", "swin_tiny_patch4_window7_224", 224),  # at reduced depth
        # the last stage's 2x2 map, to whose size timm shrinks its 4x4 window; swinlite keeps 4x4, masks the padding
        (PICO, "swin_tiny_patch4_window7_224", 32),
        ("swinlite_v2_pico_patch2_window4_32", "swinv2_tiny_window8_256", 32),
    ],
    ids=["tiny", "pico-shrunk-window", "v2-pico"],
)
def test_to_timm_state_dict_loads_into_timms_swin(name, timm_name, img_size):
    """A swinlite model's state dict did not load into timm's Swin (V1: only attn.rel_pos.table is timm's
    attn.relative_position_bias_table; V2: only attn.rel_pos.mlp is timm's attn.cpb_mlp): converted, timm's model of
    the same architecture and img_size loads it strictly and gives the swinlite model's logits."""
    torch.manual_seed(0)
    if "pico" in name:
        model, ref = timm.create_model(name), _timm_pico(timm_name, img_size)
    else:
        narrow = dict(depths=(2, 2, 2, 2), embed_dim=32, num_heads=(1, 2, 4, 8))  # the names do not depend on width
        model, ref = (timm.create_model(n, **narrow) for n in (name, timm_name))
    model, ref = model.eval(), ref.eval()
    with torch.no_grad():
        for p in model.parameters():  # V2's post-norms start at zero: its blocks would add nothing to the logits
            p.add_(torch.randn_like(p), alpha=0.02)
    ref.load_state_dict(swinlite.to_timm_state_dict(model.state_dict(), model))  # strict
    x = torch.randn(2, 3, img_size, img_size)
    with torch.no_grad():
        torch.testing.assert_close(ref(x), model(x), rtol=0, atol=1e-5)
    assert ref.state_dict().keys() == swinlite.to_timm_state_dict(model.state_dict()).keys()  # renames only


def test_to_timm_state_dict_refuses_what_timm_has_no_model_for():
    timm_state = _timm_pico().state_dict()
    with pytest.raises(ValueError, match="expected a swinlite model's state dict, got one in timm's layout"):
        swinlite.to_timm_state_dict(timm_state)
    cpb = timm.create_model(PICO, rel_pos="cpb").state_dict()
    with pytest.raises(ValueError, match=r"V1 blocks with a continuous position bias \(rel_pos='cpb'\)"):
        swinlite.to_timm_state_dict(cpb)
    # every detection / segmentation backbone's output norms: timm's strict load named out_norms.0.weight unexpected
    normed = timm.create_model("swinlite_v2_pico_patch2_window4_32", out_norm=True)
    with pytest.raises(ValueError, match=r"per-level output norms \(out_norms\.0\.weight, .*out_norm=True\)"):
        swinlite.to_timm_state_dict(normed.state_dict(), normed)


@pytest.mark.parametrize("route", ["load_checkpoint", "convert_state_dict", "checkpoint_path", "pretrained_file"])
def test_a_training_checkpoint_with_ema_weights_loads_them_on_every_route(tmp_path, route):
    """timm's train.py saves ``{"state_dict": raw, "state_dict_ema": ema, "args": Namespace}``; timm loads the EMA
    weights. swinlite's own routes took the raw ones, timm's routes the EMA ones: the same file, other weights,
    silently; and swinlite's readers refused the file as 'not a weights file' for its argparse.Namespace, which
    timm's loader allows. Reference: timm's Swin given the file by ``checkpoint_path``."""
    narrow = dict(SMALL, embed_dim=16, num_heads=(1, 1, 1, 1), num_classes=5)
    raw, ema = (timm.create_model("swin_tiny_patch4_window7_224", **narrow).state_dict() for _ in range(2))
    path = tmp_path / "train.pth"
    torch.save({"epoch": 3, "state_dict": raw, "state_dict_ema": ema, "args": argparse.Namespace(lr=0.1)}, path)
    ref = timm.create_model("swin_tiny_patch4_window7_224", checkpoint_path=str(path), **narrow).eval()
    lite = "swinlite_tiny_patch4_window7_224"
    both = r"holds EMA weights \(state_dict_ema\) and raw ones \(state_dict\): loading the EMA weights"
    if route == "checkpoint_path":
        model = timm.create_model(lite, checkpoint_path=str(path), **narrow)
    elif route == "pretrained_file":
        model = timm.create_model(lite, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **narrow)
    else:
        model = timm.create_model(lite, **narrow)
        with pytest.warns(UserWarning, match=both):
            if route == "load_checkpoint":
                swinlite.load_checkpoint(model, path)
            else:
                with torch.serialization.safe_globals([argparse.Namespace]):  # as timm's loader allows it
                    model.load_state_dict(swinlite.convert_state_dict(torch.load(path, weights_only=True)))
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), ref(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize("route", ["load_model", "convert_state_dict", "checkpoint_path", "pretrained_file"])
def test_a_torchvision_training_checkpoint_with_ema_weights_loads_them(tmp_path, route):
    """torchvision's reference train.py saves its --model-ema weights as an AveragedModel's state dict under model_ema
    (``n_averaged`` beside ``module.*``): every route refused the file, as an unknown layout (a prefix that one key
    lacks is no wrapper's) or, where timm's loader removed ``module.``, for its integer n_averaged. Reference: the
    AveragedModel's module."""
    torch.manual_seed(0)
    raw = torchvision.models.swin_transformer.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[1] * 4, num_heads=[1] * 4, window_size=[7, 7], num_classes=5
    )
    ema = torch.optim.swa_utils.AveragedModel(raw, multi_avg_fn=get_ema_multi_avg_fn(0.99), use_buffers=True)
    with torch.no_grad():
        for p in ema.module.parameters():
            p.add_(torch.randn_like(p), alpha=0.02)  # the EMA weights, not the raw ones
    path = tmp_path / "checkpoint.pth"
    torch.save({"model": raw.state_dict(), "model_ema": ema.state_dict(), "args": argparse.Namespace(lr=0.5)}, path)
    narrow = dict(SMALL, embed_dim=16, num_heads=(1, 1, 1, 1), num_classes=5)
    lite = "swinlite_tiny_patch4_window7_224"
    both = r"holds EMA weights \(model_ema\) and raw ones \(model\): loading the EMA weights"
    if route == "checkpoint_path":
        model = timm.create_model(lite, checkpoint_path=str(path), **narrow)
    elif route == "pretrained_file":
        model = timm.create_model(lite, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **narrow)
    else:
        with pytest.warns(UserWarning, match=both):
            if route == "load_model":
                model = load_model(path, lite, **narrow)
            else:
                model = timm.create_model(lite, **narrow)
                with torch.serialization.safe_globals([argparse.Namespace]):
                    model.load_state_dict(swinlite.convert_state_dict(torch.load(path, weights_only=True)))
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), ema.module.eval()(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize("route", ["load_state_dict", "convert_state_dict", "load_checkpoint", "load_model"])
def test_the_ema_warning_names_the_line_that_loads(route, tmp_path: Path):
    """It named swinlite/convert.py, the line where the load hook (or the conversion) unwrapped the checkpoint; from a
    file (load_checkpoint, load_model) swinlite/io.py."""
    model = timm.create_model(PICO)
    checkpoint = {"state_dict": model.state_dict(), "state_dict_ema": model.state_dict()}
    torch.save(checkpoint, tmp_path / "train.pth")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if route == "load_state_dict":
            model.load_state_dict(checkpoint)
        elif route == "convert_state_dict":
            swinlite.convert_state_dict(checkpoint)
        elif route == "load_checkpoint":
            swinlite.load_checkpoint(model, tmp_path / "train.pth")
        else:
            swinlite.load_model(tmp_path / "train.pth", PICO)
    assert [(w.filename, "EMA weights" in str(w.message)) for w in caught] == [(__file__, True)]


@pytest.mark.parametrize(
    ("source", "target", "kwargs", "window", "size"),
    [
        # narrower than base (the tables are resized per head, whatever the width): 384's 96, 48, 24, 12 maps are cheap
        ("swin_base_patch4_window7_224", "swin_base_patch4_window12_384",
         dict(SMALL, embed_dim=32, num_heads=(1, 2, 4, 8)), (12, 12), (384, 384)),
        # a rectangular window (it was refused: "not (2w-1)^2"), shifted blocks, every stage a whole number of windows
        ("swin_tiny_patch4_window7_224", "swin_tiny_patch4_window7_224",
         dict(depths=(2, 2, 2, 2), embed_dim=32, num_heads=(1, 2, 4, 8), window_size=(7, 12), img_size=(224, 384)),
         (7, 12), (224, 384)),
    ],
    ids=["window12", "window7x12"],
)  # fmt: skip
def test_window7_checkpoint_into_another_window(source, target, kwargs, window, size):
    """Reference: timm's Swin of the target window given the same weights through its own loader's filter
    (``checkpoint_filter_fn``, timm's ``resize_rel_pos_bias_table``); swinlite resized bicubically: other logits."""
    torch.manual_seed(0)
    weights = timm.create_model(
        source, **{k: v for k, v in kwargs.items() if k in ("depths", "embed_dim", "num_heads")}
    ).state_dict()
    offsets = (2 * window[0] - 1) * (2 * window[1] - 1)
    ref = timm.create_model(target, **kwargs).eval()
    ref.load_state_dict(checkpoint_filter_fn(weights, ref))
    model = timm.create_model(target.replace("swin_", "swinlite_"), **kwargs).eval()
    model.load_state_dict(swinlite.convert_state_dict(weights, model))
    assert model.layers[0].blocks[0].attn.rel_pos.table.shape[0] == offsets
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=1e-4)


@pytest.mark.parametrize("route", ["convert_state_dict", "load_state_dict"])
@pytest.mark.parametrize(
    ("img_size", "window"),
    [(112, 7), (192, 12), ((112, 224), 7)],
    ids=["112", "192-window12", "112x224"],
)
def test_checkpoint_with_windows_shrunk_to_small_maps(img_size, window, route):
    """timm shrinks a window to a smaller stage map at its img_size (the last stage's 7 -> 4 at 112, 12 -> 6 at 192,
    7 -> (4, 7) at 112x224); swinlite pads that map to its window and masks the padding, so the table embedded
    centred is the same function. It was resized bicubically (logits off by 1e-3) or, by load_state_dict, refused.
    Reference: timm's Swin of that img_size, whose other stages are whole windows (timm does not mask padding);
    depth 2 in the last stage: its shifted block is unshifted in both."""
    torch.manual_seed(0)
    kwargs = dict(embed_dim=32, depths=(1, 1, 1, 2), num_heads=(1, 2, 4, 8), window_size=window, img_size=img_size)
    ref = timm.create_model("swin_tiny_patch4_window7_224", **kwargs).eval()
    weights = ref.state_dict()
    model = timm.create_model("swinlite_tiny_patch4_window7_224", **kwargs).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exact: nothing resized, nothing to warn about
        model.load_state_dict(swinlite.convert_state_dict(weights, model) if route == "convert_state_dict" else weights)
    x = torch.randn(2, 3, *to_2tuple(img_size))
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=1e-5)


def test_patch4_checkpoint_into_a_patch2_model(tmp_path):
    """The patch embedding is resampled as timm resamples it (it was refused: "another model size?"). Reference: timm's
    Swin given the same file through its own loader."""
    torch.manual_seed(0)
    kwargs = dict(depths=(1, 1, 1, 1), patch_size=2, img_size=112)  # stages of 56, 28, 14, 7 tokens: whole windows
    path = tmp_path / "patch4.safetensors"
    save_file(timm.create_model("swin_tiny_patch4_window7_224", depths=(1, 1, 1, 1)).state_dict(), str(path))
    file = dict(pretrained=True, pretrained_cfg_overlay=dict(file=str(path)))
    ref = timm.create_model("swin_tiny_patch4_window7_224", **kwargs, **file).eval()
    with pytest.warns(
        UserWarning, match=r"resampled patch_embed.proj.weight from \(4, 4\) patches to the model's \(2, 2\)"
    ):
        model = timm.create_model("swinlite_tiny_patch4_window7_224", **kwargs, **file).eval()
    x = torch.randn(1, 3, 112, 112)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=1e-4)
    base = timm.create_model("swin_base_patch4_window7_224", depths=(1, 1, 1, 1)).state_dict()  # 128 channels
    with pytest.raises(ValueError, match=r"proj.weight has shape \(128, 3, 4, 4\), the model expects \(96, 3, 2, 2\)"):
        swinlite.convert_state_dict(base, model)  # another width is another model, whatever its patches


@pytest.mark.parametrize("misfit", ["both", "head.fc.weight"])
def test_classifier_of_another_size_is_dropped_whole_with_a_warning(misfit):
    """A file's classifier whose weight is of another size is no classifier of the model: none of it loads."""
    source = timm.create_model("swinlite_pico_patch2_window4_32", num_classes=10).state_dict()
    model = timm.create_model("swinlite_pico_patch2_window4_32", num_classes=3)
    if misfit != "both":
        fitting = {k: v for k, v in model.state_dict().items() if k.startswith("head.fc.") and k != misfit}
        source = dict(source, **fitting)
    with pytest.warns(UserWarning, match=r"dropping classifier head\.fc\.(weight|bias) .*, head\.fc\.(weight|bias) "):
        converted = swinlite.convert_state_dict(source, model)
    assert "head.fc.weight" not in converted and "head.fc.bias" not in converted
    missing, unexpected = model.load_state_dict(converted, strict=False)
    assert set(missing) == {"head.fc.weight", "head.fc.bias"} and not unexpected


@pytest.mark.parametrize("damage", ["no_bias", "bias_of_another_size", "no_weight"])
def test_half_a_classifier_of_the_models_size_is_an_error(damage, tmp_path):
    """A file whose classifier weight has the model's size beside a missing (or misfit) bias was loaded with a fresh
    classifier and a warning: a pretrained model whose logits were random (timm's own loader refuses the file)."""
    source = timm.create_model("swinlite_pico_patch2_window4_32", num_classes=3).state_dict()
    if damage == "no_bias":
        del source["head.fc.bias"]
    elif damage == "no_weight":
        del source["head.fc.weight"]
    else:
        source["head.fc.bias"] = torch.zeros(10)
    with pytest.raises(ValueError, match=r"the checkpoint's classifier is incomplete: it holds head\.fc\."):
        swinlite.convert_state_dict(source, timm.create_model("swinlite_pico_patch2_window4_32", num_classes=3))
    save_file(source, str(tmp_path / "half.safetensors"))
    with pytest.raises(ValueError, match="classifier is incomplete"):  # through timm's loader, as a pretrained file
        timm.create_model("swinlite_pico_patch2_window4_32", num_classes=3, pretrained=True,
                          pretrained_cfg_overlay=dict(file=str(tmp_path / "half.safetensors")))  # fmt: skip


@pytest.mark.parametrize("fmt", ["safetensors", "pth"])
def test_timm_pretrained_file_overlay(tmp_path, fmt, capsys, monkeypatch):
    """timm.create_model(..., pretrained=True, pretrained_cfg_overlay=dict(file=...)) converts on the fly."""
    torch.manual_seed(0)
    # torchvision's swin_t at one block per stage (its key layout is the same in every block): swin_t's widths
    ref = torchvision.models.swin_transformer.SwinTransformer(
        patch_size=[4, 4], embed_dim=96, depths=list(SMALL["depths"]), num_heads=[3, 6, 12, 24], window_size=[7, 7]
    ).eval()
    if fmt == "pth":
        path = tmp_path / "swin_t.pth"
        torch.save(ref.state_dict(), path)  # raw torchvision layout
    else:
        path = tmp_path / "swin_t.safetensors"
        torch.save({"model": ref.state_dict()}, tmp_path / "raw.pth")
        assert _run_script(capsys, monkeypatch, str(tmp_path / "raw.pth"), str(path))[0] == 0
        assert "layers.0.blocks.0.attn.rel_pos.table" in load_file(path)
    model = timm.create_model(
        "swinlite_tiny_patch4_window7_224", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **SMALL
    ).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=1e-4)


def _run_script(capsys, monkeypatch, *args: str) -> tuple[int, str]:
    """``python scripts/convert_checkpoint.py ARGS`` in this process (no second torch import): (exit code, stderr)."""
    script = SCRIPTS / "convert_checkpoint.py"
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    code = 0
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:  # as the interpreter does: a message goes to stderr with exit code 1
        code = e.code if isinstance(e.code, int) else 1
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("file_kwargs", "said"),
    [({}, "windows 4 normalised by 4"), (dict(pretrained_window_sizes=(2,) * 4), "windows 4 normalised by 2")],
)
def test_convert_script_says_a_v2_files_windows_it_does_not_keep(tmp_path, capsys, monkeypatch, file_kwargs, said):
    """Converted without --model, a release V2 file's coordinates (the windows it was trained at and normalised by)
    were dropped without a word: a later load into a model of other windows had nothing to compare."""
    ref = _timm_pico("swinv2_tiny_window8_256", **file_kwargs)
    torch.save(as_microsoft_release(ref.state_dict(), window=4, coords=dict(ref.named_buffers())), tmp_path / "v2.pth")
    argv = ["convert_checkpoint.py", str(tmp_path / "v2.pth"), str(tmp_path / "o.safetensors")]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit, match="^0$"):
        runpy.run_path(str(SCRIPTS / "convert_checkpoint.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert f"its Swin-V2 coordinates (relative_coords_table: {said}" in printed and "are not kept" in printed


@pytest.mark.parametrize(("flags", "classes"), [(["--num-classes", "3"], 0), ([], 5)])
def test_convert_script_fits_to_model(tmp_path, capsys, monkeypatch, flags, classes):
    """Without --num-classes the checkpoint's 5-class head is kept (it was sized 1000 and dropped, "as its help said,
    the checkpoint's"); another size drops it."""
    source = timm.create_model("swinlite_pico_patch2_window4_32", num_classes=5).eval()
    torch.save({"model": source.state_dict()}, tmp_path / "p.pth")
    out = tmp_path / "p3.safetensors"
    (tmp_path / ".p3.safetensors.tmpab12cd34").write_bytes(b"a write a kill broke off")  # stayed, one per kill
    code, stderr = _run_script(
        capsys, monkeypatch, str(tmp_path / "p.pth"), str(out), "--model", "swinlite_pico_patch2_window4_32", *flags
    )
    assert code == 0, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.pth", "p3.safetensors"]
    weights = load_file(out)
    assert ("head.fc.weight" in weights) == bool(classes) and "layers.3.blocks.0.attn.rel_pos.table" in weights
    if classes:
        model = load_model(out, "swinlite_pico_patch2_window4_32")
        x = torch.randn(1, 3, 32, 32)
        torch.testing.assert_close(model(x), source(x), rtol=0, atol=0)


def test_convert_script_refuses_num_classes_for_a_file_without_a_classifier(tmp_path, capsys, monkeypatch):
    """It warned that the classifier was "left at its initial values", yet the output holds the file's weights alone:
    no classifier, whatever --num-classes said."""
    source = timm.create_model("swinlite_pico_patch2_window4_32", num_classes=0)
    torch.save(source.state_dict(), tmp_path / "backbone.pth")
    out = tmp_path / "out.safetensors"
    code, stderr = _run_script(capsys, monkeypatch, str(tmp_path / "backbone.pth"), str(out), "--model",
                               "swinlite_pico_patch2_window4_32", "--num-classes", "10")  # fmt: skip
    assert code == 2 and "holds no classifier: --num-classes 10 sizes one the output cannot hold" in stderr
    assert "initial values" not in stderr and not out.exists()


OTHER_DEPTHS = {  # (the file's depths, the stages it keeps, the model's depths, the cause and what follows it)
    "file_of_3_stages": ((1, 1, 2), 3, (1, 1, 2, 1), "the checkpoint has 3 stages (depths 1, 1, 2), the model 4 "
                         "(depths 1, 1, 2, 1): a checkpoint of another model (build it with depths=(1, 1, 2) and "
                         "num_heads of 3 stages), or a file cut short; norm.weight has shape (128,)"),
    "file_cut_short": ((1, 1, 2, 1), 3, (1, 1, 2, 1), "the checkpoint has 3 stages (depths 1, 1, 2), the model 4 "
                       "(depths 1, 1, 2, 1): a checkpoint of another model (build it with depths=(1, 1, 2) and "
                       "num_heads of 3 stages), or a file cut short; 16 model weights missing from it: layers.3."),
    "model_of_3_stages": ((1, 1, 2, 1), 4, (1, 1, 2), "the checkpoint has 4 stages (depths 1, 1, 2, 1), the model 3 "
                          "(depths 1, 1, 2): a checkpoint of another model (build it with depths=(1, 1, 2, 1) and "
                          "num_heads of 4 stages); 16 checkpoint keys did not map onto SwinTransformer: layers.3."),
    "more_blocks": ((1, 1, 2, 2), 4, (1, 1, 2, 1), "the checkpoint has 4 stages (depths 1, 1, 2, 2), the model 4 "
                    "(depths 1, 1, 2, 1): a checkpoint of another model (build it with depths=(1, 1, 2, 2)); 13 "
                    "checkpoint keys did not map onto SwinTransformer: layers.3.blocks.1."),
}  # fmt: skip
# the script fits to a registered model: the pico's own depths
SCRIPT_DEPTHS = [(case, "convert_checkpoint") for case in ("file_of_3_stages", "file_cut_short", "more_blocks")]


@pytest.mark.parametrize(("case", "route"), [*((case, "load_checkpoint") for case in OTHER_DEPTHS), *SCRIPT_DEPTHS])
def test_a_file_of_other_depths_says_so(tmp_path, capsys, monkeypatch, case, route):
    """It listed only the keys missing ("16 model weights missing from it: layers.3.blocks.0...") or that did not map,
    swinlite's converted names, not the file's stages; the script's file is timm's layout, counted once converted."""
    depths, stages, model_depths, cause = OTHER_DEPTHS[case]
    heads = (1, 2, 4, 8)
    source = timm.create_model(PICO, depths=depths, num_heads=heads[: len(depths)])
    state = {k: v for k, v in source.state_dict().items() if not k.startswith(f"layers.{stages}.")}
    if route == "load_checkpoint":
        model = timm.create_model(PICO, depths=model_depths, num_heads=heads[: len(model_depths)])
        with pytest.raises(ValueError) as error:
            load_checkpoint(model, state)
        message = str(error.value)
    else:
        torch.save(swinlite.to_timm_state_dict(state, source), tmp_path / "t.pth")
        code, message = _run_script(capsys, monkeypatch, str(tmp_path / "t.pth"), str(tmp_path / "x.safetensors"),
                                    "--model", PICO)  # fmt: skip
        assert code != 0 and not (tmp_path / "x.safetensors").exists()
    assert cause in message, message


V1_FOR_V2 = {  # (timm source, swinlite --model, the cause: the hint names the file's width, not a tiny's, 96)
    "v1_file_v2_model": ("swin_base_patch4_window7_224", "swinlite_v2_tiny_window8_256", "is Swin-V1 (relative "
                         "position bias tables) and the model Swin-V2 (continuous position bias, logit_scale): pick a "
                         "Swin-V1 model with the checkpoint's embed_dim, 128 (a swinlite_* name without v2)"),
    "v2_file_v1_model": ("swinv2_base_window8_256", "swinlite_tiny_patch4_window7_224", "is Swin-V2 (continuous "
                         "position bias, logit_scale) and the model Swin-V1 (relative position bias tables): pick a "
                         "Swin-V2 model with the checkpoint's embed_dim, 128 (a swinlite_v2_* name)"),
}  # fmt: skip


@pytest.fixture(scope="module")
def v1_for_v2_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each V1_FOR_V2 case's timm source saved as ``t.pth`` (in a folder of its own), once for the three routes."""
    files = {}
    for case, (source, _, _) in V1_FOR_V2.items():
        files[case] = tmp_path_factory.mktemp(case) / "t.pth"
        torch.save(timm.create_model(source, **SMALL).state_dict(), files[case])
    return files


@pytest.mark.parametrize("case", V1_FOR_V2)
@pytest.mark.parametrize("route", ["convert_checkpoint", "load_model", "pretrained_strict_false"])
def test_a_swin_v1_file_for_a_swin_v2_model_says_so(tmp_path, capsys, monkeypatch, v1_for_v2_files, case, route):
    """It listed only the keys that did not map ("24 checkpoint keys did not map onto SwinTransformer:
    layers.0.blocks.0.attn.qkv.bias, ..."), swinlite's converted names, not the file's, and no cause; timm's
    pretrained_strict=False dropped those keys, then blamed a norm's shape on "another model size"."""
    _, model, cause = V1_FOR_V2[case]
    checkpoint = v1_for_v2_files[case]
    if route == "pretrained_strict_false":
        with pytest.raises(ValueError, match=re.escape(f"checkpoint {cause}")) as error:
            overlay = {"file": str(checkpoint)}
            timm.create_model(model, pretrained=True, pretrained_strict=False, pretrained_cfg_overlay=overlay, **SMALL)
        assert "another model size" not in str(error.value)
        return
    if route == "load_model":
        with pytest.raises(ValueError) as error:
            load_model(checkpoint, model)
        message = str(error.value)
    else:
        code, message = _run_script(capsys, monkeypatch, str(checkpoint), str(tmp_path / "x.safetensors"),
                                    "--model", model)  # fmt: skip
        assert code != 0 and not (tmp_path / "x.safetensors").exists()
    assert f"t.pth {cause}" in message or f"t.pth: checkpoint {cause}" in message, message
    assert "checkpoint keys did not map onto SwinTransformer" in message


PRE = {"input_size": [3, 16, 16], "interpolation": "bicubic", "mean": [0.5] * 3, "std": [0.25] * 3,
       "crop_pct": 1.0, "crop_mode": "center"}  # fmt: skip
# (input metadata, flags): a trained 2-class classifier's, with and without a --model that agrees (a detection or
# segmentation run's file gives its Swin, without the run's metadata: test_convert_runs.py)
TRAINED = {
    "classifier": (weights_metadata(PICO, {"num_classes": 2}, ["a", "b"], PRE), []),
    "classifier_model_given": (weights_metadata(PICO, {"num_classes": 2}, ["a", "b"], PRE), ["--model", PICO]),
}


def _trained(path: Path, meta: dict[str, object]) -> Path:
    save_safetensors(path, timm.create_model(PICO, num_classes=2).state_dict(), meta)
    return path


@pytest.mark.parametrize("case", TRAINED)
def test_convert_script_keeps_a_trained_files_metadata(tmp_path, capsys, monkeypatch, case):
    """It once wrote only source, layout and version: predict.py and export_onnx.py asked for --model; with --model
    the 2-class classifier was dropped for the variant's 10 classes."""
    meta, flags = TRAINED[case]
    source, out = _trained(tmp_path / "best.safetensors", meta), tmp_path / "out.safetensors"
    code, stderr = _run_script(capsys, monkeypatch, str(source), str(out), *flags)
    assert code == 0, stderr
    kept = read_metadata(out)
    assert kept.pop("source") == str(source) and kept.pop("layout") == "swinlite"
    assert kept == read_metadata(source) | {"swinlite": swinlite.__version__}
    want = load_file(source)
    assert load_file(out).keys() == want.keys() and all(torch.equal(v, want[k]) for k, v in load_file(out).items())
    assert load_model(out).pretrained_cfg["label_names"] == ["a", "b"]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--model", "swinlite_nano_patch2_window4_64"], "--model swinlite_nano_patch2_window4_64 contradicts"),
        (["--model", PICO, "--num-classes", "3"], "--num-classes 3 contradicts"),
    ],
)
def test_convert_script_refuses_flags_that_contradict_the_recorded_model(tmp_path, capsys, monkeypatch, flags,
                                                                         message):  # fmt: skip
    """The kept metadata (classes, preprocessing) would describe another model than the weights."""
    source, out = _trained(tmp_path / "best.safetensors", TRAINED["classifier"][0]), tmp_path / "out.safetensors"
    code, stderr = _run_script(capsys, monkeypatch, str(source), str(out), *flags)
    assert code == 2 and message in stderr and not out.exists(), stderr


def _timm_pico(arch: str = "swin_tiny_patch4_window7_224", img_size: int = 64, **kwargs: Any) -> torch.nn.Module:
    """timm's Swin (or Swin-V2, ``arch``) at swinlite pico's sizes (img 64: no window clamped to a smaller last map)."""
    return timm.create_model(arch, patch_size=2, embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8),
                             window_size=4, img_size=img_size, num_classes=10, **kwargs)  # fmt: skip


@pytest.mark.parametrize("layout, flags", [("swinlite", []), ("timm", ["--model", PICO])])
def test_convert_script_reads_a_ddp_checkpoint(tmp_path, capsys, monkeypatch, layout, flags):
    """Every key behind DistributedDataParallel's ``module.``: swinlite's layout was copied with the prefix (a file
    nothing loads), timm's an unknown layout."""
    torch.manual_seed(0)
    source = timm.create_model(PICO) if layout == "swinlite" else _timm_pico()
    torch.save({"model": {f"module.{k}": v for k, v in source.state_dict().items()}}, tmp_path / "ddp.pth")
    out = tmp_path / "out.safetensors"
    code, stderr = _run_script(capsys, monkeypatch, str(tmp_path / "ddp.pth"), str(out), *flags)
    assert code == 0, stderr
    model = timm.create_model(PICO)
    model.load_state_dict(load_file(out))  # strict: every key, none left over
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), source.eval()(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize("classes", [10, 0])
def test_convert_script_records_the_model_it_fits_to(tmp_path, capsys, monkeypatch, classes):
    """A timm checkpoint fitted to --model recorded only its layout: predict.py, evaluate.py and load_model asked for
    --model again. The output records the model and its classifier's size (0: none), read as plain weights, so every
    reader rebuilds it alone, as the input loads with --model; another --model is refused."""
    torch.manual_seed(0)
    state = {k: v for k, v in _timm_pico().state_dict().items() if classes or not k.startswith("head.fc.")}
    torch.save(state, tmp_path / "timm.pth")
    out = tmp_path / "out.safetensors"
    code, stderr = _run_script(capsys, monkeypatch, str(tmp_path / "timm.pth"), str(out), "--model", PICO)
    assert code == 0, stderr
    assert read_metadata(out)["model_args"] == {"num_classes": classes} and read_info(out) is None
    x = torch.randn(1, 3, 64, 64)
    torch.testing.assert_close(load_model(out)(x), load_model(tmp_path / "timm.pth", PICO)(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match=f"^--model {NANO} contradicts {out}, which holds a {PICO}; drop --model$"):
        load_model(out, NANO)
    if classes:  # predict.py: the same predictions without --model
        Image.new("RGB", (40, 30), (200, 90, 30)).save(tmp_path / "a.png")
        for name, flags in (("out", ["--checkpoint", str(out)]), ("in", ["--checkpoint", str(tmp_path / "timm.pth"),
                                                                          "--model", PICO])):  # fmt: skip
            argv = [*flags, "--topk", "3", "--no-progress", "--output", str(tmp_path / f"{name}.csv")]
            assert load_script("predict").main([*argv, str(tmp_path / "a.png")]) == 0
        assert (tmp_path / "out.csv").read_text() == (tmp_path / "in.csv").read_text()
    # a timm training checkpoint's EMA weights, which it converts, are recorded as such (they read as raw)
    torch.save({"state_dict": _timm_pico().state_dict(), "state_dict_ema": state}, tmp_path / "train.pth.tar")
    ema = tmp_path / "ema.safetensors"
    assert _run_script(capsys, monkeypatch, str(tmp_path / "train.pth.tar"), str(ema), "--model", PICO)[0] == 0
    assert read_metadata(ema)["weights"] == "ema" and weights_kind(ema) == "ema"
    plain = tmp_path / "plain.safetensors"  # without --model: no model record, the kind still (a KeyError after it)
    assert _run_script(capsys, monkeypatch, str(tmp_path / "train.pth.tar"), str(plain))[0] == 0
    assert read_metadata(plain)["weights"] == "ema" and "model" not in read_metadata(plain)
    torch.testing.assert_close(load_model(ema)(x), load_model(out)(x), rtol=0, atol=0)


@pytest.mark.parametrize("prefix", ["module.", "_orig_mod."])
@pytest.mark.parametrize("model_name", [PICO, "swinlite_v2_pico_patch2_window4_32"])
def test_load_state_dict_reads_a_swinlite_file_saved_from_a_wrapper(tmp_path, model_name, prefix):
    """swinlite's layout behind DDP's ``module.`` (or torch.compile's ``_orig_mod.``) failed in load_state_dict with
    every key missing, though load_checkpoint read the file, and load_state_dict the prefixed timm layout."""
    torch.manual_seed(0)
    source = timm.create_model(model_name).eval()
    torch.save({"state_dict": {prefix + k: v for k, v in source.state_dict().items()}}, tmp_path / "ddp.pth")
    model = timm.create_model(model_name).eval()
    model.load_state_dict(torch.load(tmp_path / "ddp.pth", weights_only=True))
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), source(x), rtol=0, atol=0)


def test_a_wrapper_prefix_is_removed_only_from_every_key():
    """Keys partly behind ``module.`` are no wrapper's: they stay, and do not map (never a half-loaded model); a
    prefixed state dict of no Swin layout is named as such."""
    model = timm.create_model(PICO, device="meta")
    state = {f"module.{k}" if k.startswith("layers.0.") else k: v for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"did not map onto SwinTransformer: module\.layers\.0\."):
        swinlite.convert_state_dict(state, model)
    with pytest.raises(ValueError, match=r"unknown checkpoint layout.*got keys \(behind a wrapper's prefix, removed\)"):
        swinlite.convert_state_dict({"module.fc.weight": torch.zeros(1)})
    # torch.compile's wrapper, alone or inside DDP's: every key comes back as the model's
    for prefix in ("_orig_mod.", "module._orig_mod."):
        wrapped = {prefix + k: v for k, v in model.state_dict().items()}
        assert swinlite.convert.without_wrapper_prefix(wrapped).keys() == model.state_dict().keys()


def test_a_converted_timm_model_of_a_size_with_a_shrunk_window_loads_as_it_is(tmp_path):
    """timm's Swin at 112 has a 4x4 window (a 7x7 table) in its last stage; converted without a model, the file keeps
    that table, and load_state_dict and load_model refused it against swinlite's 13x13 ((49, 8) vs (169, 8)),
    though the same file unconverted loaded."""
    reduced = dict(depths=(1, 1, 1, 1), embed_dim=32, num_heads=(1, 2, 4, 8), img_size=112)
    torch.manual_seed(0)
    source = timm.create_model("swin_tiny_patch4_window7_224", **reduced).eval()
    save_safetensors(tmp_path / "t112.safetensors", swinlite.convert_state_dict(source.state_dict()))
    x = torch.randn(1, 3, 112, 112)
    plain = timm.create_model("swinlite_tiny_patch4_window7_224", **reduced).eval()
    plain.load_state_dict(load_file(tmp_path / "t112.safetensors"))
    loaded = load_model(tmp_path / "t112.safetensors", "swinlite_tiny_patch4_window7_224", **reduced)
    with torch.no_grad():
        for model in (plain, loaded):
            torch.testing.assert_close(model(x), source(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_weight_values_are_checked_element_by_element(dtype):
    """check_weight_values sums each tensor first (a NaN or inf never sums to a finite number): finite weights whose
    sum overflows still pass, and every tensor with a NaN or inf, however placed, is refused, as an element-wise
    isfinite finds."""
    big = torch.finfo(dtype).max
    cases = {"overflow": [big, big, -1.0], "nan": [1.0, float("nan")], "inf": [float("inf"), 2.0],
             "inf-inf": [float("inf"), float("-inf")], "-inf": [0.0, float("-inf"), big]}  # fmt: skip
    for name, values in cases.items():
        weights = {f"{name}.weight": torch.tensor(values, dtype=dtype).repeat(1000)}
        if bool(weights[f"{name}.weight"].isfinite().all()):
            check_weight_values(weights)
        else:
            with pytest.raises(ValueError, match=rf"holds NaN or infinite values in 1 weights .*: {name}\.weight$"):
                check_weight_values(weights)
