"""fp32 linear layers through oneDNN (swinlite.fast.row_blocks.onednn_linear; with autograd:
swinlite.fast.linear_grad) against F.linear and the plain composition, and when the fast modules take that path."""

import copy
import sys

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.layers import Mlp

from swinlite.fast import FastLinear, FastMlp, accelerate, blocks, linear_grad, row_blocks
from swinlite.fast.blocks import onednn_serves
from swinlite.fast.linear_grad import onednn_linear_with_grad
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


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("frozen", [False, True])  # frozen: no gradient to the weight and bias
@pytest.mark.parametrize("input_grad_rows", [0, 1024])  # the input gradient by oneDNN; by the BLAS (70 rows)
def test_onednn_linear_with_grad_against_f_linear(monkeypatch, with_bias, frozen, input_grad_rows):
    monkeypatch.setattr(linear_grad, "ONEDNN_INPUT_GRAD_ROWS", input_grad_rows)
    torch.manual_seed(0)
    x = torch.randn(2, 5, 7, 24, requires_grad=True)
    weight = torch.randn(40, 24, requires_grad=not frozen)
    bias = torch.randn(40, requires_grad=not frozen) if with_bias else None
    grad = torch.randn(2, 5, 7, 40)
    params = [t for t in (x, weight, bias) if t is not None and t.requires_grad]
    expected = F.linear(x, weight, bias)
    expected_grads = torch.autograd.grad(expected, params, grad)
    got = onednn_linear_with_grad(x, weight, bias)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for g, e in zip(torch.autograd.grad(got, params, grad), expected_grads, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_bias", [True, False])
def test_the_ops_of_compiled_graphs_pass_torchs_op_checks(with_bias):
    """``swinlite::onednn_linear`` and ``swinlite::onednn_input_grad`` (a compiled graph's linears: their schema,
    fake tensors, autograd formula and AOT dispatch, as ``torch.library.opcheck`` tests them)."""
    torch.manual_seed(0)
    x, weight = torch.randn(10, 8, requires_grad=True), torch.randn(6, 8, requires_grad=True)
    bias = torch.randn(6, requires_grad=True) if with_bias else None
    torch.library.opcheck(torch.ops.swinlite.onednn_linear, (x, weight, bias))
    torch.library.opcheck(torch.ops.swinlite.onednn_input_grad, (torch.randn(10, 6), weight.detach()))


@pytest.fixture
def onednn_calls(monkeypatch):
    """Forces the rule on (input gradients through oneDNN at any size) and records which code called oneDNN, as
    "module.function": a linear without autograd (linear_grad.traced_linear: FastLinear, the GELU recompute's fc2),
    with it (linear_grad._OneDnnLinear.forward, linear_grad.onednn_input_grad), in a compiled graph
    (linear_grad._linear_op), the row blocks (row_blocks.*)."""
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", True)
    monkeypatch.setattr(linear_grad, "ONEDNN_INPUT_GRAD_ROWS", 0)
    calls = []

    def spy(*args, **kwargs):
        caller = sys._getframe(1)
        calls.append(f"{caller.f_globals['__name__'].rsplit('.', 1)[-1]}.{caller.f_code.co_qualname}")
        return onednn_linear(*args, **kwargs)

    for module in (row_blocks, linear_grad):
        monkeypatch.setattr(module, "onednn_linear", spy)
    return calls


def test_fast_linear_runs_onednn_in_fp32_only(onednn_calls):
    torch.manual_seed(0)
    layer = accelerate(torch.nn.Linear(24, 40))
    assert type(layer) is FastLinear
    x = torch.randn(3, 24)
    expected = F.linear(x, layer.weight, layer.bias)
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)
    assert onednn_calls == ["linear_grad.traced_linear"]
    layer(x).sum().backward()  # autograd: the forward by oneDNN (x takes no gradient)
    torch.testing.assert_close(layer.weight.grad, x.sum(0).expand(40, 24), rtol=1e-5, atol=1e-5)
    assert onednn_calls == ["linear_grad.traced_linear", "linear_grad._OneDnnLinear.forward"]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16  # autocast's bf16 linear, not oneDNN in fp32
        assert layer.double()(x.double()).dtype == torch.float64
    assert onednn_calls == ["linear_grad.traced_linear", "linear_grad._OneDnnLinear.forward"]


def test_mlp_without_autograd_runs_both_layers_through_onednn(onednn_calls):
    """Off the row blocks without autograd (a compiled inference graph traces this path), fc2(gelu(h)) too goes
    through oneDNN, not ``F.linear``: the same output as timm's Mlp."""
    torch.manual_seed(0)
    reference = Mlp(24, 96)
    mlp = accelerate(copy.deepcopy(reference))
    assert type(mlp) is FastMlp and mlp.recomputes()
    x = torch.randn(2, 5, 24)
    with torch.inference_mode():
        torch.testing.assert_close(mlp(x), reference(x), rtol=1e-5, atol=1e-5)
    assert onednn_calls == ["linear_grad.traced_linear"] * 2  # fc1 (FastLinear), then fc2 with its GELU input


def test_the_rule_decides(monkeypatch):
    x, weight = torch.randn(3, 24), torch.randn(40, 24)
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", True)
    assert onednn_serves(x, weight)
    assert not onednn_serves(x.to("meta"), weight.to("meta"))
    assert not onednn_serves(x.double(), weight.double())
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", False)
    assert not onednn_serves(x, weight)


@pytest.mark.parametrize(
    "name,callers",
    [
        ("swinlite_pico_patch2_window4_32", {"linear_grad", "row_blocks"}),  # merging and head; the row blocks
        ("swinlite_v2_pico_patch2_window4_32", {"linear_grad", "row_blocks"}),  # the same; V2's q, k, v bias too
    ],
)
def test_models_with_the_rule_on_equal_the_reference(onednn_calls, name, callers):
    """Every linear of a fast model through oneDNN, against the reference model (fast=False) on the same weights:
    inference (the blocks in row blocks), then the outputs and every gradient of a train step."""
    torch.manual_seed(0)
    reference = timm.create_model(name, fast=False, drop_path_rate=0.0).eval()
    fast = timm.create_model(name, drop_path_rate=0.0).eval()
    fast.load_state_dict(reference.state_dict())
    x = torch.randn(2, 3, 36, 28)  # padded windows
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-5, atol=1e-5)
    assert {call.split(".")[0] for call in onednn_calls} == callers
    onednn_calls.clear()
    outputs = [model.train()(x) for model in (fast, reference)]
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)
    for out in outputs:
        out.square().sum().backward()
    for (n, p), q in zip(fast.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=n)
    assert set(onednn_calls) == {  # FastLinear's forward; fc2's with the GELU recomputed; their input gradients
        "linear_grad._OneDnnLinear.forward",
        "linear_grad.traced_linear",
        "linear_grad.onednn_input_grad",
    }
