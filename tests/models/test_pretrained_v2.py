"""Swin-V2 tags: swinlite_v2_X.tag loads the same (offline, cached) file as timm's swinv2_X.tag and agrees with it.

The hub cache (tests/conftest.py) holds random weights of timm's own V2 models under timm's hub ids. One test uses
a full-size Swin-V2-T file; the others use reduced-width files of their tags (same loader, same code path).
"""

import warnings

import pytest
import timm
import torch
from reference import as_microsoft_release
from safetensors.torch import save_file
from timm.models import get_pretrained_cfg

import swinlite
from swinlite.models.pretrained import WeightsUnavailableError

TINY = "swinv2_tiny_window8_256.ms_in1k"  # the full-size file
WINDOW16 = "swinv2_tiny_window16_256.ms_in1k"  # reduced width: 8x8 windows in the last stage at 256
FROM_192 = "swinv2_base_window12to16_192to256.ms_in22k_ft_in1k"  # reduced width: pretrained windows 12, 12, 12, 6
REDUCED = dict(embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8))


def _lite(name: str) -> str:
    return name.replace("swinv2_", "swinlite_v2_", 1)


def _logits(model: torch.nn.Module, size: int, channels: int = 3) -> torch.Tensor:
    x = torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model.eval()(x)


@pytest.fixture(scope="module")
def window16(offline_hub) -> torch.nn.Module:
    """A reduced-width Swin-V2-T window-16 file cached under timm's hub id; timm's model of it."""
    offline_hub.add_timm(WINDOW16, **REDUCED)
    return timm.create_model(WINDOW16, pretrained=True, **REDUCED).eval()


def test_full_size_tiny_gives_timms_logits(offline_hub):
    offline_hub.add_timm(TINY)
    theirs = _logits(timm.create_model(TINY, pretrained=True), 256)
    ours = _logits(timm.create_model(_lite(TINY), pretrained=True), 256)
    assert theirs.std() > 0.1  # the weights matter
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", [WINDOW16, FROM_192])
def test_reduced_width_tags_give_timms_logits(offline_hub, window16, name):
    """A clipped last-stage window (window 16 at 256) and pretrained windows (the 192to256 fine-tune)."""
    if name != WINDOW16:
        offline_hub.add_timm(name, **REDUCED)
    theirs = _logits(timm.create_model(name, pretrained=True, **REDUCED), 256)
    model = timm.create_model(_lite(name), pretrained=True, **REDUCED)
    assert [s.blocks[0].window for s in model.layers] == [(16, 16)] * 3 + [(8, 8)]
    torch.testing.assert_close(_logits(model, 256), theirs, rtol=0, atol=1e-4)


def test_new_classifier_and_no_classifier(window16):
    with pytest.warns(UserWarning, match="dropping classifier head.fc"):
        model = timm.create_model(_lite(WINDOW16), pretrained=True, num_classes=5, **REDUCED).eval()
    x = torch.randn(1, 3, 256, 256)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(x), window16.forward_features(x), rtol=0, atol=1e-5)
        pooled = timm.create_model(_lite(WINDOW16), pretrained=True, num_classes=0, **REDUCED).eval()
        expected = window16.forward_head(window16.forward_features(x), pre_logits=True)
        torch.testing.assert_close(pooled(x), expected, rtol=0, atol=1e-5)


def test_in_chans_adapts_the_first_conv_as_timm_does(window16):
    theirs = timm.create_model(WINDOW16, pretrained=True, in_chans=1, **REDUCED)
    ours = timm.create_model(_lite(WINDOW16), pretrained=True, in_chans=1, **REDUCED)
    torch.testing.assert_close(_logits(ours, 256, 1), _logits(theirs, 256, 1), rtol=0, atol=1e-5)


def test_features_only_nchw_at_strides_4_to_32(window16):
    theirs = timm.create_model(WINDOW16, pretrained=True, features_only=True, **REDUCED).eval()
    ours = timm.create_model(_lite(WINDOW16), pretrained=True, features_only=True, **REDUCED).eval()
    assert ours.feature_info.reduction() == [4, 8, 16, 32]
    x = torch.randn(1, 3, 256, 256)
    with torch.no_grad():
        for a, b in zip(ours(x), theirs(x), strict=True):  # timm's are NHWC
            torch.testing.assert_close(a, b.permute(0, 3, 1, 2), rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(img_size=512),  # windows 16 in every stage: the last stage's grows with its map
        dict(img_size=384, window_size=12),
        dict(img_size=384, window_size=12, pretrained_window_sizes=(16, 16, 16, 8)),  # the 12toN fine-tunes' way
    ],
)
def test_another_window_or_image_size_loads_every_weight_as_is(window16, kwargs):
    """No table to resize: the position bias MLP loads unchanged and its coordinates follow the new windows
    (normalised by them, or by pretrained_window_sizes); timm's model with the same arguments agrees (at sizes
    where every stage's map is a window multiple: elsewhere timm shifts before padding)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing resized, nothing dropped, nothing fresh
        ours = timm.create_model(_lite(WINDOW16), pretrained=True, **kwargs, **REDUCED)
    loaded = swinlite.convert_state_dict(window16.state_dict())
    assert all(torch.equal(ours.state_dict()[k], v) for k, v in loaded.items())
    theirs = timm.create_model(WINDOW16, pretrained=True, **kwargs, **REDUCED)
    size = kwargs["img_size"]
    torch.testing.assert_close(_logits(ours, size), _logits(theirs, size), rtol=0, atol=1e-4)


def test_official_layout_file_by_release_url(window16, tmp_path, monkeypatch):
    """The url path: the release file (Microsoft layout) in torch's hub cache, the hub id switched off."""
    url = get_pretrained_cfg(WINDOW16).url
    checkpoints = tmp_path / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    release = as_microsoft_release(window16.state_dict(), window=8, coords=dict(window16.named_buffers()))
    assert swinlite.detect_layout(release["model"]) == "microsoft"
    torch.save(release, checkpoints / url.rsplit("/", 1)[1])
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    ours = timm.create_model(_lite(WINDOW16), pretrained=True, pretrained_cfg_overlay=dict(hf_hub_id=None), **REDUCED)
    torch.testing.assert_close(_logits(ours, 256), _logits(window16, 256), rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            lambda sd: sd.pop("layers.1.blocks.0.attn.logit_scale"),
            r"missing from it: layers\.1\.blocks\.0\.attn\.logit",
        ),
        (lambda sd: sd["layers.2.blocks.1.attn.q_bias"].fill_(float("nan")), r"NaN or infinite.*attn\.q_bias"),
    ],
)
def test_nothing_loads_half(window16, tmp_path, edit, match):
    state_dict = {k: v.clone() for k, v in window16.state_dict().items()}
    edit(state_dict)
    path = tmp_path / "bad.safetensors"
    save_file(state_dict, path)
    with pytest.raises(ValueError, match=match):
        timm.create_model(_lite(WINDOW16), pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **REDUCED)


def test_offline_without_the_file_names_the_repo_the_url_and_the_local_way(offline_hub):
    name = "swinlite_v2_small_window8_256.ms_in1k"
    with pytest.raises(WeightsUnavailableError) as info:
        timm.create_model(name, pretrained=True, **REDUCED)
    message = str(info.value)
    assert "\n" not in message and "hub repo timm/swinv2_small_window8_256.ms_in1k" in message
    assert get_pretrained_cfg(name).url in message
    assert "pretrained_cfg_overlay=dict(file=" in message and "scripts/convert_checkpoint.py" in message
