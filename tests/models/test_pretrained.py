"""Pretrained tags: swinlite_X.tag loads the same (offline, cached) file as timm's swin_X.tag and agrees with it.

The hub cache (tests/conftest.py) holds random weights in timm's layout under timm's hub ids. One test
uses a full-size Swin-T file; the others use a reduced-width file of the same tag (same loader, same
code path) so that they take well under a second each.
"""

import re
import warnings
from pathlib import Path

import pytest
import timm
import torch
from reference import as_microsoft_release
from safetensors.torch import save_file
from timm.models import get_arch_pretrained_cfgs, get_pretrained_cfg

import swinlite
from swinlite.detection import build_fpn_backbone
from swinlite.hub import cached_weights
from swinlite.models.pretrained import WeightsUnavailableError, check_weights_source, lite_name

TIMM_ARCHS = [
    "swin_tiny_patch4_window7_224",
    "swin_small_patch4_window7_224",
    "swin_base_patch4_window7_224",
    "swin_large_patch4_window7_224",
    "swin_base_patch4_window12_384",
    "swin_large_patch4_window12_384",
]
TIMM_V2_ARCHS = sorted({n.split(".")[0] for n in timm.list_pretrained("swinv2_*", exclude_filters="swinv2_cr_*")})
TINY = "swin_tiny_patch4_window7_224.ms_in1k"  # the full-size file
TINY_FT = "swin_tiny_patch4_window7_224.ms_in22k_ft_in1k"  # a reduced-width file, for the loading cases
LITE_TINY = "swinlite_tiny_patch4_window7_224.ms_in22k_ft_in1k"
REDUCED = dict(embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8))  # same tag, smaller widths
METADATA = ("hf_hub_id", "url", "num_classes", "input_size", "mean", "std", "crop_pct", "interpolation", "license")


def _lite(name: str) -> str:
    arch, _, tag = name.partition(".")
    return lite_name(arch) + (f".{tag}" if tag else "")


def _logits(model: torch.nn.Module, size: int, channels: int = 3) -> torch.Tensor:
    x = torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model.eval()(x)


@pytest.fixture(scope="module")
def reduced_tiny(offline_hub):
    """A reduced-width Swin-T file cached as timm/swin_tiny_patch4_window7_224.ms_in22k_ft_in1k; timm's model of it."""
    offline_hub.add_timm(TINY_FT, **REDUCED)
    return timm.create_model(TINY_FT, pretrained=True, **REDUCED).eval()


def test_tags_and_metadata_are_timms():
    """Swin's 16 tags and Swin-V2's 12, by one naming rule (swin_X -> swinlite_X, swinv2_X -> swinlite_v2_X)."""
    timm_names = [n for arch in TIMM_ARCHS + TIMM_V2_ARCHS for n in get_arch_pretrained_cfgs(arch)]
    assert len(timm_names) == 16 + 12 and len(TIMM_V2_ARCHS) == 12
    assert sorted(timm.list_pretrained("swinlite*")) == sorted(_lite(n) for n in timm_names)
    assert _lite("swinv2_base_window12to16_192to256.ms_in22k_ft_in1k") == (
        "swinlite_v2_base_window12to16_192to256.ms_in22k_ft_in1k"
    )
    for name in timm_names:
        ours, theirs = get_pretrained_cfg(_lite(name)), get_pretrained_cfg(name)
        assert theirs.hf_hub_id == f"timm/{name}" and theirs.url.startswith("https://github.com/SwinTransformer/")
        assert {k: getattr(ours, k) for k in METADATA} == {k: getattr(theirs, k) for k in METADATA}, name
        assert ours.paper_ids == theirs.paper_ids and ours.fixed_input_size is False
    for arch in TIMM_ARCHS + TIMM_V2_ARCHS:  # the default tag (no suffix)
        assert get_pretrained_cfg(_lite(arch)).tag == get_pretrained_cfg(arch).tag


