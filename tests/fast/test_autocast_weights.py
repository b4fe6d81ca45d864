"""Inference under autocast converts each weight once, not once per call (swinlite.fast.row_blocks.autocast_weights):
the fast linears and the MLP's fc2 against nn.Linear and timm's Mlp, the conversions counted in the profile."""

import contextlib
import copy

import pytest
import timm
import torch
from pico import PICO
from timm.layers import Mlp
from timm.utils import ModelEmaV3
from torch.profiler import ProfilerActivity, profile

from swinlite.fast import accelerate


def _conversions(module: torch.nn.Module, x: torch.Tensor) -> int:
    """How many dtype conversions (aten::_to_copy) one call of ``module`` runs in an autocast region of its own, as
    an inference loop calls it (autocast's own cache of converted weights lasts one region)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof, torch.autocast("cpu", torch.bfloat16):
        module(x)
    return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_inference_under_autocast_converts_the_weights_once(kind):
    torch.manual_seed(0)
    ref = torch.nn.Linear(8, 16) if kind == "linear" else Mlp(8, 32)
    ours = accelerate(ref.__class__(8, 16) if kind == "linear" else Mlp(8, 32))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        with torch.autocast("cpu", torch.bfloat16):
            torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=0)
        assert _conversions(ours, x) == 1  # x alone
        assert _conversions(ref, x) == 1 + 2 * (1 if kind == "linear" else 2)  # and every weight and bias
    with torch.no_grad():
        for p in ours.parameters():
            p.mul_(-1)  # a kept copy of the old weight must not serve
        for p in ref.parameters():
            p.mul_(-1)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", [PICO, "swinlite_v2_pico_patch2_window4_32"])
def test_an_ema_update_between_validations_is_seen(name):
    """The run engine validates timm's ModelEmaV3 copy under autocast after updating it in place: the kept copies
    in autocast's dtype (and V2's kept tables) must follow the update, giving what a fresh copy of the EMA model
    (nothing kept yet) gives."""
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    ema = ModelEmaV3(model, decay=0.5)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        before = ema.module(x)  # keeps the copies of the EMA weights
        for p in model.parameters():
            p.mul_(-1)
    ema.update(model)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        after, fresh = ema.module(x), copy.deepcopy(ema.module)(x)
    assert not torch.equal(after, before)
    torch.testing.assert_close(after, fresh, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("name", "autocast"),
    [(PICO, True), ("swinlite_v2_pico_patch2_window4_32", True), ("swinlite_v2_pico_patch2_window4_32", False)],
)  # V1 keeps only autocast's weight copies; V2 its bias table and merged q, k, v bias in fp32 too
@pytest.mark.parametrize("fused", [False, True])
def test_values_kept_between_training_steps_follow_the_optimizer(name, autocast, fused):
    """Fused AdamW (``fused=True``) updates the parameters in place without bumping their version counters: eval
    between steps served the values kept before them (about 30 off in bf16 on these pico models) until any optimizer
    step made them again. After the steps the model gives what a fresh copy of it (nothing kept yet) gives."""
    torch.manual_seed(0)
    model = timm.create_model(name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=fused)
    x = torch.randn(2, 3, 32, 32)

    def evaluate(module: torch.nn.Module) -> torch.Tensor:
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            return module.eval()(x)

    for _ in range(2):
        evaluate(model)  # keeps values of the current weights
        model.train()
        optimizer.zero_grad()
        model(x).logsumexp(1).mean().backward()
        optimizer.step()
    torch.testing.assert_close(evaluate(model), evaluate(copy.deepcopy(model)), rtol=0, atol=0)


def test_a_weight_on_a_new_storage_at_the_old_address_is_converted_again():
    """``model.half().float()`` gives each weight a new storage under the same version counter (``Module._apply``
    sets ``.data``), and the allocator often hands back the freed address: the copy kept for the old values served
    (0.001-0.003 off on a pico model in most of six round trips). Here the new storage is made at the old address
    for certain, over one buffer."""
    torch.manual_seed(0)
    ref, ours = torch.nn.Linear(8, 16), accelerate(torch.nn.Linear(8, 16))
    ours.load_state_dict(ref.state_dict())
    memory = bytearray(16 * 8 * 4)
    x = torch.randn(4, 8)
    for sign in (1.0, -1.0):
        with torch.no_grad():
            ref.weight.mul_(sign)
            torch.frombuffer(memory, dtype=torch.float32).copy_(ref.weight.flatten())
        ours.weight.data = torch.frombuffer(memory, dtype=torch.float32).view(16, 8)  # the old storage is freed
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
            torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=0)


def test_with_autograd_the_weights_get_their_gradients_in_fp32():
    torch.manual_seed(0)
    ref, ours = torch.nn.Linear(8, 16), accelerate(torch.nn.Linear(8, 16))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(4, 8)
    for module in (ref, ours):
        with torch.autocast("cpu", torch.bfloat16):
            module(x).float().square().sum().backward()
    assert ours.weight.grad.dtype == torch.float32
    torch.testing.assert_close(ours.weight.grad, ref.weight.grad, rtol=0, atol=0)
    torch.testing.assert_close(ours.bias.grad, ref.bias.grad, rtol=0, atol=0)


@pytest.mark.parametrize("name", [PICO, "swinlite_v2_pico_patch2_window4_32"])
def test_a_model_built_in_inference_mode_runs_computing_per_call(name):
    """Its weights are inference tensors, which have no version counter to key a kept value by: the keeper computes
    per call (it raised "Inference tensors do not track version counter")."""
    torch.manual_seed(0)
    plain = timm.create_model(name).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.inference_mode():
        built = timm.create_model(name).eval()
        built.load_state_dict(plain.state_dict())
        for context in (contextlib.nullcontext, lambda: torch.autocast("cpu", torch.bfloat16)):
            with context():
                got, again, expected = built(x), built(x), plain(x)
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
            torch.testing.assert_close(again, expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", [PICO, "swinlite_v2_pico_patch2_window4_32"])
def test_after_autocast_inference_the_parameters_can_be_swapped(name):
    """The kept copies were keyed by weak references to the parameters, and torch.utils.swap_tensors refuses a
    tensor with one: after one bf16 inference call, load_state_dict and .to() with swapping on (PyTorch's coming
    default) raised "Couldn't swap FastLinear.weight". Views of one storage keep their own copies."""
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        before = model(x)
    fresh = timm.create_model(name).eval()
    swapping = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.load_state_dict(fresh.state_dict())
        model.to(torch.float64).to(torch.float32)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swapping)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        after, expected = model(x), fresh(x)
    assert not torch.equal(after, before)
    torch.testing.assert_close(after, expected, rtol=0, atol=0)
    weight = torch.randn(16, 8)
    for view in (weight, weight[:8], weight[:, :4]):  # views at one address, of one storage: not one kept copy
        layer = accelerate(torch.nn.Linear(view.shape[1], view.shape[0], bias=False))
        layer.weight = torch.nn.Parameter(view)
        x = torch.randn(3, view.shape[1])
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
            torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, view), rtol=0, atol=0)
