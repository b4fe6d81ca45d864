"""timm's model contract, as timm's own tests/test_models.py checks it, for every registered swinlite variant."""

import copy
import warnings

import pytest
import timm
import torch
from pico import PICO
from timm.layers import _fx, to_2tuple
from timm.models import group_parameters
from timm.models.swin_transformer_v2 import SwinTransformerV2
from timm.optim import param_groups_layer_decay

import swinlite
from swinlite.models.pretrained import lite_name
from swinlite.models.swin import SwinV2Block, effective_shift

VARIANTS = timm.list_models("swinlite_*")
# Every variant goes through the tests on the meta device; one of each code path also runs forward and backward
# (patch 2 and 4, windows 4, 7 and 12, the continuous bias, V2's clipped window). The other variants run that code
# with other widths and depths: the Swin-V2 ones are checked against timm's by metadata below (their pretrained
# windows against timm's logits in test_pretrained_v2.py), the bigger V1 ones against timm's logits at their widths
# in test_equivalence.py (test_bigger_variants_match_timm_at_reduced_depth), nano as pico at another width.
PATHS = [
    "swinlite_pico_patch2_window4_32",
    "swinlite_tiny_patch4_window7_224",
    "swinlite_tiny_cpb_patch4_window7_224",
    "swinlite_base_patch4_window12_384",
    "swinlite_v2_pico_patch2_window4_32",
    "swinlite_v2_tiny_window16_256",
]
# Batch 2 for the small variants, 1 for the big ones (their weights dominate the cost anyway).
LIGHT = {
    "swinlite_tiny_patch4_window7_224",
    "swinlite_nano_patch2_window4_64",
    "swinlite_pico_patch2_window4_32",
    "swinlite_v2_pico_patch2_window4_32",
}
# The big ones are built at reduced depth, with their widths, heads and windows: the contract runs the same code
# at any depth, and test_paper_architectures checks their full depths (on the meta device).
REDUCED_DEPTH = (2, 2, 2, 1)


# The Swin-V2 window-16 variant runs at reduced width too: its windows are what it adds.
REDUCED_WIDTH = {"swinlite_v2_tiny_window16_256": dict(embed_dim=32, num_heads=(1, 2, 4, 8))}


def _depth(name: str) -> dict[str, object]:
    """Keyword arguments that build ``name`` at the depth (and width) these tests use."""
    return {} if name in LIGHT else {"depths": REDUCED_DEPTH, **REDUCED_WIDTH.get(name, {})}


def _built_depth(name: str) -> dict[str, object]:
    """Keyword arguments of the models that run forward and backward: Swin-T too at reduced depth (the contract's
    wiring runs the same code at any depth; test_equivalence.py runs the full-depth Swin-T against timm's)."""
    return {"depths": REDUCED_DEPTH} if name == "swinlite_tiny_patch4_window7_224" else _depth(name)


def _input_size(model: torch.nn.Module) -> tuple[int, int]:
    """A small input: 16 patches per side, so the four stages see 16, 8, 4 and 2 tokens per side."""
    return (16 * model.patch_size[0], 16 * model.patch_size[1])


@pytest.fixture(scope="module", params=PATHS)
def built(request) -> tuple[str, torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = timm.create_model(request.param, **_built_depth(request.param)).eval()
    x = torch.randn(2 if request.param in LIGHT else 1, 3, *_input_size(model))
    return request.param, model, x


# the paper's Swin-V1 variants: name -> (embed_dim, depths, heads, window); tests/models/test_build.py leaves them here
PAPER_ARCHITECTURES = {
    "swinlite_tiny_patch4_window7_224": (96, (2, 2, 6, 2), (3, 6, 12, 24), 7),
    "swinlite_small_patch4_window7_224": (96, (2, 2, 18, 2), (3, 6, 12, 24), 7),
    "swinlite_base_patch4_window7_224": (128, (2, 2, 18, 2), (4, 8, 16, 32), 7),
    "swinlite_large_patch4_window7_224": (192, (2, 2, 18, 2), (6, 12, 24, 48), 7),
    "swinlite_base_patch4_window12_384": (128, (2, 2, 18, 2), (4, 8, 16, 32), 12),
    "swinlite_large_patch4_window12_384": (192, (2, 2, 18, 2), (6, 12, 24, 48), 12),
}

# the Swin-V2 variants with a timm counterpart (all but pico), whose structure test_v2_architectures_are_timms compares
V2_WITH_TIMMS = [v for v in VARIANTS if v.startswith("swinlite_v2_") and "pico" not in v]


def test_registered_variants():
    expected = set(PAPER_ARCHITECTURES) | {
        "swinlite_nano_patch2_window4_64",
        "swinlite_pico_patch2_window4_32",
        "swinlite_v2_nano_patch2_window4_64",
        "swinlite_v2_pico_patch2_window4_32",
    }
    assert expected <= set(VARIANTS)
    assert {lite_name(n.split(".")[0]) for n in timm.list_pretrained("swinv2_*", exclude_filters="swinv2_cr_*")} <= set(
        VARIANTS
    )


@pytest.mark.parametrize("name,embed_dim,depths,heads,window", [(n, *a) for n, a in PAPER_ARCHITECTURES.items()])
def test_paper_architectures(name, embed_dim, depths, heads, window):
    """Built as timm's test_models.py builds models, inside ``with torch.device("meta")`` (tests/models/test_build.py
    builds the other variants so)."""
    with torch.device("meta"):
        model = timm.create_model(name)
    assert all(p.is_meta for p in model.parameters())
    assert model.window_size == (window, window)
    assert [len(stage.blocks) for stage in model.layers] == list(depths)
    assert [stage.blocks[0].attn.num_heads for stage in model.layers] == list(heads)
    assert [info["num_chs"] for info in model.feature_info] == [embed_dim * 2**i for i in range(4)]


def _no_init_on_meta(self: SwinTransformerV2, needs_reset: bool = True) -> None:
    """timm's Swin-V2 init, skipped where its models are built on the meta device (it writes no values there, as
    timm's own TODO notes, but costs ~0.5 s a model: trunc_normal_ through torch's reference ops); the structure these
    tests compare is built before it."""


@pytest.mark.parametrize("name", V2_WITH_TIMMS)
def test_v2_architectures_are_timms(name, monkeypatch):
    """Every Swin-V2 variant with a timm counterpart has its structure: widths, depths, heads, per-stage windows
    and pretrained windows, parameter count. Built inside ``with torch.device("meta")``, as timm's test_models.py
    builds models (tests/models/test_build.py builds the other variants so)."""
    with torch.device("meta"):
        ours = timm.create_model(name)
    assert all(p.is_meta for p in ours.parameters())
    assert all(isinstance(b, SwinV2Block) for stage in ours.layers for b in stage.blocks)
    if "nano" in name:
        return
    monkeypatch.setattr(SwinTransformerV2, "init_weights", _no_init_on_meta)
    theirs = timm.create_model(name.replace("swinlite_v2_", "swinv2_"), device="meta")
    for a, b in zip(ours.layers, theirs.layers, strict=True):
        assert len(a.blocks) == len(b.blocks) and a.blocks[0].attn.num_heads == b.blocks[0].attn.num_heads
        assert a.blocks[0].window == tuple(b.blocks[0].window_size)
        pretrained = b.blocks[0].attn.pretrained_window_size
        assert a.blocks[0].attn.rel_pos.pretrained_window == (None if pretrained == (0, 0) else pretrained)
    assert ours.feature_info == theirs.feature_info and ours.embed_dim == theirs.embed_dim
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())


