"""``timm.create_model(..., features_only=True)``: NCHW levels, NHWC option, per-level norms, frozen stages."""

import copy

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from pico import PICO

import swinlite  # noqa: F401  (registers the models)

NANO = "swinlite_nano_patch2_window4_64"


def _stage_outputs_by_hooks(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """Reference: the raw NHWC output of every ``layers.i``, caught with forward hooks on a plain model."""
    caught = []
    handles = [stage.register_forward_hook(lambda m, i, o: caught.append(o)) for stage in model.layers]
    model(x)
    for h in handles:
        h.remove()
    return caught


@pytest.mark.parametrize(
    ("name", "patch", "size", "strides"),
    [
        (PICO, 4, (250, 333), [4, 8, 16, 32]),
        (NANO, 2, (37, 61), [2, 4, 8, 16]),
        ("swinlite_v2_nano_patch2_window4_64", 4, (250, 333), [4, 8, 16, 32]),  # Swin-V2
    ],
)
def test_nchw_levels_at_odd_sizes_match_the_stage_outputs(name, patch, size, strides):
    torch.manual_seed(0)
    features = timm.create_model(name, features_only=True, out_indices=(0, 1, 2, 3), patch_size=patch).eval()
    plain = timm.create_model(name, patch_size=patch).eval()
    plain.load_state_dict(features.model.state_dict(), strict=False)  # the wrapper dropped the classifier
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        maps = features(x)
        reference = _stage_outputs_by_hooks(plain, x)
    assert features.feature_info.reduction() == strides
    for level, (m, ref, ch, stride) in enumerate(
        zip(maps, reference, features.feature_info.channels(), features.feature_info.reduction(), strict=True)
    ):
        assert m.shape == (1, ch, -(-size[0] // stride), -(-size[1] // stride)), level
        assert m.is_contiguous()
        torch.testing.assert_close(m, ref.permute(0, 3, 1, 2), rtol=0, atol=0)


def test_detection_sized_input_with_pico():
    features = timm.create_model(PICO, features_only=True, patch_size=4).eval()  # Swin's strides 4..32
    with torch.no_grad():
        maps = features(torch.randn(1, 3, 800, 1333))
    assert [tuple(m.shape[1:]) for m in maps] == [(32, 200, 334), (64, 100, 167), (128, 50, 84), (256, 25, 42)]
    assert all(torch.isfinite(m).all() for m in maps)


def test_nhwc_option_and_subset_of_levels():
    nchw = timm.create_model(PICO, features_only=True, out_indices=(1, 3)).eval()
    nhwc = timm.create_model(PICO, features_only=True, out_indices=(1, 3), output_fmt="NHWC").eval()
    nhwc.load_state_dict(nchw.state_dict())
    x = torch.randn(2, 3, 45, 39)
    with torch.no_grad():
        for a, b in zip(nchw(x), nhwc(x), strict=True):
            torch.testing.assert_close(b, a.permute(0, 2, 3, 1), rtol=0, atol=0)
    assert nchw.feature_info.channels() == [64, 256]
    assert len(nchw.model.layers) == 4  # level 3 is asked for, nothing pruned
    counted_back = timm.create_model(PICO, features_only=True, out_indices=(-3, -1)).eval()  # timm's rule
    counted_back.load_state_dict(nchw.state_dict())
    assert counted_back.feature_info.channels() == [64, 256]
    with torch.no_grad():
        for a, b in zip(nchw(x), counted_back(x), strict=True):
            torch.testing.assert_close(b, a, rtol=0, atol=0)
        whole = timm.create_model(PICO).eval()
        last = whole.forward_intermediates(x, indices=[-1], intermediates_only=True)
        torch.testing.assert_close(last, whole.forward_intermediates(x, indices=[3], intermediates_only=True))


def test_indices_of_any_integer_kind_as_timms_swin_takes_them():
    """A tensor or numpy array of levels was refused ("must be a non-empty sequence of levels"); timm's Swin takes
    them. A count of any integer kind is the last n levels (numpy's or a 0-d tensor's count was a TypeError, "not
    iterable"). A float is still refused (timm's took 1.0 by accident), alone too (a TypeError, as timm's Swin
    gives), and a bool."""
    model = timm.create_model(PICO).eval()
    x = torch.randn(1, 3, 40, 52)
    with torch.no_grad():
        want = model.forward_intermediates(x, indices=[1, -1], intermediates_only=True)
        for given in (torch.tensor([1, -1]), np.array([1, -1]), (np.int64(1), -1)):
            got = model.forward_intermediates(x, indices=given, intermediates_only=True)
            assert len(got) == 2 and all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        last_two = model.forward_intermediates(x, indices=2, intermediates_only=True)
        for count in (np.int64(2), torch.tensor(2)):
            got = model.forward_intermediates(x, indices=count, intermediates_only=True)
            assert len(got) == 2 and all(torch.equal(a, b) for a, b in zip(got, last_two, strict=True))
    with pytest.raises(ValueError, match=r"non-empty sequence of levels in 0\.\.3 .*got \(1\.0,\)"):
        model.forward_intermediates(x, indices=(1.0,))
    for scalar in (2.0, True, torch.tensor(2.0)):
        with pytest.raises(ValueError, match=r"^an int selects the last n of 4 levels, n in 1\.\.4; got "):
            model.forward_intermediates(x, indices=scalar)
    with pytest.raises(ValueError, match="an int selects the last n"):
        copy.deepcopy(model).prune_intermediate_layers(1.0)
    assert copy.deepcopy(model).prune_intermediate_layers(torch.tensor([0, 1])) == [0, 1]


def test_whole_models_weights_load_into_a_pruned_model_as_into_timms(tmp_path):
    """A whole model's state dict into a model pruned of stages 2 and 3 (features_only's ``.model``,
    ``prune_intermediate_layers``) was an IndexError, with strict=False too: the bias table of stage 3, whose window
    shrinks to its 2x2 map at 32x32, was looked up among the kept stages' windows. Now as into timm's pruned Swin:
    strict=False loads the kept stages exactly and returns the rest (pruned stages, final norm, classifier) as
    unexpected; strict=True names them, loading nothing. timm's pretrained route drops them, as timm's does."""
    full = timm.create_model(PICO)
    whole = full.state_dict()
    by_timm = timm.create_model(PICO)
    by_timm.prune_intermediate_layers([0, 1])
    for model in (timm.create_model(PICO, features_only=True, out_indices=(0, 1)).model, by_timm):
        before = copy.deepcopy(model.state_dict())
        with pytest.raises(RuntimeError, match=r"\(nothing loaded\): not in the model: layers\.2\.downsample\."):
            model.load_state_dict(whole)
        assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
        missing, unexpected = model.load_state_dict(whole, strict=False)
        assert missing == [] and sorted(unexpected) == sorted(whole.keys() - model.state_dict().keys())
        assert all(k.startswith(("layers.2.", "layers.3.", "norm.", "head.fc.")) for k in unexpected)
        assert all(torch.equal(v, whole[k]) for k, v in model.state_dict().items())
    torch.save(whole, tmp_path / "pico.pth")
    overlay = dict(file=str(tmp_path / "pico.pth"))
    pretrained = timm.create_model(
        PICO, features_only=True, out_indices=(0, 1), pretrained=True, pretrained_cfg_overlay=overlay
    )
    assert all(torch.equal(v, whole[k]) for k, v in pretrained.model.state_dict().items())


def test_per_level_norm_is_a_layer_norm_of_each_level():
    plain = timm.create_model(PICO, features_only=True).eval()
    normed = timm.create_model(PICO, features_only=True, out_norm=True).eval()
    normed.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        for norm in normed.model.out_norms:
            norm.weight.normal_()
            norm.bias.normal_()
    x = torch.randn(1, 3, 40, 52)
    with torch.no_grad():
        for level, (a, b) in enumerate(zip(plain(x), normed(x), strict=True)):
            norm = normed.model.out_norms[level]
            want = F.layer_norm(a.permute(0, 2, 3, 1), a.shape[1:2], norm.weight, norm.bias).permute(0, 3, 1, 2)
            torch.testing.assert_close(b, want, rtol=1e-5, atol=1e-5)


def test_frozen_stages_have_no_grads_and_stay_in_eval_mode():
    model = timm.create_model(PICO, features_only=True, frozen_stages=2, drop_path_rate=0.1, out_norm=True)
    model.train()
    swin = model.model
    frozen = [swin.patch_embed, swin.layers[0], swin.layers[1], swin.out_norms[0], swin.out_norms[1]]
    assert all(not m.training for f in frozen for m in f.modules())
    assert swin.layers[2].training and swin.layers[3].training
    sum(m.sum() for m in model(torch.randn(2, 3, 32, 32))).backward()
    assert all(p.grad is None and not p.requires_grad for f in frozen for p in f.parameters())
    assert all(p.grad is not None for p in swin.layers[2].parameters())
    model.eval().train()
    assert not swin.layers[1].training


def test_checkpointing_behind_frozen_patch_embedding_trains_the_first_stage(monkeypatch):
    """With timm's reentrant checkpointing on (timm.layers.set_reentrant_ckpt(True)) and frozen_stages=0, stage 0's
    input needs no gradient, and reentrant checkpointing gave its 13 parameters none: the stages checkpoint without
    reentry whatever timm's global says."""
    monkeypatch.setattr(timm.layers.config, "_USE_REENTRANT_CKPT", True)  # set_reentrant_ckpt(True), undone after
    model = timm.create_model(PICO, frozen_stages=0).train()
    model.set_grad_checkpointing(True)
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    assert all(p.grad is not None for p in model.layers[0].parameters())


def test_torch_fx_of_a_features_only_model_names_the_way_that_traces():
    """torchvision's tracer with timm's leaves on a features-only model was refused with a hint to pass timm's leaves
    or use features_only=True, both done: timm's functions are kept whole only in the traced module's own forward.
    The hint now says so and names feature_cls='fx', which traces."""
    from torchvision.models.feature_extraction import get_graph_node_names

    leaves = {
        "leaf_modules": timm.layers.get_notrace_modules(),
        "autowrap_functions": timm.layers.get_notrace_functions(),
    }
    with pytest.raises(TypeError, match=r"not in a features_only wrapper's.*feature_cls='fx' for a traced graph"):
        get_graph_node_names(timm.create_model(PICO, features_only=True), tracer_kwargs=leaves)
    torch.manual_seed(0)
    getter = timm.create_model(PICO, features_only=True, output_fmt="NHWC").eval()
    torch.manual_seed(0)  # the same weights
    traced = timm.create_model(PICO, features_only=True, feature_cls="fx").eval()
    x = torch.randn(1, 3, 40, 52)
    with torch.no_grad():
        for got, want in zip(traced(x), getter(x), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize(
    "kwargs", [dict(out_indices=(1, 2)), dict(out_indices=(-2,)), dict(frozen_stages=1, out_indices=(2, 3))]
)
def test_every_trainable_parameter_gets_a_gradient(kwargs):
    """A level's output norm whose level is not returned got no gradient: DistributedDataParallel's second step
    failed ("Expected to have finished reduction in the prior iteration"); timm's Swin has no such parameter. Frozen
    as the FPN backbone freezes them, the state dict the same."""
    model = timm.create_model(PICO, features_only=True, out_norm=True, **kwargs).train()
    sum(level.mean() for level in model(torch.randn(2, 3, 40, 36))).backward()
    assert [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None] == []
    norms = [n for n in model.state_dict() if n.startswith("model.out_norms.")]
    assert len(norms) == 2 * len(model.model.layers)  # each kept stage's weight and bias


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(out_indices=(0, 4)), r"levels in 0\.\.3"),
        (dict(out_indices=(-5,)), r"levels in 0\.\.3 \(or -4\.\.-1 from the last\)"),
        # feature_info said [128, 64] channels for (2, 1) while the maps came finest first; (1, 1) gave one map for two
        (dict(out_indices=(2, 1)), r"strictly increasing \(each level once, finest first\), got \(2, 1\)"),
        (dict(out_indices=(1, 1)), r"strictly increasing .*got \(1, 1\)"),
        (dict(out_indices=(-1, 0)), r"strictly increasing .*got \(-1, 0\)"),
        (dict(out_indices=(True, 2)), r"levels in 0\.\.3 .*got \(True, 2\)"),  # True was taken for level 1
        (dict(frozen_stages=5), r"frozen_stages must be in -1\.\.4"),
        (dict(frozen_stages=-2), r"frozen_stages must be in -1\.\.4"),
        (dict(output_fmt="NWHC"), r"'NCHW' or 'NHWC'"),
        # timm's FeatureListNet / FeatureDictNet failed with "Return layers ... are not present in model"
        (dict(feature_cls="list"), r"feature_cls='list' is not supported .*one of 'getter', 'hook', 'fx'"),
        (dict(feature_cls="dict"), r"feature_cls='dict' is not supported .*one of 'getter', 'hook', 'fx'"),
        # timm's hook and fx nets ignored it and returned NHWC maps
        (dict(feature_cls="hook", output_fmt="NCHW"), r"output_fmt='NCHW' with feature_cls='hook': .* NHWC"),
        (dict(feature_cls="fx", output_fmt="NCHW"), r"output_fmt='NCHW' with feature_cls='fx': .* NHWC"),
    ],
)
def test_bad_feature_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        timm.create_model(PICO, features_only=True, **kwargs)


def test_output_fmt_needs_features_only():
    with pytest.raises(ValueError, match="option of features_only=True"):
        timm.create_model(PICO, output_fmt="NHWC")


# an explicit "getter" gave timm's plain getter; "hook" timm's hook net, which runs the Swin as one module, never
# checkpointed: set_grad_checkpointing was accepted and did nothing
@pytest.mark.parametrize("feature_cls", [None, "getter", "hook"])
def test_grad_checkpointing_of_a_features_only_model_gives_the_same_gradients(feature_cls, monkeypatch):
    """timm's feature getter has no set_grad_checkpointing (its FeatureListNet has): ours forwards it to the Swin,
    whose blocks are then checkpointed, one call each."""
    kwargs = {} if feature_cls is None else {"feature_cls": feature_cls}
    model = timm.create_model(PICO, features_only=True, out_indices=(1, 3), **kwargs)
    swin = model.body if feature_cls == "hook" else model.model
    x = torch.randn(2, 3, 32, 32)
    checkpointed = []
    checkpoint = torch.utils.checkpoint.checkpoint
    monkeypatch.setattr(
        torch.utils.checkpoint, "checkpoint", lambda *a, **k: checkpointed.append(1) or checkpoint(*a, **k)
    )

    def grads() -> list[torch.Tensor]:
        model.zero_grad()
        sum(level.square().mean() for level in model(x)).backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    plain = grads()
    assert not checkpointed
    model.set_grad_checkpointing(True)
    assert all(stage.grad_checkpointing for stage in swin.layers)
    for a, b in zip(plain, grads(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert len(checkpointed) == sum(len(stage.blocks) for stage in swin.layers)
