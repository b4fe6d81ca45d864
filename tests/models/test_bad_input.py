"""Bad input is rejected at the model's entry with a ValueError naming the expected input."""

import pytest
import timm
import torch

import swinlite  # noqa: F401


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return timm.create_model("swinlite_pico_patch2_window4_32").eval()


@pytest.mark.parametrize(
    "x,detail",
    [
        (torch.randn(3, 32, 32), "3-D tensor"),
        (torch.randn(1, 4, 32, 32), "got 4 channels"),
        (torch.randn(1, 3, 1, 32), "smaller than one patch"),
        (torch.zeros(1, 3, 32, 32, dtype=torch.uint8), "dtype torch.uint8"),
    ],
)
@pytest.mark.parametrize("method", ["forward", "forward_features", "forward_intermediates"])
def test_bad_input_raises_value_error_naming_the_expected_shape(model, method, x, detail):
    with pytest.raises(ValueError, match=r"expected a floating-point tensor of shape \(B, 3, H, W\)") as err:
        getattr(model, method)(x)
    assert detail in str(err.value)


def test_bad_output_fmt(model):
    with pytest.raises(ValueError, match="output_fmt must be 'NCHW' or 'NHWC'"):
        model.forward_intermediates(torch.randn(1, 3, 32, 32), output_fmt="NLC")


def test_any_size_at_least_one_patch_works(model):
    for size in [(2, 2), (5, 7), (33, 47), (64, 20)]:
        with torch.no_grad():
            out = model(torch.randn(1, 3, *size))
        assert out.shape == (1, 10) and torch.isfinite(out).all()


@pytest.mark.parametrize("train", [False, True])
def test_empty_batch_gives_an_empty_output(model, train):
    model.train(train)
    try:
        x = torch.zeros(0, 3, 33, 32)
        assert model(x).shape == (0, 10)
        assert model.forward_features(x).shape == (0, 3, 2, 256)
        levels = model.forward_intermediates(x, intermediates_only=True)
        assert [tuple(t.shape) for t in levels] == [(0, 32, 17, 16), (0, 64, 9, 8), (0, 128, 5, 4), (0, 256, 3, 2)]
    finally:
        model.eval()


def test_an_empty_batch_gets_its_empty_gradient(model):
    """The blank image that stands in for it was a new tensor: the input was cut off from autograd (x.grad None,
    autograd.grad raised "appears to not have been used in the graph")."""
    x = torch.zeros(0, 3, 32, 32, requires_grad=True)
    (grad,) = torch.autograd.grad(model(x).sum(), x)
    assert grad.shape == x.shape


@pytest.mark.parametrize("feature_cls", ["getter", "hook", "fx"])
def test_empty_batch_features_only(feature_cls):
    """timm's hook and fx extractors read the stages' outputs: these held a blank image's features (batch 1) while
    only forward_features / forward_intermediates cut the blank image off."""
    features = timm.create_model(
        "swinlite_pico_patch2_window4_32", features_only=True, out_indices=(1, 3), feature_cls=feature_cls
    ).eval()
    maps = features(torch.zeros(0, 3, 32, 32))
    maps = list(maps.values()) if isinstance(maps, dict) else maps
    want = [(0, 64, 8, 8), (0, 256, 2, 2)] if feature_cls == "getter" else [(0, 8, 8, 64), (0, 2, 2, 256)]  # NHWC
    assert [tuple(t.shape) for t in maps] == want


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("name", ["swinlite_pico_patch2_window4_32", "swinlite_v2_tiny_window8_256"])
def test_empty_batch_hooks_see_an_empty_batch(name, fast):
    """Every module outside a stage's blocks, and each stage, runs on the empty batch (train, with autograd)."""
    v2 = dict(img_size=32, embed_dim=16, depths=(1, 1, 1, 1), num_heads=(1, 1, 1, 1)) if "v2" in name else {}
    model = timm.create_model(name, fast=fast, **v2).train()
    seen = []
    for module in [model.patch_embed, *model.layers, model.norm, model.head]:
        module.register_forward_hook(lambda module, args, out: seen.append(tuple(out.shape)))
    x = torch.zeros(0, 3, 33, 32, requires_grad=True)
    (grad,) = torch.autograd.grad(model(x).sum(), x)
    assert grad.shape == x.shape
    assert len(seen) == 7 and all(shape[0] == 0 for shape in seen), seen


@pytest.mark.parametrize(
    ("autocast", "advice"),
    [(False, "convert one of them"), (True, r"autocast does not cast float64: convert the input \(x\.float\(\)")],
    ids=["plain", "autocast"],
)
def test_dtype_other_than_the_models_names_both(model, autocast, advice):
    """Under autocast a float64 input met torch's own dtype error in the patch embedding: autocast casts every
    floating dtype but float64."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        with pytest.raises(
            ValueError, match=r"input dtype torch.float64 differs from the model's torch.float32.*" + advice
        ):
            model(torch.zeros(1, 3, 32, 32, dtype=torch.float64))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast mixes dtypes on purpose
        for dtype in (torch.bfloat16, torch.float16):
            assert model(torch.zeros(1, 3, 32, 32, dtype=dtype)).shape == (1, 10)


def test_scripted_model_keeps_the_input_check(model):
    scripted = torch.jit.script(model)
    with pytest.raises(Exception, match=r"ValueError: expected a floating-point tensor .* got 4 channels"):
        scripted(torch.zeros(1, 4, 32, 32))
    assert scripted(torch.zeros(0, 3, 32, 32)).shape == (0, 10)