def test_full_size_tiny_in1k_gives_timms_logits(offline_hub):
    offline_hub.add_timm(TINY)
    theirs = _logits(timm.create_model(TINY, pretrained=True), 224)
    ours = _logits(timm.create_model(_lite(TINY), pretrained=True), 224)
    assert theirs.std() > 0.1  # the weights matter
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "name", ["swin_tiny_patch4_window7_224.ms_in22k", "swin_base_patch4_window12_384.ms_in22k_ft_in1k"]
)
def test_reduced_width_tags_give_timms_logits(offline_hub, name):
    offline_hub.add_timm(name, **REDUCED)
    size = get_pretrained_cfg(name).input_size[-1]
    theirs = _logits(timm.create_model(name, pretrained=True, **REDUCED), size)
    ours = _logits(timm.create_model(_lite(name), pretrained=True, **REDUCED), size)
    assert ours.shape == (1, get_pretrained_cfg(name).num_classes)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)


def test_new_classifier_and_no_classifier(reduced_tiny):
    with pytest.warns(UserWarning, match="dropping classifier head.fc"):
        model = timm.create_model(LITE_TINY, pretrained=True, num_classes=5, **REDUCED).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(x), reduced_tiny.forward_features(x), rtol=0, atol=1e-5)
    pooled = timm.create_model(LITE_TINY, pretrained=True, num_classes=0, **REDUCED).eval()
    with torch.no_grad():
        expected = reduced_tiny.forward_head(reduced_tiny.forward_features(x), pre_logits=True)
        torch.testing.assert_close(pooled(x), expected, rtol=0, atol=1e-5)


def test_a_file_of_another_classifier_is_refused_unless_num_classes_asks_for_one(tmp_path):
    """timm refuses a 10-class file under a 1000-class tag when num_classes is not given; swinlite dropped its
    classifier with a warning: a "pretrained" model of random logits (a 22k file in a 1k cache gave the same)."""
    path = tmp_path / "ft10.pth"
    torch.save(timm.create_model("swin_tiny_patch4_window7_224", num_classes=10, **REDUCED).state_dict(), path)
    file = dict(pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **REDUCED)
    with pytest.raises(ValueError, match=r"its classifier head\.fc\.weight has shape \(10, 256\), the model's "
                                         r"\(1000, 256\): pass num_classes=10 for the file's classifier"):  # fmt: skip
        timm.create_model("swinlite_tiny_patch4_window7_224", **file)
    assert timm.create_model("swinlite_tiny_patch4_window7_224", num_classes=10, **file).num_classes == 10
    with pytest.warns(UserWarning, match="dropping classifier head.fc"):  # asked for: a new one, fresh
        assert timm.create_model("swinlite_tiny_patch4_window7_224", num_classes=5, **file).num_classes == 5


@pytest.mark.parametrize("name", ["swinlite_pico_patch2_window4_32", "swinlite_v2_pico_patch2_window4_32"])
def test_the_small_models_refuse_a_file_of_another_classifier_too(tmp_path, name):
    """Their 10 classes come from the tag's cfg, not from a num_classes the model function passes (which read as
    asked for and dropped a 5-class file's classifier with a warning)."""
    path = tmp_path / "ft5.pth"
    torch.save(timm.create_model(name, num_classes=5).state_dict(), path)
    file = dict(pretrained=True, pretrained_cfg_overlay=dict(file=str(path)))
    assert timm.create_model(name).num_classes == 10
    with pytest.raises(ValueError, match=r"pass num_classes=5 for the file's classifier"):
        timm.create_model(name, **file)
    assert timm.create_model(name, num_classes=5, **file).num_classes == 5