def test_swin_t_parameter_count():
    model = timm.create_model("swinlite_tiny_patch4_window7_224", device="meta")
    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 2) == 28.29


@pytest.mark.parametrize("name", VARIANTS)
def test_attributes_and_pretrained_cfg(name):
    model = timm.create_model(name, device="meta", **_depth(name))
    assert all(p.device.type == "meta" for p in model.parameters())
    cfg = model.pretrained_cfg
    assert model.num_classes == cfg["num_classes"]
    assert model.in_chans == 3 and model.output_fmt == "NHWC"
    assert model.num_features == model.head_hidden_size == model.feature_info[-1]["num_chs"]
    assert len(model.feature_info) == len(model.layers)
    assert model.embed_dim == model.feature_info[0]["num_chs"]
    for i, info in enumerate(model.feature_info):
        assert info["module"] == f"layers.{i}" and info["reduction"] == max(model.patch_size) * 2**i
        model.get_submodule(info["module"])
    model.get_submodule(cfg["first_conv"])
    assert model.get_classifier() is model.get_submodule(cfg["classifier"])
    assert cfg["mean"] and cfg["std"]
    # forward_features at the cfg input size yields pool_size (shape-only, on the meta device)
    feats = model.forward_features(torch.empty(1, *cfg["input_size"], device="meta"))
    assert tuple(feats.shape[1:3]) == tuple(cfg["pool_size"])


