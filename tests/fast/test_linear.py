"""fp32 linear layers through oneDNN (swinlite.fast.row_blocks.onednn_linear) against F.linear and the plain
composition, and when FastLinear (swinlite.fast.blocks) takes that path."""

import pytest
import timm
import torch
import torch.nn.functional as F

from swinlite.fast import FastLinear, accelerate, blocks, row_blocks, v2
from swinlite.fast.blocks import onednn_serves
from swinlite.fast.row_blocks import ONEDNN_LINEAR, onednn_linear

pytestmark = pytest.mark.skipif(not ONEDNN_LINEAR, reason="PyTorch built without oneDNN")


@pytest.mark.parametrize("with_bias", [True, False])
def test_onednn_linear_and_its_fused_gelu_and_residual(with_bias):
    torch.manual_seed(0)
    x, weight = torch.randn(2, 5, 7, 24), torch.randn(40, 24)
    bias = torch.randn(40) if with_bias else None
    residual = torch.randn(2, 5, 7, 40)
    expected = F.linear(x, weight, bias)
    torch.testing.assert_close(onednn_linear(x, weight, bias), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(onednn_linear(x, weight, bias, gelu=True), F.gelu(expected), rtol=1e-5, atol=1e-5)
    got = onednn_linear(x, weight, bias, residual=residual)
    torch.testing.assert_close(got, residual + expected, rtol=1e-5, atol=1e-5)


@pytest.fixture
def onednn_calls(monkeypatch):
    """Forces the rule on and records which module called oneDNN: FastLinear (blocks), V2's q, k, v projection (v2)
    or the row blocks (row_blocks)."""
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", True)
    calls = []

    def spy(caller):
        def wrapped(*args, **kwargs):
            calls.append(caller)
            return onednn_linear(*args, **kwargs)

        return wrapped

    for module in (blocks, v2, row_blocks):
        monkeypatch.setattr(module, "onednn_linear", spy(module.__name__.rsplit(".", 1)[-1]))
    return calls


def test_fast_linear_runs_onednn_only_without_autograd_in_fp32(onednn_calls):
    torch.manual_seed(0)
    layer = accelerate(torch.nn.Linear(24, 40))
    assert type(layer) is FastLinear
    x = torch.randn(3, 24)
    expected = F.linear(x, layer.weight, layer.bias)
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)
    assert onednn_calls == ["blocks", "blocks"]
    layer(x).sum().backward()  # autograd: F.linear, which has a backward
    assert layer.weight.grad is not None
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16  # autocast's bf16 linear, not oneDNN in fp32
        assert layer.double()(x.double()).dtype == torch.float64
    assert onednn_calls == ["blocks", "blocks"]


def test_the_rule_decides(monkeypatch):
    x, weight = torch.randn(3, 24), torch.randn(40, 24)
    with torch.no_grad():
        monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", True)
        assert onednn_serves(x, weight, None)
        assert not onednn_serves(x.to("meta"), weight.to("meta"), None)
        monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", False)
        assert not onednn_serves(x, weight, None)


@pytest.mark.parametrize(
    "name,callers",
    [
        ("swinlite_pico_patch2_window4_32", {"blocks", "row_blocks"}),  # merging and head; the blocks' row blocks
        ("swinlite_v2_pico_patch2_window4_32", {"blocks", "v2"}),  # FastLinear in the blocks too; q, k, v
    ],
)
def test_models_with_the_rule_on_equal_the_reference(onednn_calls, name, callers):
    """Every linear of a fast model (V2's q, k, v projection with its composed bias too) through oneDNN, against the
    reference model (fast=False) on the same weights; whole-batch V2 and V1's row blocks alike."""
    torch.manual_seed(0)
    reference = timm.create_model(name, fast=False).eval()
    fast = timm.create_model(name).eval()
    fast.load_state_dict(reference.state_dict())
    x = torch.randn(2, 3, 36, 28)  # padded windows
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-5, atol=1e-5)
    assert set(onednn_calls) == callers
