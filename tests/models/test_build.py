"""Building: every variant under a default-device context; bad construction arguments fail at build time."""

import math

import pytest
import timm
import torch
from pico import PICO
from test_timm_contract import PAPER_ARCHITECTURES, V2_WITH_TIMMS

import swinlite  # noqa: F401

VARIANTS = timm.list_models("swinlite_*")
# Built inside the meta device context at full depth, their structure checked too, in test_timm_contract.py: the
# paper's Swin-V1 variants (test_paper_architectures) and every Swin-V2 one but pico (test_v2_architectures_are_timms)
BUILT_IN_THE_CONTRACT_TESTS = {*PAPER_ARCHITECTURES, *V2_WITH_TIMMS}


@pytest.mark.parametrize("name", [v for v in VARIANTS if v not in BUILT_IN_THE_CONTRACT_TESTS])
def test_builds_on_the_meta_device_context(name):
    """As timm's test_models.py builds models: inside ``with torch.device("meta")``."""
    with torch.device("meta"):
        model = timm.create_model(name)
    assert all(p.is_meta for p in model.parameters())
    # load_model builds a file's model so and fills these buffers by the method (swinlite.weights.create_to_load)
    with_buffers = [m for m in model.modules() if m._non_persistent_buffers_set]
    assert with_buffers and all(hasattr(m, "init_non_persistent_buffers") for m in with_buffers)