def test_forward_backward_every_parameter_gets_a_gradient(built):
    _, model, x = built
    model = copy.deepcopy(model).train()
    out = model(x)
    assert out.shape == (x.shape[0], model.num_classes) and torch.isfinite(out).all()
    out.mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"no gradient for {missing[:5]}"
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_forward_features_head_and_intermediates(built):
    _, model, x = built
    with torch.no_grad():
        feats = model.forward_features(x)
        r = model.feature_info[-1]["reduction"]
        assert feats.shape == (x.shape[0], x.shape[2] // r, x.shape[3] // r, model.num_features)
        torch.testing.assert_close(model.forward_head(feats), model(x))
        assert model.forward_head(feats, pre_logits=True).shape == (x.shape[0], model.num_features)
        final, inter = model.forward_intermediates(x)
        torch.testing.assert_close(final, feats)
        assert len(inter) == len(model.layers)
        for t, info in zip(inter, model.feature_info, strict=True):
            r = info["reduction"]
            assert t.shape == (x.shape[0], info["num_chs"], x.shape[2] // r, x.shape[3] // r)
        last_two = model.forward_intermediates(x, indices=2, output_fmt="NHWC", intermediates_only=True)
        torch.testing.assert_close(last_two[-1], inter[-1].permute(0, 2, 3, 1))
        normed = model.forward_intermediates(x, indices=[3], norm=True, intermediates_only=True)
        torch.testing.assert_close(normed[0], feats.permute(0, 3, 1, 2))
        early, taken = model.forward_intermediates(x, indices=[1], stop_early=True)
        torch.testing.assert_close(taken[0], inter[1])
        assert early.shape[-1] == model.feature_info[1]["num_chs"]


def test_reset_classifier(built):
    name, model, x = built
    model = copy.deepcopy(model)
    model.reset_classifier(7)
    assert model(x).shape == (x.shape[0], 7) and model.num_classes == 7
    model.reset_classifier(0)
    assert model(x).shape == (x.shape[0], model.num_features)
    model.reset_classifier(0, "")
    unpooled = model(x)
    assert unpooled.ndim == 4 and unpooled.shape[-1] == model.num_features
    model.to(torch.bfloat16).reset_classifier(5, "avg")
    assert model.get_classifier().weight.dtype == torch.bfloat16
    # refused before anything changes (the pooling stayed "tokn" and every later call failed), -1 as at build time
    for bad, match in (((5, "tokn"), "tokn"), ((-1,), "num_classes must be an int >= 0")):
        with pytest.raises((ValueError, AssertionError), match=match):  # timm's head asserts on the pooling
            model.reset_classifier(*bad)
        assert model.global_pool == "avg" and model.num_classes == 5 and model.get_classifier().out_features == 5
    with pytest.raises(ValueError, match="num_classes must be an int >= 0"):
        timm.create_model(name, num_classes=-1, device="meta")
    model.reset_classifier(7)
    assert model.get_classifier().out_features == 7


POOLS = ["avg", "max", "avgmax", "catavgmax", ""]


def test_head_hidden_size_is_the_pooled_width(built):
    """It stayed the stage width (256 on pico) for "catavgmax", whose pooled features are twice as wide: a head sized
    from it did not fit the pre-logits. Every pooling, reset in turn on one copy of the model."""
    _, model, x = built
    model = copy.deepcopy(model)
    with torch.no_grad():
        feats = model.forward_features(x)
    for pool in POOLS:
        model.reset_classifier(0, pool)
        pre_logits = model.forward_head(feats, pre_logits=True)
        assert model.head_hidden_size == pre_logits.shape[-1], pool


@pytest.mark.parametrize("pool", POOLS)
def test_head_hidden_size_is_timms(pool):
    """As built with the pooling, and after reset_classifier to it."""
    theirs = timm.create_model("swin_tiny_patch4_window7_224", global_pool=pool, device="meta")
    ours = timm.create_model("swinlite_tiny_patch4_window7_224", global_pool=pool, device="meta")
    assert ours.head_hidden_size == theirs.head_hidden_size
    theirs.reset_classifier(0, pool)
    ours.reset_classifier(0, pool)
    assert ours.head_hidden_size == theirs.head_hidden_size


@pytest.mark.parametrize("name", VARIANTS)
def test_device_dtype_kwargs_and_reset_classifier_keeps_training_mode_device_and_dtype(name):
    """create_model's device and dtype reach every parameter (the device alone: test_attributes_and_pretrained_cfg).
    As timm's test_models.py checks: the new head takes the model's device, dtype and mode (an eval model stays all
    eval), in eval mode and then in training mode on the same model."""
    model = timm.create_model(name, dtype=torch.bfloat16, device="meta", **_depth(name))
    assert all(p.device.type == "meta" and p.dtype == torch.bfloat16 for p in model.parameters())
    for train in (False, True):
        model.train(train)
        model.reset_classifier(0)
        model.reset_classifier(5)
        assert [n for n, m in model.named_modules() if m.training != train] == [], train
        assert all(p.device.type == "meta" and p.dtype == torch.bfloat16 for p in model.get_classifier().parameters())


def test_prune_intermediate_layers(built):
    name, model, x = built
    model = copy.deepcopy(model)
    with torch.no_grad():
        full = model.forward_intermediates(x, intermediates_only=True)
        kept = model.prune_intermediate_layers([0, 1])
        assert kept == [0, 1] and len(model.layers) == 2
        pruned = model.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
        for a, b in zip(pruned, full[:2], strict=True):
            torch.testing.assert_close(a, b)
        assert model.num_features == model.feature_info[1]["num_chs"]
        # the head is reset to (0, ""): the model now returns the last kept stage's unpooled map
        torch.testing.assert_close(model(x), full[1].permute(0, 2, 3, 1))


def test_features_only(built):
    name, model, x = built
    if name not in LIGHT:  # structure and shapes only, without building a second copy of the weights
        feats = timm.create_model(name, features_only=True, out_indices=(1, 3), device="meta", **_depth(name))
        outs = feats(torch.empty(x.shape, device="meta"))
        assert [o.shape[1] for o in outs] == feats.feature_info.channels()
        assert feats.feature_info.channels() == [model.feature_info[i]["num_chs"] for i in (1, 3)]
        return
    feats = timm.create_model(name, features_only=True, out_indices=(1, 3), **_built_depth(name))
    missing, unexpected = feats.model.load_state_dict(model.state_dict(), strict=False)
    assert not missing and all(k.startswith(("head.", "norm.")) for k in unexpected)
    assert feats.feature_info.channels() == [model.feature_info[i]["num_chs"] for i in (1, 3)]
    assert feats.feature_info.reduction() == [model.feature_info[i]["reduction"] for i in (1, 3)]
    with torch.no_grad():
        outs = feats.eval()(x)
        ref = model.forward_intermediates(x, indices=[1, 3], intermediates_only=True)
    assert [o.shape[1] for o in outs] == feats.feature_info.channels()
    for o, r in zip(outs, ref, strict=True):
        torch.testing.assert_close(o, r)


def test_grad_checkpointing_same_outputs_and_grads(built):
    name, model, x = built
    model = copy.deepcopy(model)
    ref = model(x)
    ref.sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    model.set_grad_checkpointing(True)
    out = model(x)
    out.sum().backward()
    torch.testing.assert_close(out, ref)
    for p, g in zip(model.parameters(), ref_grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)


def test_torchscript(built):
    name, model, x = built
    scripted = torch.jit.script(copy.deepcopy(model))
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), model(x))


# timm's Swin built as the pico models (64x64 images: every stage's map a whole number of 4x4 windows, no window
# clipped), the reference for the features of a scripted features_only model.
PICO_IN_TIMM = {
    "swinlite_pico_patch2_window4_32": "swin_tiny_patch4_window7_224",
    "swinlite_v2_pico_patch2_window4_32": "swinv2_tiny_window8_256",
}
PICO_ARGS = dict(embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8), patch_size=2, window_size=4, img_size=64)


