"""swinlite's Swin-V2 computes torchvision's function given its (random) weights; torchvision's swin_v2_t/s/b and
the official Microsoft layout convert (timm's V2 layout: tests/models/test_pretrained_v2.py)."""

import pytest
import timm
import torch
import torchvision

import swinlite

TINY = "swinlite_v2_tiny_window8_256"
REDUCED_DEPTH = (2, 2, 2, 1)


def _away_from_init(ref: torch.nn.Module) -> None:
    """Moves the parameters torchvision initialises to constants (norms, logit scales and every bias: all zero,
    qkv's too) off them, so that a conversion mapping one onto another (q's bias onto v's) changes the function."""
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "norm" in name or "logit_scale" in name or name.endswith("bias"):
                p.add_(0.2 * torch.randn_like(p))


@pytest.fixture(scope="module")
def torchvision_tiny_pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    """torchvision's swin_v2_t (its constant-initialised parameters randomised) and swinlite's V2-T (padding
    unmasked) with its weights."""
    torch.manual_seed(0)
    ref = torchvision.models.swin_v2_t().eval()
    _away_from_init(ref)
    state = ref.state_dict()
    assert swinlite.detect_layout(state) == "torchvision"
    model = timm.create_model(TINY, mask_padding=False).eval()
    model.load_state_dict(swinlite.convert_state_dict(state, model))
    return ref, model


@pytest.mark.parametrize("size", [(256, 256), (130, 163)])
def test_matches_torchvision_swin_v2_t(torchvision_tiny_pair, size):
    """At 256 (window multiples everywhere) and at 130x163 (maps 32x40, 16x20, 8x10, 4x5: three stages pad, and
    torchvision lets the padding take part in attention; mask_padding=False reproduces it)."""
    ref, model = torchvision_tiny_pair
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        expected = ref(x)
        assert expected.std() > 0.1
        torch.testing.assert_close(model(x), expected, rtol=0, atol=1e-4)


def test_torchvision_v2_key_bias_is_dropped_as_torchvision_ignores_it(torchvision_tiny_pair):
    ref, model = torchvision_tiny_pair
    bias = ref.features[1][0].attn.qkv.bias
    converted = swinlite.convert_state_dict(ref.state_dict())
    torch.testing.assert_close(converted["layers.0.blocks.0.attn.q_bias"], bias[:96], rtol=0, atol=0)
    torch.testing.assert_close(converted["layers.0.blocks.0.attn.v_bias"], bias[192:], rtol=0, atol=0)
    assert not any(k.endswith("qkv.bias") for k in converted)


@pytest.mark.parametrize(
    ("builder", "name"), [("swin_v2_s", "swinlite_v2_small_window8_256"), ("swin_v2_b", "swinlite_v2_base_window8_256")]
)
def test_torchvision_swin_v2_s_and_b_state_dicts_fit_at_full_depth(builder, name):
    """Every key maps and every shape fits, nothing is missing (built on the meta device: no values)."""
    with torch.device("meta"):
        state = getattr(torchvision.models, builder)().state_dict()
    model = timm.create_model(name, device="meta")
    converted = swinlite.convert_state_dict(state, model)
    assert sorted(converted) == sorted(model.state_dict())


def test_matches_torchvision_swin_v2_b_at_reduced_depth():
    """torchvision's swin_v2_b (its own SwinTransformer class with V2 blocks and its widths), at reduced depth."""
    torch.manual_seed(0)
    ref = torchvision.models.swin_transformer.SwinTransformer(
        patch_size=[4, 4],
        embed_dim=128,
        depths=list(REDUCED_DEPTH),
        num_heads=[4, 8, 16, 32],
        window_size=[8, 8],
        block=torchvision.models.swin_transformer.SwinTransformerBlockV2,
        downsample_layer=torchvision.models.swin_transformer.PatchMergingV2,
    ).eval()
    _away_from_init(ref)
    model = timm.create_model("swinlite_v2_base_window8_256", depths=REDUCED_DEPTH, mask_padding=False).eval()
    model.load_state_dict(swinlite.convert_state_dict(ref.state_dict(), model))
    x = torch.randn(1, 3, 128, 128)  # the last stage's 4x4 map pads to a window
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=1e-4)


def test_reference_path_and_fast_path_agree(torchvision_tiny_pair):
    """fast=False (swin.py as written) and the default build (its MLPs on the fast path) compute one function."""
    _, model = torchvision_tiny_pair
    reference = timm.create_model(TINY, mask_padding=False, fast=False).eval()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(1, 3, 100, 140)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)