@pytest.fixture(scope="module")
def pico_backbone(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    """A pico Swin without classifier and its weights file, as a detection run's converted backbone holds them."""
    source, path = timm.create_model("swinlite_pico_patch2_window4_32", num_classes=0), tmp_path_factory.mktemp("w")
    _save_lite(source, path / "backbone.safetensors")
    return source, path / "backbone.safetensors"


@pytest.mark.parametrize(
    ("build", "kwargs", "head"),
    [
        ("timm", {}, "refused"),  # the tag's 10-class classifier, which the file lacks
        ("timm", {"num_classes": 10}, "fresh"),  # asked for, of the tag's size too: a new classifier to train
        ("timm", {"pretrained_strict": False}, "fresh"),  # timm's lenient load
        ("timm", {"num_classes": 0}, "none"),
        ("timm", {"features_only": True}, "none"),
        ("fpn", {}, "none"),  # build_fpn_backbone prunes the classifier
    ],
)
def test_a_file_without_a_classifier_is_refused_unless_num_classes_asks_for_one(pico_backbone, build, kwargs, head):
    """A file without a classifier (a detection run's backbone, converted) under the 10-class cfg built a "pretrained"
    model whose classifier kept its initial values, warned only, where timm's loader refuses the missing keys (a
    resnet file without fc.*). num_classes=10 is what a training run on 10 classes passes."""
    name, (source, path) = "swinlite_pico_patch2_window4_32", pico_backbone
    file = dict(pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **kwargs)
    if head == "refused":
        message = (
            rf"{re.escape(str(path))} holds no classifier \(head\.fc\) for the model's 10 classes: pass num_classes=0 "
            r"for features \(a backbone\), or num_classes=N for a new classifier to train, which starts fresh$"
        )
        with pytest.raises(ValueError, match=message):
            timm.create_model(name, **file)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = build_fpn_backbone(name, **file).body.model if build == "fpn" else timm.create_model(name, **file)
    fresh = [w for w in caught if "left at their initial values: head.fc.weight, head.fc.bias" in str(w.message)]
    assert len(fresh) == (head == "fresh")
    swin = model.model if kwargs.get("features_only") else model
    torch.testing.assert_close(swin.layers[3].blocks[0].attn.qkv.weight, source.layers[3].blocks[0].attn.qkv.weight)


def test_build_fpn_backbone_prunes_a_files_classifier_silently(tmp_path):
    """A detection run from a tag (a file with a classifier) warned "dropping the checkpoint's classifier" on every
    build once build_fpn_backbone built its Swin headless: the FPN never uses a classifier."""
    name = "swinlite_pico_patch2_window4_32"
    _save_lite(timm.create_model(name), tmp_path / "classifier.safetensors")
    file = dict(pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / "classifier.safetensors")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_fpn_backbone(name, **file)
    assert not [w for w in caught if "classifier" in str(w.message)], [str(w.message) for w in caught]


def test_a_weights_file_that_cannot_be_read_is_named_before_timm_reads_it(offline_hub, tmp_path):
    """A mistyped overlay file gave timm's FileNotFoundError with no message; a cached download cut short, the
    safetensors reader's "incomplete metadata" naming no file."""
    typo = dict(pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / "typo.pth")), **REDUCED)
    with pytest.raises(ValueError, match=r"^the pretrained weights of swinlite_tiny_patch4_window7_224: .*typo\.pth"):
        timm.create_model("swinlite_tiny_patch4_window7_224", **typo)
    offline_hub.add_timm(TINY_FT, **REDUCED)
    cached = cached_weights(LITE_TINY)
    whole = cached.read_bytes()  # the module's cache: restored for its other tests
    cached.write_bytes(whole[: len(whole) // 2])
    try:
        with pytest.raises(ValueError, match=r"damaged \(truncated\?\) safetensors file.*; delete it to download"):
            timm.create_model(LITE_TINY, pretrained=True, **REDUCED)
        other = dict(pretrained_cfg_overlay=dict(hf_hub_id="someone/else"))  # another source: the cache not blamed
        with pytest.raises(Exception) as raised:
            timm.create_model(LITE_TINY, pretrained=True, **other, **REDUCED)
        assert "damaged" not in str(raised.value) and "someone/else" in str(raised.value)
        variant, tag = LITE_TINY.split(".")
        check_weights_source(variant, {"pretrained_cfg": tag, "cache_dir": str(tmp_path)})  # timm reads that cache
    finally:
        cached.write_bytes(whole)


def test_a_torch_checkpoint_cut_short_is_named_before_timm_reads_it(tmp_path):
    """Only cut safetensors files were tried; a .pth cut short gave timm's "PytorchStreamReader failed reading zip
    archive" without the check (and a training run's model.pretrained, after the data scan)."""
    name = "swinlite_pico_patch2_window4_32"
    torch.save(timm.create_model(name).state_dict(), tmp_path / "whole.pth")
    whole = (tmp_path / "whole.pth").read_bytes()
    (tmp_path / "cut.pth").write_bytes(whole[: len(whole) // 2])
    cut = dict(pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / "cut.pth")))
    with pytest.raises(ValueError, match=r"cut\.pth' is a damaged \(truncated\?\) torch checkpoint"):
        timm.create_model(name, **cut)


@pytest.mark.parametrize("in_chans", [1, 4])
def test_in_chans_adapts_the_first_conv_as_timm_does(reduced_tiny, in_chans):
    theirs = timm.create_model(TINY_FT, pretrained=True, in_chans=in_chans, **REDUCED)
    ours = timm.create_model(LITE_TINY, pretrained=True, in_chans=in_chans, **REDUCED)
    torch.testing.assert_close(_logits(ours, 224, in_chans), _logits(theirs, 224, in_chans), rtol=0, atol=1e-5)


def test_features_only(reduced_tiny):
    kwargs = dict(pretrained=True, features_only=True, out_indices=(1, 3), **REDUCED)
    theirs = timm.create_model(TINY_FT, **kwargs).eval()
    ours = timm.create_model(LITE_TINY, **kwargs).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        for a, b in zip(ours(x), theirs(x), strict=True):  # timm's Swin features are NHWC
            torch.testing.assert_close(a, b.permute(0, 3, 1, 2), rtol=0, atol=1e-5)


@pytest.mark.parametrize("route", ["built_at_384", "set_input_size"])
def test_window12_at_384_from_a_window7_tag_gives_timms_logits(reduced_tiny, route):
    """Every bias table is resized as timm's Swin resizes it (timm's ``resize_rel_pos_bias_table``, in its
    ``checkpoint_filter_fn`` and its ``set_input_size``), whichever way the model gets its 12x12 windows, and named in
    a warning either way; nothing else changes. The tag built at 384 resized bicubically: 2.6e-3 off timm's logits
    where ``set_input_size`` was not.
    Reference: timm's Swin built the same way from the same file."""
    theirs = timm.create_model(TINY_FT, pretrained=True, window_size=12, img_size=384, **REDUCED)
    if route == "built_at_384":
        with pytest.warns(
            UserWarning, match=r"resized 5 relative position bias tables to the model's window \(12, 12\)"
        ):
            ours = timm.create_model(LITE_TINY, pretrained=True, window_size=12, img_size=384, **REDUCED)
    else:
        ours = timm.create_model(LITE_TINY, pretrained=True, **REDUCED)
        with pytest.warns(UserWarning, match="set_input_size resized 5 relative position bias tables"):
            ours.set_input_size(img_size=384)
    assert ours.layers[0].blocks[0].attn.rel_pos.table.shape[0] == 23 * 23
    torch.testing.assert_close(_logits(ours, 384), _logits(theirs, 384), rtol=0, atol=1e-6)
    loaded = ours.state_dict()
    for key, value in reduced_tiny.state_dict().items():
        if not key.endswith(("relative_position_bias_table", "relative_position_index")):
            torch.testing.assert_close(loaded[key], value, rtol=0, atol=0)


def test_a_tag_built_at_a_size_where_timm_shrinks_a_window_gives_timms_logits(reduced_tiny):
    """At 112 the last stage's map is 4x4: timm builds that stage with a 4x4 window and its loader resizes the tag's
    13x13 tables to 7x7. swinlite kept the tables as they were (1.8e-3 from timm's logits at full width), where the
    same model built at 224 then set to 112 by ``set_input_size`` computed timm's."""
    theirs = timm.create_model(TINY_FT, pretrained=True, img_size=112, **REDUCED)
    ours = timm.create_model(LITE_TINY, pretrained=True, img_size=112, **REDUCED)
    assert [tuple(stage.blocks[0].window_size) for stage in theirs.layers][-1] == (4, 4)
    expected = _logits(theirs, 112)
    torch.testing.assert_close(_logits(ours, 112), expected, rtol=0, atol=1e-5)
    at_224 = timm.create_model(LITE_TINY, pretrained=True, **REDUCED)  # the tables as the tag has them
    assert (expected - _logits(at_224, 112)).abs().max() > 1e-4  # the resize shows in the logits


@pytest.mark.parametrize("layout", ["timm", "microsoft", "swinlite"])
def test_local_file_overlay_in_any_layout(reduced_tiny, tmp_path, layout):
    state_dict = reduced_tiny.state_dict()
    path = tmp_path / "weights.pth"
    if layout == "microsoft":
        torch.save(as_microsoft_release(state_dict, window=7), path)
    elif layout == "swinlite":
        torch.save(swinlite.convert_state_dict(state_dict), path)
    else:
        torch.save(state_dict, path)
    ours = timm.create_model(
        "swinlite_tiny_patch4_window7_224", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **REDUCED
    )
    torch.testing.assert_close(_logits(ours, 224), _logits(reduced_tiny, 224), rtol=0, atol=1e-5)


def test_official_layout_file_by_release_url(reduced_tiny, tmp_path, monkeypatch):
    """The url path: the release file (Microsoft layout) in torch's hub cache, the hub id switched off."""
    url = get_pretrained_cfg(TINY_FT).url
    checkpoints = tmp_path / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    torch.save(as_microsoft_release(reduced_tiny.state_dict(), window=7), checkpoints / url.rsplit("/", 1)[1])
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    ours = timm.create_model(LITE_TINY, pretrained=True, pretrained_cfg_overlay=dict(hf_hub_id=None), **REDUCED)
    torch.testing.assert_close(_logits(ours, 224), _logits(reduced_tiny, 224), rtol=0, atol=1e-5)


def test_offline_without_the_file_names_the_repo_the_url_and_the_local_way(offline_hub):
    name = "swinlite_small_patch4_window7_224.ms_in1k"
    with pytest.raises(WeightsUnavailableError) as info:
        timm.create_model(name, pretrained=True, **REDUCED)
    message = str(info.value)
    assert "timm/swin_small_patch4_window7_224.ms_in1k" in message
    assert get_pretrained_cfg(name).url in message
    assert "pretrained_cfg_overlay=dict(file=" in message and "scripts/convert_checkpoint.py" in message


def _save_lite(model: torch.nn.Module, path: Path, keys: list[str] | None = None) -> None:
    state_dict = {k: v for k, v in model.state_dict().items() if keys is None or k in keys}
    save_file({k: v.contiguous() for k, v in state_dict.items()}, path)


@pytest.mark.parametrize("strict", [None, True])  # timm's default, and pretrained_strict=True (a TypeError) given
@pytest.mark.parametrize("num_classes", [None, 3])
def test_a_file_missing_backbone_weights_is_an_error(reduced_tiny, tmp_path, num_classes, strict):
    path = tmp_path / "partial.safetensors"
    keys = ["patch_embed.proj.weight", "patch_embed.proj.bias", "layers.0.blocks.0.attn.rel_pos.table"]
    _save_lite(timm.create_model("swinlite_tiny_patch4_window7_224", **REDUCED), path, keys)
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    kwargs |= {} if strict is None else {"pretrained_strict": strict}
    with pytest.raises(ValueError, match=r"model weights missing from it: .*layers\.0\.blocks\.0\.attn\.qkv"):
        timm.create_model(LITE_TINY, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **kwargs, **REDUCED)


def test_pretrained_strict_false_loads_a_file_missing_backbone_weights_as_timm_does(reduced_tiny, tmp_path):
    """timm's pretrained_strict=False was a TypeError (swinlite passed its own). Now, as timm's Swin: the weights the
    file lacks keep their initial values, named in a warning; a key the model lacks is dropped, named.
    Reference: timm's Swin given the same file, the missing weight copied across."""
    missing = "layers.3.blocks.0.mlp.fc2.bias"
    state_dict = {k: v for k, v in reduced_tiny.state_dict().items() if k != missing}
    path = tmp_path / "partial.pth"
    torch.save(state_dict | {"extra.weight": torch.zeros(2)}, path)
    kwargs = dict(pretrained=True, pretrained_strict=False, pretrained_cfg_overlay=dict(file=str(path)), **REDUCED)
    theirs = timm.create_model(TINY_FT, **kwargs)
    with pytest.warns(UserWarning) as record:
        ours = timm.create_model(LITE_TINY, **kwargs)
    messages = [str(w.message) for w in record]
    assert any("pretrained_strict=False" in m and missing in m for m in messages)
    assert any("pretrained_strict=False: dropping 1 checkpoint keys" in m and "extra.weight" in m for m in messages)
    with torch.no_grad():
        ours.get_parameter(missing).copy_(theirs.get_parameter(missing))
    torch.testing.assert_close(_logits(ours, 224), _logits(theirs, 224), rtol=0, atol=1e-5)


def test_a_classifier_of_the_models_size_is_loaded(reduced_tiny, tmp_path):
    """A 3-class fine-tuned file loaded with num_classes=3 keeps its classifier (timm alone would drop it)."""
    trained = timm.create_model("swinlite_tiny_patch4_window7_224", num_classes=3, **REDUCED)
    path = tmp_path / "finetuned.safetensors"
    _save_lite(trained, path)
    loaded = timm.create_model(
        LITE_TINY, pretrained=True, num_classes=3, pretrained_cfg_overlay=dict(file=str(path)), **REDUCED
    )
    torch.testing.assert_close(_logits(loaded, 224), _logits(trained, 224), rtol=0, atol=0)


@pytest.mark.parametrize(("bad", "match"), [(float("nan"), "NaN or infinite"), (None, "floating point")])
def test_nan_or_integer_weights_are_an_error(reduced_tiny, tmp_path, bad, match):
    state_dict = dict(reduced_tiny.state_dict())
    key = "layers.2.blocks.1.mlp.fc1.weight"
    state_dict[key] = state_dict[key].clone().fill_(bad) if bad is not None else state_dict[key].long()
    path = tmp_path / "bad.safetensors"
    save_file({k: v.contiguous() for k, v in state_dict.items()}, path)
    with pytest.raises(ValueError, match=match + ".*" + key.replace(".", r"\.")):
        timm.create_model(LITE_TINY, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **REDUCED)


def test_detection_backbone_starts_from_the_pretrained_weights(reduced_tiny):
    with pytest.warns(UserWarning, match="out_norms.0.weight"):  # the per-level norms start fresh
        backbone = build_fpn_backbone(LITE_TINY, pretrained=True, out_norm=True, **REDUCED)
    theirs = timm.create_model(TINY_FT, pretrained=True, features_only=True, **REDUCED).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():  # fresh LayerNorms (weight 1, bias 0) on timm's stage outputs
        expected = [torch.nn.functional.layer_norm(f, f.shape[-1:]) for f in theirs(x)]  # NHWC
        for a, b in zip(backbone.eval().body(x), expected, strict=True):
            torch.testing.assert_close(a, b.permute(0, 3, 1, 2), rtol=0, atol=1e-4)