@pytest.mark.parametrize("name", PICO_IN_TIMM)
@pytest.mark.parametrize(
    ("size", "options"),
    [
        pytest.param((64, 64), {}, id="64x64"),
        pytest.param((36, 44), dict(out_indices=(1, 3), output_fmt="NHWC", out_norm=True), id="36x44-subset-nhwc-norm"),
    ],
)
def test_torchscript_features_only(name, size, options):
    """A scripted features_only model gives the eager one's maps and, at window multiples (timm pads after the
    shift, swinlite before), timm's Swin's."""
    torch.manual_seed(0)
    ref = timm.create_model(PICO_IN_TIMM[name], num_classes=10, **PICO_ARGS).eval()
    plain = timm.create_model(name, img_size=64)
    plain.load_state_dict(swinlite.convert_state_dict(ref.state_dict(), plain))
    model = timm.create_model(name, features_only=True, img_size=64, **options).eval()
    model.model.load_state_dict(plain.state_dict(), strict=False)  # the wrapper dropped the head and final norm
    scripted = torch.jit.script(model)
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        maps = scripted(x)
        eager = model(x)
        reference = ref.forward_intermediates(x, intermediates_only=True) if not options else eager  # NCHW, 4 levels
    assert len(maps) == len(model.feature_info.channels())
    for m, e, r in zip(maps, eager, reference, strict=True):
        torch.testing.assert_close(m, e)
        torch.testing.assert_close(m, r, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", PICO_IN_TIMM)
def test_torch_jit_trace_runs_the_reference_path(name):
    """The fast path's caches and autograd Functions broke torch.jit.trace (graphs differed across invocations;
    'unordered_map::at' with grad; a trace failed at another size): traced, the model takes the reference path.
    The trace fixes each stage's padding and shift: it serves a size only where they are the traced size's
    (docs/models.md, which said window multiples at every stage)."""
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    with torch.no_grad():
        for p in model.parameters():  # V2's post-norms start at zero: its blocks would add nothing to the logits
            p.add_(torch.randn_like(p), alpha=0.02)
        traced = torch.jit.trace(model, torch.randn(1, 3, 64, 64))  # checks the trace against a second run
        x = torch.randn(2, 3, 128, 192)  # another batch and size: window multiples that shift at every stage
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=1e-5)
        x = torch.randn(2, 3, 32, 32)  # window multiples too, but the 4x4 map of layers[2] fits its window: no shift
        assert (traced(x) - model(x)).abs().max() > 1e-3
    features = timm.create_model(name, features_only=True)  # training mode, with grad
    x = torch.randn(1, 3, 64, 64)
    traced = torch.jit.trace(features, x)
    for t, e in zip(traced(x), features(x), strict=True):
        torch.testing.assert_close(t, e, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", PICO_IN_TIMM)
def test_torch_jit_trace_warns_which_sizes_the_trace_serves(name):
    """A trace fixes each stage's padding and shifts (above) and torch removes checks from it, so a size it does not
    serve gave wrong logits silently: one warning per recorded forward names this size's stage maps, their padding and
    shifts, and the docs paragraph. Eager runs, torch.jit.script and torch.export record no such warning."""
    model = timm.create_model(name).eval()
    x = torch.randn(2, 3, 40, 30)
    maps = "20x15 padded to 20x16 unshifted, 10x8 padded to 12x8 unshifted, 5x4 padded to 8x4 shifted along H only"
    with pytest.warns(torch.jit.TracerWarning, match="torch.jit.trace records") as caught:
        torch.jit.trace(model, x, check_trace=False)
    [warning] = [w for w in caught if "torch.jit.trace records" in str(w.message)]
    assert f"at 40x30 with each stage's padding and shifts as constants: stage maps {maps}" in str(warning.message)
    assert 'docs/models.md, "Model options and timm\'s contract", torch.jit.trace' in str(warning.message)
    assert warning.filename.endswith("swin.py")  # swinlite's, not torch's: torch filters its own modules' warnings
    features = timm.create_model(name, features_only=True).eval()
    with pytest.warns(torch.jit.TracerWarning, match="torch.jit.trace records a swinlite model at 40x30"):
        torch.jit.trace(features, x, check_trace=False)  # forward_intermediates, the same one step
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            model(x)
            torch.jit.script(model)(x)
            if "_v2_" not in name:  # the warning is the model's (SwinTransformer), whatever its blocks: once suffices
                torch.export.export(model, (x,))
    assert not [w for w in caught if "torch.jit.trace records" in str(w.message)]


def test_fx_feature_extraction(built):
    name, model, x = built
    _, eval_nodes = _fx.get_graph_node_names(model)
    extractor = _fx.create_feature_extractor(model, return_nodes=[eval_nodes[-1]])
    with torch.no_grad():
        torch.testing.assert_close(list(extractor(x).values())[0], model(x))


def test_torchvision_fx_extraction_works_with_timms_leaves_and_names_them_without(built):
    """torchvision's tracer without timm's leaf lists traced into the input check, which then said the input was not
    a tensor of shape (B, 3, H, W). torchvision's functions switch the model to training mode before they trace and
    not back when the trace raises: the refusal says so (swinlite cannot undo it for a wrapper around the model); a
    guess at the mode to restore switched an eval model traced by NodePathTracer itself to training mode."""
    from torchvision.models.feature_extraction import NodePathTracer, create_feature_extractor, get_graph_node_names

    name, model, x = built
    refusal = r"timm\.layers\.get_notrace_modules\(\).*training mode before tracing.*call \.eval\(\) on it again"
    with pytest.raises(TypeError, match=refusal):
        create_feature_extractor(model, return_nodes={"layers.1": "stage1"})
    with pytest.raises(TypeError, match=refusal):
        get_graph_node_names(model.eval())
    model.eval()  # as the refusal says
    with pytest.raises(TypeError, match=refusal):  # the same tracer: swinlite cannot tell who called it
        NodePathTracer().trace(model)
    assert not any(m.training for m in model.modules())
    leaves = {
        "leaf_modules": timm.layers.get_notrace_modules(),
        "autowrap_functions": timm.layers.get_notrace_functions(),
    }
    extractor = create_feature_extractor(model, return_nodes={"head": "logits"}, tracer_kwargs=leaves)
    with torch.no_grad():
        torch.testing.assert_close(extractor(x)["logits"], model(x), rtol=0, atol=0)


def test_bfloat16_after_float32_forward(built):
    name, model, x = built
    model = copy.deepcopy(model)
    with torch.no_grad():
        ref = model(x)  # fills the float32 mask cache
        out = model.to(torch.bfloat16)(x.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, rtol=0.1, atol=0.1)


@pytest.mark.parametrize("name", VARIANTS)
def test_unknown_kwarg_raises_type_error(name):
    with pytest.raises(TypeError):
        timm.create_model(name, device="meta", not_an_option=1, **_depth(name))


@pytest.mark.parametrize(
    "options",
    [
        dict(dynamic_img_size=True),
        dict(strict_img_size=False),
        dict(dynamic_img_size=False),
        dict(strict_img_size=True),
    ],
)
def test_timm_input_size_switches(options):
    """timm's any-size switches build (the model takes any size anyway); asking for a fixed size is refused."""
    name = "swinlite_pico_patch2_window4_32"
    if options.get("dynamic_img_size", True) and not options.get("strict_img_size", False):
        with torch.no_grad():
            assert timm.create_model(name, **options).eval()(torch.randn(1, 3, 20, 36)).shape == (1, 10)
    else:
        with pytest.raises(ValueError, match="any input size"):
            timm.create_model(name, device="meta", **options)


def _late_stage_windows_and_shifts(model: torch.nn.Module, size: int, timm_model: bool) -> list[tuple[int, int]]:
    """(window, shift) of each block of ``layers[2]`` and ``layers[3]`` on a ``size`` input of a patch-4 model whose
    maps there are window multiples: timm's as built, swinlite's as it decides per call from the map."""
    found = []
    for i, stage in enumerate(model.layers[2:], start=2):
        side = size // 4 // 2**i
        for block in stage.blocks:
            if timm_model:
                found.append((block.attn.window_size[0], block.shift_size[0]))
            else:
                found.append((block.window[0], effective_shift((side, side), block.window, block.shift)[0]))
    return found


def test_window16_v2_at_512_shifts_as_docs_models_md_says(monkeypatch):
    """Built at 256 and run at 512, swinlite's window-16 V2 model keeps windows 16, 16, 16, 8 and shifts layers[2] by 8
    and layers[3] by 4, as no timm model does; built at 512, or after set_input_size(512), it has timm's windows and
    shifts (docs/models.md, model options)."""
    monkeypatch.setattr(SwinTransformerV2, "init_weights", _no_init_on_meta)
    name, options = "swinv2_tiny_window16_256", dict(depths=(2, 2, 2, 2), device="meta")
    ours = timm.create_model(lite_name(name), **options)
    assert _late_stage_windows_and_shifts(ours, 512, False) == [(16, 0), (16, 8), (8, 0), (8, 4)]
    dynamic = timm.create_model(name, dynamic_img_size=True, **options)  # timm's that runs at 512 unrebuilt
    assert _late_stage_windows_and_shifts(dynamic, 512, True) == [(16, 0)] * 2 + [(8, 0)] * 2
    built = [timm.create_model(n, img_size=512, **options) for n in (lite_name(name), name)]
    resized = [timm.create_model(n, **options) for n in (lite_name(name), name)]
    for model in resized:
        model.set_input_size(512)
    for (ours, theirs), expected in (
        (built, [(16, 0), (16, 8), (16, 0), (16, 0)]),
        (resized, [(32, 0)] * 2 + [(16, 0)] * 2),
    ):
        assert _late_stage_windows_and_shifts(ours, 512, False) == expected
        assert _late_stage_windows_and_shifts(theirs, 512, True) == expected


def test_no_weight_decay_and_group_matcher(built):
    _, model, _ = built
    names = dict(model.named_parameters())
    nwd = model.no_weight_decay()
    assert nwd and nwd <= set(names)
    assert {n for n in names if n.endswith(("rel_pos.table", "logit_scale")) or ".rel_pos.mlp." in n} <= nwd
    for coarse, min_groups in ((True, 1 + len(model.layers)), (False, 1 + sum(len(s.blocks) for s in model.layers))):
        groups = group_parameters(model, model.group_matcher(coarse))
        grouped = [n for names_in_group in groups.values() for n in names_in_group]
        assert sorted(grouped) == sorted(names)
        assert len(groups) >= min_groups


def test_out_norms_add_no_layer_to_layer_wise_lr_decay():
    """Each output norm out_norms.i joins stage i's last group: timm's layer decay gives every shared parameter the
    scale it has without them (each counted as a layer, they took the stem's from 0.254 to 0.167)."""
    options = dict(embed_dim=32, num_heads=(1, 2, 4, 8), device="meta")
    scales = []
    for out_norm in (False, True):
        model = timm.create_model("swinlite_tiny_patch4_window7_224", out_norm=out_norm, **options)
        groups = param_groups_layer_decay(model, weight_decay=0.05, layer_decay=0.9)
        by_param = {id(p): group["lr_scale"] for group in groups for p in group["params"]}
        scales.append({name: by_param[id(p)] for name, p in model.named_parameters()})
    without, with_norms = scales
    assert without == {k: v for k, v in with_norms.items() if not k.startswith("out_norms.")}
    assert with_norms["out_norms.3.weight"] == with_norms["layers.3.blocks.1.norm1.weight"] == 0.9
    assert with_norms["out_norms.0.bias"] == with_norms["layers.0.blocks.1.norm2.bias"]


TINY = "swinlite_tiny_patch4_window7_224"
_SET_SIZE_MODEL = dict(img_size=64, embed_dim=16, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8), window_size=4)
# timm's set_input_size calls, by id
_SET_SIZE_CALLS = {
    "img_size": dict(img_size=96),  # windows scale with the grid: 6, the last stage's 3x3 map shrinks it in timm
    "rectangular": dict(img_size=(64, 96)),  # (4, 6)
    "window_size": dict(img_size=128, window_size=8),  # an explicit window
    "window_per_stage": dict(img_size=128, window_size=[8, 8, 8, 4]),  # one per stage: 8, cut to the last 4x4 map
    "window_ratio": dict(window_ratio=4),  # the grid over the window
    "no-op": dict(img_size=64),  # the current size: nothing changes
    "patch_size": dict(patch_size=2),  # the projection resampled by timm; the 32x32 grid scales the windows to 8
    "rectangular-patch": dict(img_size=96, patch_size=(8, 4)),  # a 12x24 grid, (3, 6) windows
}
# a Swin-V2 fine-tuned at windows 4 (2 in the last stage) from position biases pre-trained at 3 (and 2)
_FINE_TUNED = dict(pretrained_window_sizes=(3, 3, 3, 2))


