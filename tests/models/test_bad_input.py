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
