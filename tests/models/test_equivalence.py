"""swinlite computes the same function as timm's and torchvision's Swin, given their (random) weights."""

import pytest
import timm
import torch
import torchvision
from reference import as_microsoft_release

import swinlite

TINY = ("swin_tiny_patch4_window7_224", "swinlite_tiny_patch4_window7_224")
PAIRS_224 = [
    TINY,
    ("swin_small_patch4_window7_224", "swinlite_small_patch4_window7_224"),
    ("swin_base_patch4_window7_224", "swinlite_base_patch4_window7_224"),
    ("swin_large_patch4_window7_224", "swinlite_large_patch4_window7_224"),
]
PAIRS_384 = [
    ("swin_base_patch4_window12_384", "swinlite_base_patch4_window12_384"),
    ("swin_large_patch4_window12_384", "swinlite_large_patch4_window12_384"),
]
# Swin-T is compared at full depth; the bigger variants at this depth, with their own widths, heads and windows
# (the same code at any depth; tests/models/test_timm_contract.py checks their full depths). Stage 4 holds one
# window at 224 and at 384, so it has no shifted block to lose.
REDUCED_DEPTH = (2, 2, 2, 1)
# The window-12 variants at 384 (stage maps 96, 48, 24, 12: each block costs alike): one block in the first two
# stages, whose widths and heads their 224 pairs also run with a shifted block; layers[2] keeps its shifted window-12
# block (a 24x24 map: two windows per side, shifted and masked).
REDUCED_DEPTH_384 = (1, 1, 2, 1)


def _timm_pair(ref_name: str, name: str, **kwargs) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    ref = timm.create_model(ref_name, **kwargs).eval()
    model = timm.create_model(name, **kwargs).eval()
    model.load_state_dict(swinlite.convert_state_dict(ref.state_dict(), model))
    return ref, model


@pytest.fixture(scope="module")
def tiny_pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    """timm's Swin-T and swinlite's with its weights, shared by the tests that only read them."""
    return _timm_pair(*TINY)


def test_tiny_matches_timm(tiny_pair):
    ref, model = tiny_pair
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "ref_name,name,size,depths",
    [(*p, 224, REDUCED_DEPTH) for p in PAIRS_224[1:]] + [(*p, 384, REDUCED_DEPTH_384) for p in PAIRS_384],
)
def test_bigger_variants_match_timm_at_reduced_depth(ref_name, name, size, depths):
    ref, model = _timm_pair(ref_name, name, depths=depths)
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=1e-4)


def test_reference_path_matches_timm():
    """fast=False (the reference model, swinlite/models/swin.py as written) against timm's Swin-T layout, narrower
    and shallower, at 224."""
    small = dict(embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8))
    ref, model = _timm_pair(*TINY, **small)
    reference = timm.create_model(TINY[1], fast=False, **small).eval()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(reference(x), ref(x), rtol=0, atol=1e-4)


def test_matches_microsoft_layout_checkpoint(tiny_pair):
    ref, _ = tiny_pair
    checkpoint = as_microsoft_release(ref.state_dict(), window=7)
    assert swinlite.detect_layout(checkpoint["model"]) == "microsoft"
    model = timm.create_model(TINY[1]).eval()
    model.load_state_dict(swinlite.convert_state_dict(checkpoint, model))
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=1e-4)


@pytest.fixture(scope="module")
def torchvision_tiny_pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    """torchvision's swin_t and swinlite's Swin-T (padding unmasked, as torchvision) with its weights."""
    torch.manual_seed(0)
    ref = torchvision.models.swin_t().eval()
    model = timm.create_model(TINY[1], mask_padding=False).eval()
    model.load_state_dict(swinlite.convert_state_dict(ref.state_dict(), model))
    return ref, model


@pytest.mark.parametrize("size", [(224, 224), (248, 332), (97, 131)])
def test_matches_torchvision_swin_t(torchvision_tiny_pair, size):
    """At 224 the functions agree whatever the padding rule; at 248x332 only with unmasked padding; at 97x131
    (not a patch multiple) only when the remainder past the last whole patch is dropped, as torchvision's conv does."""
    ref, model = torchvision_tiny_pair
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "name,embed_dim,heads",
    [
        ("swinlite_small_patch4_window7_224", 96, (3, 6, 12, 24)),
        ("swinlite_base_patch4_window7_224", 128, (4, 8, 16, 32)),
    ],
)
def test_matches_torchvision_swin_s_and_b_at_reduced_depth(name, embed_dim, heads):
    """torchvision's swin_s and swin_b (its own SwinTransformer class with their widths), at reduced depth."""
    torch.manual_seed(0)
    ref = torchvision.models.swin_transformer.SwinTransformer(
        patch_size=[4, 4], embed_dim=embed_dim, depths=list(REDUCED_DEPTH), num_heads=list(heads), window_size=[7, 7]
    ).eval()
    model = timm.create_model(name, depths=REDUCED_DEPTH).eval()
    model.load_state_dict(swinlite.convert_state_dict(ref.state_dict(), model))
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=1e-4)


def test_training_gradients_match_timm():
    """The training path (gathered windows, fused attention with recomputed backward, MLP recompute) has timm's
    gradients, at every parameter. Swin-T's layout narrower (32-channel heads as Swin-T's, one in the first stage):
    the same code at any width."""
    torch.manual_seed(0)
    kwargs = dict(embed_dim=32, depths=(2, 2, 2, 2), num_heads=(1, 2, 4, 8), drop_path_rate=0.0)
    ref = timm.create_model("swin_tiny_patch4_window7_224", **kwargs).train()
    model = timm.create_model("swinlite_tiny_patch4_window7_224", **kwargs).train()
    model.load_state_dict(swinlite.convert_state_dict(ref.state_dict(), model))
    x = torch.randn(2, 3, 224, 224)
    target = torch.tensor([3, 7])
    for m in (ref, model):
        torch.nn.functional.cross_entropy(m(x), target).backward()
    ref_grads = swinlite.convert_state_dict({n: p.grad for n, p in ref.named_parameters()}, model)
    grads = dict(model.named_parameters())
    assert ref_grads.keys() == grads.keys()
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name].grad, g, rtol=1e-3, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