def _off_constant_init(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` (timm's Swin) with the parameters timm starts at or near a constant moved off it, seeded: V2's
    post-norms start at zero (a V2 block built fresh is the identity, whatever its windows, coordinates and τ), its
    continuous bias's MLP at std 0.02 (a bias of about 8 at every offset), log τ at log 10 (kept near it), every
    bias at zero."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "cpb_mlp" in name or name.endswith(("bias", "logit_scale")):
                p.add_(0.2 * torch.randn(p.shape, generator=generator))
    return model


@pytest.mark.parametrize(
    "v2,options,call",
    [
        pytest.param(v2, {}, call, id=f"{name}-v{1 + v2}")
        for v2 in (False, True)
        for name, call in _SET_SIZE_CALLS.items()
    ]
    + [pytest.param(True, _FINE_TUNED, _SET_SIZE_CALLS["window_size"], id="window_size-v2-pretrained")],
)
def test_set_input_size_computes_what_timms_swin_computes_after_the_same_call(v2, options, call):
    """timm's set_input_size on both models (same weights): the same windows, tables resized by timm's function and
    embedded where timm shrinks a window, V2's coordinates rebuilt (normalised by the pre-training windows of a V2
    fine-tuned from smaller ones), the patch projection resampled by timm's function; logits in eval and train mode,
    a gradient, the stage maps, fast path. timm's constant-initialised parameters randomised: V2's zero post-norms
    made every V2 case pass whatever the windows, coordinates or τ."""
    v1_names = (TINY, "swin_tiny_patch4_window7_224")
    names = ("swinlite_v2_tiny_window8_256", "swinv2_tiny_window8_256") if v2 else v1_names
    torch.manual_seed(0)
    reference = _off_constant_init(timm.create_model(names[1], drop_path_rate=0.0, **_SET_SIZE_MODEL, **options))
    model = timm.create_model(names[0], drop_path_rate=0.0, **_SET_SIZE_MODEL, **options)
    model.load_state_dict(reference.state_dict())
    model.set_input_size(**call)
    reference.set_input_size(**call)
    size = to_2tuple(call.get("img_size", 64))
    assert model.patch_embed.img_size == reference.patch_embed.img_size == size
    assert model.patch_size == reference.patch_embed.patch_size and model.feature_info == reference.feature_info
    x = torch.randn(1, 3, *size)
    for train in (False, True):  # train: with the gradient (the fast path's training kernels)
        with torch.set_grad_enabled(train):
            out, expected = model.train(train)(x), reference.train(train)(x)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    expected.square().sum().backward()
    grads = model.patch_embed.proj.weight.grad, reference.patch_embed.proj.weight.grad  # through every block
    torch.testing.assert_close(*grads, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        maps = model.eval().forward_intermediates(x, intermediates_only=True)
        expected = reference.eval().forward_intermediates(x, intermediates_only=True)
    for ours, theirs in zip(maps, expected, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_embed_dim_and_feature_info_of_a_non_square_patch_are_timms(v2, monkeypatch):
    """``embed_dim`` was missing (an AttributeError; timm's Swin has it, the first stage's width); feature_info's
    reduction of a non-square patch took its height, [2, 4, ...] where timm's takes the longer side, [4, 8, ...]: as
    built and after set_input_size. On the meta device (shapes only)."""
    monkeypatch.setattr(SwinTransformerV2, "init_weights", _no_init_on_meta)
    names = (
        ("swinlite_v2_tiny_window8_256", "swinv2_tiny_window8_256") if v2 else (TINY, "swin_tiny_patch4_window7_224")
    )
    options = dict(_SET_SIZE_MODEL, patch_size=(2, 4), device="meta")
    model, reference = (timm.create_model(name, **options) for name in names)
    assert model.embed_dim == reference.embed_dim == 16
    assert [info["reduction"] for info in model.feature_info] == [4, 8, 16, 32]
    assert model.feature_info == reference.feature_info
    for m in (model, reference):
        m.set_input_size(img_size=(64, 128), patch_size=(4, 8))
    assert model.feature_info == reference.feature_info


def test_set_input_size_after_training_where_a_map_is_smaller_than_the_window_computes_timms():
    """pico trained from scratch at 32 px: the last stage's 2x2 map meets only the 3x3 centre of its 4x4 window's
    table (timm's table of that stage); the offsets around it were random draws that never get a gradient, which
    set_input_size(64) resized with the centre (logits 2e-4 off timm's). They are zero as built and as init_weights
    draws the weights again, so they stay zero in training and the call computes what timm's Swin computes."""
    torch.manual_seed(0)
    model = timm.create_model(PICO)
    ring = torch.ones(7, 7, dtype=torch.bool)  # the offsets of the 4x4 window outside the 2x2 map's 3x3
    ring[2:5, 2:5] = False
    for redrawn in (False, True):
        if redrawn:
            model.init_weights()
        for block in model.layers[3].blocks:
            offsets = block.attn.rel_pos.table.detach().view(7, 7, -1)  # (2Wh - 1, 2Ww - 1, heads)
            assert not offsets[ring].any() and offsets[~ring].all(), redrawn
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()(torch.randn(2, 3, 32, 32)).square().mean().backward()
    optimizer.step()
    args = dict(img_size=32, patch_size=2, embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8), window_size=4)
    reference = timm.create_model("swin_tiny_patch4_window7_224", num_classes=10, **args).eval()
    reference.load_state_dict(swinlite.to_timm_state_dict(model.state_dict(), model))
    with pytest.warns(UserWarning, match="resized 5 relative position bias tables"):  # windows 4 -> 8; 2x2 -> 4x4
        model.eval().set_input_size(img_size=64)
    reference.set_input_size(img_size=64)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block", ["v1", "v2"])
def test_set_input_size_at_the_current_size_changes_nothing(block):
    """A model of swinlite's own initialisation (V1: the last stage's 2x2 map in a 4x4 window): a call at the current
    size leaves every tensor as it was, so a larger input computes as before."""
    torch.manual_seed(0)
    model = timm.create_model(TINY, block=block, **_SET_SIZE_MODEL).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for call in (dict(img_size=64), dict(), dict(window_size=4, patch_size=4, always_partition=False)):
        model.set_input_size(**call)
        after = model.state_dict()
        assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before), call


def _learned_everywhere(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with weights of a model trained at larger inputs than its img_size: every bias table's offsets,
    also those that meet only padding at that size (the last stage's 2x2 map in a 4x4 window), learned."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0, 3.0 if name.endswith("rel_pos.table") else 0.2)
    return model


def test_set_input_size_keeps_a_table_whose_window_stays():
    """The last stage's whole 7x7 table, learned: set_input_size to the same window at a size where timm's window
    grows to it (2x2 -> 4x4) kept only timm's 3x3 centre, resized it back to 7x7 and changed the features at 64
    (by 0.16); built at 64 and given the state dict, the model keeps it. Now every tensor stays, silently."""
    model = _learned_everywhere(timm.create_model(PICO).eval())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        expected = model.forward_intermediates(x, intermediates_only=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.set_input_size(img_size=64, window_size=4)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    with torch.no_grad():
        for ours, theirs in zip(model.forward_intermediates(x, intermediates_only=True), expected, strict=True):
            assert torch.equal(ours, theirs)


def test_set_input_size_resizes_a_learned_table_whole_as_the_loader_does():
    """A new window (4 -> 8 at 64): the last stage's whole learned table is resized from itself, not from timm's
    3x3 centre, so the model holds what one built at the new size holds after converting the same state dict; the
    tables resized are named in a warning, as the loader names them (the last stage's, embedded exactly, is not)."""
    model = _learned_everywhere(timm.create_model(PICO).eval())
    built = timm.create_model(PICO, img_size=64, window_size=8)
    with pytest.warns(UserWarning, match="resized 4 relative position bias tables"):
        built.load_state_dict(swinlite.convert_state_dict(model.state_dict(), built))
    with pytest.warns(
        UserWarning, match=r"set_input_size resized 4 relative position bias tables .*: layers\.0\."
    ) as w:
        model.set_input_size(img_size=64, window_size=8)
    assert "layers.3." not in str(w[0].message)
    expected = built.state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize(
    "v2,call",
    [(False, dict(img_size=96)), (True, dict(img_size=96)), (False, dict(img_size=128, window_size=8))],
    ids=["v1", "v2", "v1-window"],
)
def test_set_input_size_after_pruning_computes_what_timms_pruned_swin_computes(v2, call):
    """Pruned of its last stage (prune_intermediate_layers, or features_only's model), the model kept a reference
    window for each stage it was built with: set_input_size raised (zip()'s ValueError, timm's AssertionError
    "Expected 4 stage window sizes"). Now it computes what timm's pruned Swin does after the same call."""
    names = (
        ("swinlite_v2_tiny_window8_256", "swinv2_tiny_window8_256") if v2 else (TINY, "swin_tiny_patch4_window7_224")
    )
    torch.manual_seed(0)
    reference = _off_constant_init(timm.create_model(names[1], drop_path_rate=0.0, **_SET_SIZE_MODEL)).eval()
    model = timm.create_model(names[0], **_SET_SIZE_MODEL).eval()
    model.load_state_dict(reference.state_dict())
    feats = timm.create_model(names[0], features_only=True, out_indices=(0, 1, 2), **_SET_SIZE_MODEL).eval()
    for pruned in (reference, model):
        pruned.prune_intermediate_layers([0, 1, 2])
    feats.model.load_state_dict(model.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the resized tables' warning
        for pruned in (reference, model, feats.model):
            pruned.set_input_size(**call)
    x = torch.randn(1, 3, call["img_size"], call["img_size"])
    with torch.no_grad():
        expected = reference.forward_intermediates(x, intermediates_only=True)
        for maps in (model.forward_intermediates(x, intermediates_only=True), feats(x)):
            for ours, theirs in zip(maps, expected, strict=True):
                torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("windows", [[4, 4, 4, 4], [8, 8, 4, 2], [(4, 4), (4, 4), (4, 4), (2, 2)]])
def test_window_size_per_stage_builds_timms_model(v2, windows):
    """timm's window_size per stage (maps 16, 8, 4, 2 at 64): where one window gives those windows (each cut to a
    smaller map, as timm cuts it) swinlite builds that model, with timm's logits and a state dict that loads; any
    other list is refused naming the windows one window gives (it was refused whatever the entries). set_input_size
    then scales each stage's window from the list, as timm does: at 96 timm's logits; at 80, where a list that cuts
    the last stage scales to 10, 10, 5, 2 (5, 5, 5, 2) on maps 20, 10, 5, 3, refused as one window cannot give them
    (scaled from the first entry in every stage, swinlite's last window was 3, its logits not timm's)."""
    names = (
        ("swinlite_v2_tiny_window8_256", "swinv2_tiny_window8_256") if v2 else (TINY, "swin_tiny_patch4_window7_224")
    )
    options = dict(_SET_SIZE_MODEL, window_size=windows, drop_path_rate=0.0)
    torch.manual_seed(0)
    reference = _off_constant_init(timm.create_model(names[1], **options)).eval()
    model = timm.create_model(names[0], **options).eval()
    model.load_state_dict(reference.state_dict())
    rebuilt = timm.create_model(names[0], **timm.models.get_model_args(model)).eval()
    rebuilt.load_state_dict(model.state_dict())
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(rebuilt(x), model(x))
    with pytest.raises(ValueError, match=r"window_size per stage: .* \(here window_size=4 gives \[\(4, 4\), \(4, 4\)"):
        timm.create_model(names[0], **dict(options, window_size=[4, 4, 2, 2]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the resized tables' warning
        reference.set_input_size(img_size=96)
        model.set_input_size(img_size=96)
        x = torch.randn(1, 3, 96, 96)
        with torch.no_grad():
            torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)
        if to_2tuple(windows[-1]) != to_2tuple(windows[0]):
            with pytest.raises(ValueError, match="window_size per stage: swinlite keeps one window"):
                model.set_input_size(img_size=80)


def _drop_paths(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Both residual branches' stochastic depth, block by block."""
    return [branch for stage in model.layers for b in stage.blocks for branch in (b.drop_path1, b.drop_path2)]


def _drop_path_rates(model: torch.nn.Module) -> list[float]:
    """Both residual branches' stochastic-depth rates, block by block (0 for an identity, as both build a rate 0)."""
    return [getattr(branch, "drop_prob", 0.0) for branch in _drop_paths(model)]


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_stochastic_depth_rises_over_the_blocks_as_timms(v2):
    """drop_path_rate rises linearly from 0 at the first block to the rate at the last, across the stages, as in
    timm's Swin (one rate in every block passed every other test). In training each branch drops whole samples and
    scales the kept ones by 1 / keep, as timm's (unscaled, the expected branch fell to keep times its value)."""
    v1_names = (TINY, "swin_tiny_patch4_window7_224")
    names = ("swinlite_v2_tiny_window8_256", "swinv2_tiny_window8_256") if v2 else v1_names
    ours, theirs = (timm.create_model(name, **dict(_SET_SIZE_MODEL, drop_path_rate=0.3)).train() for name in names)
    assert _drop_path_rates(ours) == pytest.approx(_drop_path_rates(theirs))
    assert _drop_path_rates(ours)[::2] == pytest.approx([0.0, 0.075, 0.15, 0.225, 0.3])  # depths (1, 1, 2, 1)
    x = torch.ones(64, 2, 2, 16)  # (B, H, W, C): a branch's output
    for mine, timms in zip(_drop_paths(ours), _drop_paths(theirs), strict=True):
        torch.manual_seed(0)
        dropped = mine(x)
        torch.manual_seed(0)
        torch.testing.assert_close(dropped, timms(x), rtol=0, atol=0)


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("call", [dict(img_size=96), dict(img_size=(64, 96), patch_size=2)], ids=["size", "patch"])
def test_set_input_size_is_recorded_so_that_timm_rebuilds_the_model(v2, call):
    """timm records the resize in the model's arguments (timm.models.get_model_args, which push_to_hf_hub saves and
    create_model rebuilds from): the rebuilt model takes the state dict as it is and computes the same logits."""
    name = "swinlite_v2_tiny_window8_256" if v2 else TINY
    torch.manual_seed(0)
    model = timm.create_model(name, **_SET_SIZE_MODEL).eval()
    model.set_input_size(**call)
    rebuilt = timm.create_model(name, **timm.models.get_model_args(model)).eval()
    rebuilt.load_state_dict(model.state_dict())
    assert rebuilt.state_dict().keys() == model.state_dict().keys()
    x = torch.randn(1, 3, *to_2tuple(call["img_size"]))
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), model(x))


@pytest.mark.parametrize(
    "call,match",
    [
        (dict(window_size=(4, 4, 4)), "Expected 4 stage window sizes"),
        (dict(window_ratio=0), "Window ratios must be positive"),
        (dict(window_size=(4, 0)), "Window sizes must be positive"),
        (dict(window_size=[4, 4, 2, 2]), "swinlite keeps one window"),  # [4, 4, 6, 2]: 4, cut to the maps
        # windows from the ratios (the 16x16 patch grid over each): named, not a window_size never given
        (dict(window_ratio=[4, 8, 4, 4]), r"^window_ratio per stage: .*ratio=\(4, 8, 4, 4\), .*\(2, 2\), \(4, 4\)"),
        (dict(img_size=2), r"img_size must be \(H, W\), each at least the patch"),
        (dict(img_size=64, patch_size=128), r"img_size must be \(H, W\), each at least the patch \(128, 128\)"),
        (dict(patch_size=0), r"patch_size must be a positive int or \(h, w\)"),
        (dict(patch_size=(2, 2, 2)), r"patch_size must be a positive int or \(h, w\)"),
        (dict(patch_size=True), r"patch_size must be a positive int or \(h, w\), got True"),  # a TypeError in timm
        (dict(always_partition=True), "always_partition=True is not available"),
        (dict(window_size=0), "Window sizes must be positive"),
        (dict(window_size=-1), "Window sizes must be positive"),
        (dict(window_size=(3,)), "Expected 4 stage window sizes"),
        # taken by timm's checks: a TypeError deep inside, or blocks of window (2.5, 2.5) with (2, 2) biases
        (dict(window_size=2.5), r"window_size must be a non-empty sequence of positive ints, got \(2\.5, 2\.5\)"),
        (dict(window_size=True), r"window_size must be a non-empty sequence of positive ints, got \(True, True\)"),
        (dict(window_ratio=2.5), r"window_ratio must be a non-empty sequence of positive ints, got \(2\.5,"),
    ],
)
@pytest.mark.parametrize("block", ["v1", "v2"])
def test_set_input_size_refuses_a_bad_call_before_changing_anything(call, match, block):
    torch.manual_seed(0)
    model = timm.create_model(TINY, block=block, **_SET_SIZE_MODEL).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        logits = model(x)
    with pytest.raises(ValueError, match=match):
        model.set_input_size(**call)
    assert model.window_size == (4, 4) and model.patch_embed.img_size == (64, 64) and model.patch_size == (4, 4)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before) and before.keys() == after.keys()
    with torch.no_grad():
        assert torch.equal(model(x), logits)
