"""ContinuousPositionBias against timm's Swin-V2 attention and a naive per-pair formula, and inside swinlite models."""

import itertools
import math

import pytest
import timm
import torch
from timm.models.swin_transformer_v2 import WindowAttention as TimmV2WindowAttention

import swinlite  # noqa: F401  (registers the models)
from swinlite.models.swin import ContinuousPositionBias


def timm_v2_bias(attn: TimmV2WindowAttention, num_heads: int) -> torch.Tensor:
    """The bias as timm's Swin-V2 WindowAttention.forward computes it from its own buffers, op for op (the sigmoid on
    the contiguous (heads, N, N) layout: on AVX-512 CPUs its last bit depends on an element's place)."""
    n = attn.window_size[0] * attn.window_size[1]
    table = attn.cpb_mlp(attn.relative_coords_table).view(-1, num_heads)
    bias = table[attn.relative_position_index.view(-1)].view(n, n, -1).permute(2, 0, 1).contiguous()
    return 16 * torch.sigmoid(bias)


@pytest.mark.parametrize(("window", "pretrained"), [((4, 4), None), ((3, 5), None), ((6, 6), (4, 4)), ((1, 3), None)])
def test_matches_timm_swin_v2_bit_for_bit(window, pretrained):
    heads = 3
    torch.manual_seed(0)
    ours = ContinuousPositionBias(window, heads, pretrained_window=pretrained)
    ref = TimmV2WindowAttention(8 * heads, window, heads, pretrained_window_size=pretrained or (0, 0))
    ref.cpb_mlp.load_state_dict(ours.mlp.state_dict())
    assert torch.equal(ours(), timm_v2_bias(ref, heads))


def test_matches_naive_per_pair_formula():
    window, heads = (3, 4), 2
    torch.manual_seed(0)
    cpb = ContinuousPositionBias(window, heads)
    coords = list(itertools.product(range(window[0]), range(window[1])))
    bias = cpb()
    assert bias.shape == (heads, 12, 12)
    assert bias.is_contiguous(), "heads outermost: compiled bias + softmax kernels read it vectorised"
    for (i, ci), (j, cj) in itertools.product(enumerate(coords), repeat=2):
        t = [8 * (a - b) / (w - 1) for a, b, w in zip(ci, cj, window, strict=True)]
        x = torch.tensor([math.copysign(math.log2(abs(v) + 1) / 3, v) for v in t])
        expected = 16 * torch.sigmoid(cpb.mlp(x))  # (heads,)
        torch.testing.assert_close(bias[:, i, j], expected)
    assert ((bias > 0) & (bias < 16)).all()


def test_gradients_reach_the_mlp_and_meta_init_works():
    cpb = ContinuousPositionBias((4, 4), 2)
    cpb().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in cpb.parameters())
    meta = ContinuousPositionBias((4, 4), 2, device="meta").to_empty(device="cpu")
    meta.init_non_persistent_buffers()
    assert torch.equal(meta.coords, cpb.coords) and torch.equal(meta.index, cpb.index)


def test_a_sub_window_must_fit_in_the_window():
    """RelativePositionBias's check: a larger sub-window read out of the offsets' bounds ('INDICES element is out of
    DATA bounds')."""
    cpb = ContinuousPositionBias((4, 4), 2)
    assert cpb((4, 3)).shape == (2, 12, 12)
    with pytest.raises(ValueError, match=r"sub-window \(5, 3\) must fit in the bias's 2-D window \(4, 4\)"):
        cpb((5, 3))


@pytest.mark.parametrize(
    ("window", "message"),
    [
        # raised by torch.arange after the window had changed: the bias was left broken
        ((0, 4), r"window must be a non-empty sequence of positive ints, got \(0, 4\)"),
        # truncated to (4, 4), silently
        ((4.7, 4.5), r"window must be a non-empty sequence of positive ints, got \(4\.7, 4\.5\)"),
        ((True, 4), r"window must be a non-empty sequence of positive ints, got \(True, 4\)"),
        # taken, and the next forward failed in the MLP (mat1 and mat2 shapes cannot be multiplied)
        ((8,), r"window \(8,\) needs 2 axes, one per coordinate the bias's MLP takes \(its window is \(4, 4\)\)"),
        ((4, 4, 4), r"window \(4, 4, 4\) needs 2 axes"),
    ],
)
def test_set_window_refuses_a_bad_window_before_changing_anything(window, message):
    torch.manual_seed(0)
    cpb = ContinuousPositionBias((4, 4), 2, pretrained_window=(6, 6))
    before = cpb()
    with pytest.raises(ValueError, match=message):
        cpb.set_window(window)
    assert cpb.window == (4, 4) and torch.equal(cpb(), before)
    cpb.set_window((5, 3))
    assert cpb().shape == (2, 15, 15)


def test_an_int_window_is_the_square_window_as_the_model_takes_it():
    """``ContinuousPositionBias(7, 2)`` was "TypeError: object of type 'int' has no len()" (timm's takes an int)."""
    torch.manual_seed(0)
    square = ContinuousPositionBias((3, 3), 2, pretrained_window=(4, 4))
    torch.manual_seed(0)
    cpb = ContinuousPositionBias(3, 2, pretrained_window=4)
    assert (cpb.window, cpb.pretrained_window) == ((3, 3), (4, 4)) and torch.equal(cpb(), square())
    cpb.set_window(2)
    assert cpb.window == (2, 2) and cpb().shape == (2, 4, 4)


@pytest.mark.parametrize("pretrained", [(0, 0), (-3, 4), (0, 12)])
def test_pretrained_window_must_be_positive(pretrained):
    """timm's pretrained_window_size 0 means the window itself (None here; the model's pretrained_window_sizes
    maps it): the bias took (0, 0) and normalised its coordinates by 1, silently another bias than timm's."""
    with pytest.raises(ValueError, match=r"pretrained_window \(None for the window's own\) must be a non-empty"):
        ContinuousPositionBias((4, 4), 2, pretrained_window=pretrained)


def test_swin_model_with_cpb_end_to_end():
    torch.manual_seed(0)
    model = timm.create_model("swinlite_pico_patch2_window4_32", rel_pos="cpb")
    attns = [b.attn for stage in model.layers for b in stage.blocks]
    assert all(isinstance(a.rel_pos, ContinuousPositionBias) for a in attns)
    x = torch.randn(2, 3, 40, 36)  # not a window multiple: padding and shift masks on top of the bias
    out = model(x)
    out.square().sum().backward()
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    assert all(a.rel_pos.mlp[0].weight.grad.abs().sum() > 0 for a in attns)
    assert all(".rel_pos." in n for n in model.no_weight_decay())
    model.eval()
    fused = model(x)
    model_explicit = timm.create_model("swinlite_pico_patch2_window4_32", rel_pos="cpb", fast=False).eval()
    model_explicit.load_state_dict(model.state_dict())
    torch.testing.assert_close(model_explicit(x), fused, atol=1e-5, rtol=1e-5)


def test_registered_cpb_variant():
    model = timm.create_model("swinlite_tiny_cpb_patch4_window7_224", num_classes=5)
    assert isinstance(model.layers[2].blocks[0].attn.rel_pos, ContinuousPositionBias)
    assert model(torch.randn(1, 3, 56, 56)).shape == (1, 5)
