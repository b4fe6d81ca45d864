"""FastMlp (GELU recomputed in backward) against timm's Mlp, the class it accelerates, with the same weights."""

import pytest
import torch
from timm.layers import Mlp as TimmMlp

from swinlite.fast import FastMlp, accelerate


def pair(drop: float = 0.0) -> tuple[FastMlp, TimmMlp]:
    torch.manual_seed(0)
    ours, ref = accelerate(TimmMlp(8, 32, drop=drop)), TimmMlp(8, 32, drop=drop)
    assert isinstance(ours, FastMlp)
    ours.load_state_dict(ref.state_dict())  # same keys: fc1.*, fc2.*
    return ours, ref


def saved_bytes(fn) -> int:
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def test_outputs_and_gradients_match_timm_and_less_is_saved():
    ours, ref = pair()
    x = torch.randn(3, 5, 8, requires_grad=True)
    results = []
    for module in (ours, ref):
        x.grad = None
        out = module(x)
        out.square().sum().backward()
        results.append([out.detach(), x.grad, module.fc1.weight.grad, module.fc2.weight.grad, module.fc2.bias.grad])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert saved_bytes(lambda: ours(x)) < saved_bytes(lambda: ref(x))


def test_bf16_autocast_matches_timm_and_keeps_fp32_gradients():
    ours, ref = pair()
    x = torch.randn(4, 8)
    with torch.autocast("cpu", torch.bfloat16):
        out, expected = ours(x), ref(x)
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    out.float().sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in ours.parameters())


def test_float64_under_autocast_stays_float64_as_timms():
    """Autocast leaves float64 alone: a float64 MLP under bf16 autocast computes in float64, as timm's (it ran its
    fc2 in bf16, 2e-2 off)."""
    ours, ref = (m.double() for m in pair())
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    with torch.autocast("cpu", torch.bfloat16):
        out, expected = ours(x), ref(x)
    assert out.dtype == expected.dtype == torch.float64
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("drop,act", [(0.1, torch.nn.GELU), (0.0, torch.nn.ReLU)])
def test_other_settings_take_the_plain_path(drop, act):
    assert not accelerate(TimmMlp(8, 32, act_layer=act, drop=drop)).recomputes()  # in training