@pytest.mark.parametrize("name", ["swinlite_pico_patch2_window4_32", "swinlite_v2_pico_patch2_window4_32"])
def test_a_meta_model_filled_as_timm_fills_one_computes_what_the_model_does(name):
    """``to_empty`` + ``load_state_dict`` leave the non-persistent buffers (relative position indices) empty, as
    in timm's Swin; each module's ``init_non_persistent_buffers`` makes them again (docs/models.md)."""
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    with torch.device("meta"):
        filled = timm.create_model(name)
    filled.to_empty(device="cpu").load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 27, 41)
    with pytest.raises(RuntimeError, match="buffers were never filled: after to_empty"):  # they hold what memory held
        filled.eval()(x)
    for module in filled.modules():
        if hasattr(module, "init_non_persistent_buffers"):
            module.init_non_persistent_buffers()
    with torch.no_grad():
        torch.testing.assert_close(filled.eval()(x), model(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["swinlite_pico_patch2_window4_32", "swinlite_v2_pico_patch2_window4_32"])
def test_init_weights_after_to_empty_initialises_as_the_constructor(name):
    """timm's meta-device route, ``to_empty()`` then ``init_weights()`` (an AttributeError: swinlite had none): every
    tensor filled whatever memory held (NaN here), as a built model's ``init_weights()`` fills it from the same seed;
    the constructor's constants (V2's log τ = log 10 and post-norms at zero, norms at one, zero biases, the buffers),
    its random weights of the constructor's spread; a finite forward. Called with timm's positional arguments: V1's
    mode ``init_weights("")``, which swinlite took as ``needs_reset`` and, falsy, reset the linears alone; V2's
    ``init_weights(True)``, its ``needs_reset``."""
    torch.manual_seed(0)
    options = dict(out_norm=True)
    built = timm.create_model(name, **options).eval()
    constructed = {**dict(built.named_parameters()), **{k: b.clone() for k, b in built.named_buffers()}}
    with torch.device("meta"):
        model = timm.create_model(name, **options).eval()
    model.to_empty(device="cpu")
    with torch.no_grad():
        for t in (*model.parameters(), *model.buffers()):
            t.fill_(float("nan") if t.is_floating_point() else -1)
    torch.manual_seed(1)
    model.init_weights(True if "v2" in name else "")  # timm's Swin-V2 init_weights(needs_reset), Swin's (mode)
    buffers = dict(model.named_buffers())
    for key, value in (*model.named_parameters(), *buffers.items()):
        want = constructed[key]
        if key in buffers or bool((want == want.flatten()[0]).all()):  # made, or constant
            torch.testing.assert_close(value, want, rtol=0, atol=0, msg=key)
        else:  # drawn
            assert 0.67 < value.std() / want.std() < 1.5, key
    if "v2" in name:
        block = model.layers[0].blocks[0]
        assert torch.equal(block.attn.logit_scale, torch.full_like(block.attn.logit_scale, math.log(10.0)))
        assert not block.norm1.weight.any() and not block.norm2.bias.any()
    torch.manual_seed(1)
    built.init_weights()
    torch.testing.assert_close(dict(model.state_dict()), dict(built.state_dict()), rtol=0, atol=0)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        out = model(x)
        torch.testing.assert_close(out, built(x), rtol=0, atol=0)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("mask_padding", [True, False])
def test_a_table_starts_at_zero_only_at_the_offsets_masked_padding_leaves_unused(mask_padding):
    """docs/models.md: pico's last stage holds its 2x2 map in a 4x4 window; with ``mask_padding`` the table's offsets
    outside the map's 3x3 centre meet only masked padding and start at zero (40 of 49, in each of 8 heads); without
    it padded tokens attend, every offset is used and drawn, none zero (they were zeroed either way). The other
    stages' maps fill their windows."""
    torch.manual_seed(0)
    model = timm.create_model(PICO, mask_padding=mask_padding)
    zeros = [int((block.attn.rel_pos.table == 0).sum()) for stage in model.layers for block in stage.blocks]
    assert zeros == [0, 0, 0, 0, 40 * 8 if mask_padding else 0]


def test_init_weights_refuses_a_mode_it_does_not_implement():
    """timm's Swin modes other than its default ``''`` were accepted and ignored (timm asserts on an unknown one)."""
    model = timm.create_model("swinlite_pico_patch2_window4_32", fast=False)
    for mode in ("jax", "moco", "bogus", None):
        with pytest.raises(ValueError, match=f"mode must be '' .*got {mode!r}; timm's other modes 'jax'"):
            model.init_weights(mode)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("name", ["swinlite_pico_patch2_window4_32", "swinlite_v2_pico_patch2_window4_32"])
def test_a_meta_model_loaded_with_assign_is_refused_until_its_buffers_are_made(name, fast):
    """``load_state_dict(..., assign=True)`` (PyTorch's low-memory recipe) leaves the non-persistent buffers on the
    meta device: V1's gather of a CPU table by a meta index returned what memory held (NaN, or 0.1 off), and
    ``init_non_persistent_buffers()`` copied into the meta buffers, which writes nothing."""
    torch.manual_seed(0)
    model = timm.create_model(name, fast=fast).eval()
    with torch.device("meta"):
        loaded = timm.create_model(name, fast=fast)
    loaded.load_state_dict(model.state_dict(), assign=True)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        with pytest.raises(RuntimeError, match=r"on the meta device, its weights on cpu: .* init_non_persistent_buf"):
            loaded.eval()(x)
        for module in loaded.modules():
            if hasattr(module, "init_non_persistent_buffers"):
                module.init_non_persistent_buffers()
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", VARIANTS)
def test_builds_on_the_cpu_device_context(name):
    with torch.device("cpu"):
        model = timm.create_model(name, embed_dim=48, depths=(1, 1, 1, 1))  # every variant's heads divide 48
    assert all(p.device.type == "cpu" for p in model.parameters())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(drop_path_rate=1.0), r"drop_path_rate must be in \[0, 1\), got 1.0"),
        (dict(drop_path_rate=-0.1), r"drop_path_rate must be in \[0, 1\)"),
        (dict(attn_drop_rate=1.5), r"attn_drop_rate must be in \[0, 1\)"),
        (dict(drop_rate=-1.0), r"drop_rate must be in \[0, 1\)"),
        (dict(num_heads=(1, 2, 4, 5)), "stage 3: 256 channels cannot be split into num_heads=5 heads"),
        (dict(depths=(1, 0, 2, 1)), "depths must be at least 1 block per stage"),
        (dict(depths=(1, 1, 2)), "must have the same, non-zero length"),
        (dict(mlp_ratio=0.0), "mlp_ratio must be positive"),
        (dict(window_size=0), "window_size must be positive"),
        (dict(patch_size=0), "patch_size must be positive"),
        (dict(num_classes=-1), "num_classes must be an int >= 0"),
        (dict(embed_dim=0), "embed_dim must be positive"),
        # under one patch: V1 built a 0x0 grid (set_input_size then divided by zero), V2 named its window (0, 0)
        (dict(img_size=1), r"img_size must be an int or \(H, W\), each at least the patch \(2, 2\), got 1"),
        (dict(img_size=(32, 1), block="v2"), r"each at least the patch \(2, 2\), got \(32, 1\)"),
        (dict(window_size=(4,)), r"window_size must be an int or \(h, w\), got \(4,\)"),  # an IndexError
        # a bare int: a TypeError (len of an int); timm's argument is one entry per stage too
        (dict(pretrained_window_sizes=12, block="v2"), "pretrained_window_sizes needs one entry per stage"),
        (dict(pretrained_window_sizes=((4, 4, 4), 0, 0, 0), block="v2"), "each entry is an int or \\(Wh, Ww\\)"),
        (dict(act_layer="nope"), "act_layer must be a class or an activation name timm knows .* got 'nope'"),
        # timm's Swin types it str | type and calls it: a TypeError inside PatchEmbed
        (dict(norm_layer="layernorm"), "norm_layer must be a norm class .* not a name: got 'layernorm'"),
        (dict(always_partition=True), "always_partition=True is not available"),
        # a bool built a model of 1-channel stages (embed_dim=True) or failed in torch.empty (num_classes=True); a
        # float was truncated
        (dict(embed_dim=True), "embed_dim must be an int .*, got True"),
        (dict(embed_dim=32.5), "embed_dim must be an int .*, got 32.5"),
        (dict(num_classes=True), "num_classes must be an int .*, got True"),
        (dict(depths=(True, 1, 1, 1)), r"depths must be ints .*, got \(True, 1, 1, 1\)"),
        (dict(num_heads=(1, 2, 4, 8.0)), r"num_heads must be ints .*, got \(1, 2, 4, 8.0\)"),
        (dict(patch_size=True), r"patch_size must be an int or \(h, w\), got \(True, True\)"),
    ],
)
def test_bad_construction_arguments_fail_at_build(kwargs, message):
    with pytest.raises(ValueError, match=message):
        timm.create_model("swinlite_pico_patch2_window4_32", **kwargs)


@pytest.mark.parametrize("name", ["swinlite_pico_patch2_window4_32", "swinlite_v2_pico_patch2_window4_32"])
@pytest.mark.parametrize(("act_name", "act_class"), [("gelu", torch.nn.GELU), ("relu", torch.nn.ReLU)])
def test_timms_act_layer_name_and_always_partition_are_taken(name, act_name, act_class):
    """timm's Swin-V2 takes ``act_layer`` by name (its default is "gelu"), and both Swins ``always_partition=False``:
    the name was called as a class (TypeError "'str' object is not callable"), always_partition was unknown. The
    named activation computes what its class does; timm's "gelu" keeps the fast path's fused exact GELU."""
    torch.manual_seed(0)
    named = timm.create_model(name, act_layer=act_name, always_partition=False).eval()
    by_class = timm.create_model(name, act_layer=act_class).eval()
    with torch.no_grad():
        for p in named.parameters():  # V2's post-norms start at zero: its blocks would add nothing to the logits
            p.add_(torch.randn_like(p), alpha=0.02)
    by_class.load_state_dict(named.state_dict())
    assert named.layers[0].blocks[0].mlp.layers_fuse() == (act_name == "gelu")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(named(x), by_class(x), rtol=0, atol=0)
