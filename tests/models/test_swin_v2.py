"""Swin-V2's pieces in the reference model: the block against a naive float64 loop (forward and backward), patch
merging, the stage windows and the model's V2 arguments."""

import math

import pytest
import torch
from reference import naive_v2_block
from timm.layers import RmsNorm

from swinlite.models.swin import (
    BlockOptions,
    PatchMergingV2,
    SwinTransformer,
    SwinV2Block,
    WindowAttention,
    WindowAttentionV2,
    stage_windows,
)


def _random_v2_block(window, shift, mask_padding, pretrained_window=None) -> SwinV2Block:
    """A float64 V2 block with every weight random: post-norms away from their zero init, biases, a clamped head."""
    torch.manual_seed(0)
    options = BlockOptions(mask_padding=mask_padding)
    block = SwinV2Block(12, 3, window, shift=shift, pretrained_window=pretrained_window, options=options)
    block = block.double()
    with torch.no_grad():
        for name, p in block.named_parameters():
            p.copy_(torch.randn_like(p) * (0.5 if "norm" in name or "bias" in name else 0.2) + ("norm" in name))
        block.attn.logit_scale.copy_(torch.tensor([math.log(200.0), math.log(5.0), 0.3]).view(3, 1, 1))  # head 0: τ=100
    return block


@pytest.mark.parametrize(
    ("shift", "mask_padding", "pretrained_window"), [(True, True, None), (True, False, None), (False, True, (3, 2))]
)
def test_v2_block_equals_naive_loop_at_odd_size_forward_and_backward(shift, mask_padding, pretrained_window):
    block = _random_v2_block((4, 3), shift, mask_padding, pretrained_window)
    x = torch.randn(2, 5, 7, 12, dtype=torch.float64)  # pads to 8 x 9: partly padded windows, shifted by (2, 1)
    grads = []
    for fn in (block, lambda t: naive_v2_block(block, t, mask_padding)):
        block.zero_grad(set_to_none=True)
        xg = x.clone().requires_grad_(True)
        out = fn(xg)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        grads.append((out, xg.grad, {n: p.grad for n, p in block.named_parameters()}))
    (out, gx, gp), (ref, ref_gx, ref_gp) = grads
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gx, ref_gx, rtol=1e-9, atol=1e-10)
    assert gp.keys() == ref_gp.keys()
    for name in gp:
        torch.testing.assert_close(gp[name], ref_gp[name], rtol=1e-9, atol=1e-10, msg=lambda m, n=name: f"{n}: {m}")
    assert gp["attn.logit_scale"][0].item() == 0.0 and gp["attn.logit_scale"][1].item() != 0.0  # the clamp at 100


@pytest.mark.parametrize("norm", [torch.nn.LayerNorm, RmsNorm])  # RmsNorm: no bias (its init failed on one)
def test_v2_block_starts_as_the_identity(norm):
    """Both post-norms start at zero (weight and bias), as the reference initialises them."""
    block = SwinV2Block(8, 2, (4, 4), shift=True, options=BlockOptions(norm_layer=norm))
    x = torch.randn(1, 6, 9, 8)
    torch.testing.assert_close(block(x), x, rtol=0, atol=0)


def test_v2_model_builds_only_v2_attention(monkeypatch):
    """A V2 block builds its WindowAttentionV2 and nothing else: no V1 attention (a table, random draws) built and
    thrown away."""
    built = []
    v1_init = WindowAttention.__init__

    def counting_init(self, *args, **kwargs) -> None:
        built.append(type(self))
        v1_init(self, *args, **kwargs)

    monkeypatch.setattr(WindowAttention, "__init__", counting_init)
    model = SwinTransformer(img_size=32, window_size=4, embed_dim=8, depths=(2, 1), num_heads=(1, 2), block="v2")
    attentions = [block.attn for stage in model.layers for block in stage.blocks]
    assert [type(attn) for attn in attentions] == [WindowAttentionV2] * 3
    assert built == []


def test_v2_patch_merging_reduces_then_normalises():
    torch.manual_seed(0)
    merge = PatchMergingV2(6).eval()
    with torch.no_grad():
        merge.norm.weight.normal_()
    x = torch.randn(2, 5, 7, 6)  # odd sizes are zero-padded to 6 x 8
    xp = torch.nn.functional.pad(x, (0, 0, 0, 1, 0, 1))
    cat = torch.cat([xp[:, 0::2, 0::2], xp[:, 1::2, 0::2], xp[:, 0::2, 1::2], xp[:, 1::2, 1::2]], dim=-1)
    assert merge.norm.normalized_shape == (12,)
    torch.testing.assert_close(merge(x), merge.norm(merge.reduction(cat)), rtol=0, atol=0)


def test_stage_windows():
    assert stage_windows("v1", (7, 7), (8, 8), 4) == [(7, 7)] * 4  # V1: padding covers small maps
    assert stage_windows("v2", (16, 16), (64, 64), 4) == [(16, 16), (16, 16), (16, 16), (8, 8)]
    assert stage_windows("v2", (12, 12), (48, 48), 4) == [(12, 12), (12, 12), (12, 12), (6, 6)]
    assert stage_windows("v2", (8, 4), (20, 13), 4) == [(8, 4), (8, 4), (5, 4), (3, 2)]  # ceil(13 / 8) = 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(block="v3"), "block must be one of v1, v2"),
        (dict(pretrained_window_sizes=(4, 4, 4, 4)), "an option of V2 blocks"),
        (dict(block="v2", rel_pos="cpb"), "rel_pos is an option of V1 blocks"),
        (dict(block="v2", rel_pos="table"), "rel_pos is an option of V1 blocks"),  # was ignored: the V2 CPB served
        (dict(block="v2", pretrained_window_sizes=(4, 4)), "one entry per stage"),
        (dict(block="v2", pretrained_window_sizes=(4, -1, 0, 0)), ">= 0"),
    ],
)
def test_bad_v2_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SwinTransformer(device="meta", **kwargs)


def test_pretrained_window_sizes_reach_the_position_bias():
    model = SwinTransformer(img_size=64, window_size=4, block="v2", pretrained_window_sizes=(3, 0, (2, 3), 0))
    windows = [stage.blocks[0].attn.rel_pos.pretrained_window for stage in model.layers]
    assert windows == [(3, 3), None, (2, 3), None]
    assert [stage.blocks[0].window for stage in model.layers] == [(4, 4), (4, 4), (4, 4), (2, 2)]
