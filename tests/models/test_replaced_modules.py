"""Modules a user replaces or hooks after the build take effect on the fast path as on the reference (timm's Swin
calls each module): a LoRA linear (a subclass of ``nn.Linear``), a PEFT-style wrapper, another activation, forward
hooks, in eval without autograd (the row blocks), eval with autograd and training (the gather, the GELU recompute)."""

import copy
from collections.abc import Callable

import pytest
import timm
import torch
from torch import nn

import swinlite  # noqa: F401  (registers the swinlite models with timm)

TINY = "swinlite_tiny_patch4_window7_224"
SMALL = dict(img_size=64, embed_dim=16, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8), window_size=4, drop_path_rate=0.0)
LINEARS = ["attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"]
BLOCK_MODULES = ["attn", "attn.qkv", "attn.proj", "mlp", "mlp.fc1", "mlp.act", "mlp.fc2", "norm2"]


class LoraLinear(nn.Linear):
    """loralib's style: the linear's own forward plus a low-rank term (factors of scale 0.2: they change the logits,
    and the gradients stay well conditioned; at 0.5 small entries of fp32 gradients differed by cancellation between
    CPUs' kernels, AVX-512 against AVX2)."""

    def __init__(self, base: nn.Linear, rank: int = 2) -> None:
        super().__init__(base.in_features, base.out_features, bias=base.bias is not None)
        self.load_state_dict(base.state_dict())
        self.lora_a = nn.Parameter(torch.randn(rank, base.in_features) * 0.2)
        self.lora_b = nn.Parameter(torch.randn(base.out_features, rank) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + x @ self.lora_a.T @ self.lora_b.T


class Wrapped(nn.Module):
    """PEFT's style: the base layer inside, a low-rank term added; no weight or bias of its own."""

    def __init__(self, base: nn.Linear, rank: int = 2) -> None:
        super().__init__()
        self.base_layer = base
        self.lora_a = nn.Parameter(torch.randn(rank, base.in_features) * 0.2)
        self.lora_b = nn.Parameter(torch.randn(base.out_features, rank) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + x @ self.lora_a.T @ self.lora_b.T


class WrappedWithWeight(Wrapped):
    """A wrapper that exposes the base layer's weight and bias, as PEFT's ``LoraLayer`` does."""

    @property
    def weight(self) -> torch.Tensor:
        return self.base_layer.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.base_layer.bias


def _pair() -> tuple[nn.Module, nn.Module]:
    """The fast model and the reference model (``fast=False``) with the same weights."""
    torch.manual_seed(0)
    reference = timm.create_model(TINY, fast=False, **SMALL)
    fast = timm.create_model(TINY, **SMALL)
    fast.load_state_dict(reference.state_dict())
    return fast, reference


def _blocks(model: nn.Module) -> list[nn.Module]:
    return [block for layer in model.layers for block in layer.blocks]


def _replace(model: nn.Module, path: str, make: Callable[[nn.Module], nn.Module]) -> None:
    """Replace ``path`` (e.g. ``"mlp.fc2"``) in every block by ``make(old)``."""
    parent_path, _, name = path.rpartition(".")
    for block in _blocks(model):
        parent = block.get_submodule(parent_path) if parent_path else block
        setattr(parent, name, make(getattr(parent, name)))


def _run(model: nn.Module, x: torch.Tensor, mode: str) -> torch.Tensor:
    model.train(mode == "train")
    with torch.set_grad_enabled(mode != "eval_no_grad"):
        return model(x)


@pytest.mark.parametrize(
    ("adapter", "mode"),  # each mode's fast path once: the row blocks, the gather, the GELU recompute
    [(LoraLinear, "eval_no_grad"), (LoraLinear, "train"), (Wrapped, "eval_grad"), (WrappedWithWeight, "eval_no_grad")],
)
def test_replaced_linears_take_effect(adapter, mode):
    """The fast path read the linears' weights: fc2's adapter was ignored in every mode (no gradient to it), the
    others' in eval without autograd; a wrapper without a weight raised AttributeError."""
    fast, reference = _pair()
    x = torch.randn(2, 3, 64, 64)
    plain = _run(reference, x, mode).detach()
    for model in (fast, reference):
        torch.manual_seed(1)
        for path in LINEARS:
            _replace(model, path, adapter)
    out, expected = _run(fast, x, mode), _run(reference, x, mode)
    assert not torch.allclose(expected, plain, atol=1e-2)  # the adapters change the logits
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    if mode != "eval_no_grad":
        out.square().sum().backward()
        expected.square().sum().backward()
        for path in LINEARS:
            grads = [[b.get_submodule(path).lora_b.grad for b in _blocks(m)] for m in (fast, reference)]
            for ours, theirs in zip(*grads, strict=True):
                assert ours is not None, path
                torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["eval_no_grad", "train"])
@pytest.mark.parametrize("act", [nn.ReLU, lambda: nn.GELU(approximate="tanh")], ids=["relu", "gelu_tanh"])
def test_a_replaced_activation_takes_effect(act, mode):
    fast, reference = _pair()
    for model in (fast, reference):
        _replace(model, "mlp.act", lambda _: act())
    x = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(_run(fast, x, mode), _run(reference, x, mode), rtol=1e-4, atol=1e-4)


def _record_hooks(model: nn.Module, paths: list[str]) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """Forward hooks on ``paths`` of every block, each recording (path, input shape, output shape) in call order."""
    calls = []
    for block in _blocks(model):
        for path in paths:

            def hook(module: nn.Module, args: tuple, out: torch.Tensor, path: str = path) -> None:
                calls.append((path, tuple(args[0].shape), tuple(out.shape)))

            block.get_submodule(path).register_forward_hook(hook)
    return calls


@pytest.mark.parametrize("mode", ["eval_no_grad", "train"])
def test_forward_hooks_fire_as_on_the_reference(mode):
    """Hooks on attn, its linears, the MLP and its layers, norm2: they never fired in eval without autograd (fc2's
    and act's: in no mode), attn's saw windows cut to a small map, and norm2's saw rows of tokens."""
    fast, reference = _pair()
    x = torch.randn(2, 3, 64, 64)
    calls = [_record_hooks(model, BLOCK_MODULES) for model in (fast, reference)]
    torch.testing.assert_close(_run(fast, x, mode), _run(reference, x, mode), rtol=1e-4, atol=1e-4)
    assert calls[0] == calls[1] and len(calls[1]) == len(BLOCK_MODULES) * len(_blocks(fast))


@pytest.mark.parametrize("mode", ["eval_no_grad", "train"])
def test_a_global_forward_hook_sees_every_call_as_on_the_reference(mode):
    fast, reference = _pair()
    x = torch.randn(2, 3, 64, 64)
    calls: list[type] = []
    handle = nn.modules.module.register_module_forward_hook(lambda m, args, out: calls.append(type(m).__name__))
    try:
        _run(reference, x, mode)
        expected, calls[:] = list(calls), []
        _run(fast, x, mode)
    finally:
        handle.remove()
    names = [[name.removeprefix("Fast") for name in c] for c in (calls, expected)]  # fast subclasses: Fast*
    assert names[0] == names[1] and "Linear" in names[1]


def test_without_hooks_or_replacements_the_fast_path_runs(monkeypatch):
    """The check routes nothing to the reference by itself: in eval without autograd every block's MLP runs in row
    blocks, and the training step recomputes the GELU."""
    from swinlite.fast.blocks import FastMlp

    fast, _ = _pair()
    calls = []
    for name in ("forward_row_blocks", "as_built"):
        method = getattr(FastMlp, name)
        monkeypatch.setattr(FastMlp, name, lambda self, *a, m=method, n=name, **k: calls.append(n) or m(self, *a, **k))
    with torch.no_grad():
        fast.eval()(torch.randn(1, 3, 64, 64))
    assert calls.count("forward_row_blocks") == len(_blocks(fast))
    assert all(block.as_built() for block in _blocks(fast))


def test_quantize_dynamic_takes_effect_on_a_reference_model():
    """docs/models.md: ``torch.ao.quantization.quantize_dynamic(model, {nn.Linear})`` quantizes a model built with
    ``fast=False`` (the fast model's linears are ``FastLinear``, which it does not match): timm's logits,
    quantized the same way, to quantization tolerance."""
    if not {"fbgemm", "x86"} & set(torch.backends.quantized.supported_engines):
        pytest.skip("no quantized CPU engine")
    torch.manual_seed(0)
    timms = timm.create_model("swin_tiny_patch4_window7_224", **SMALL).eval()
    ours = timm.create_model(TINY, fast=False, **SMALL).eval()
    ours.load_state_dict(timms.state_dict())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        float_logits = ours(x)
        quantized = [torch.ao.quantization.quantize_dynamic(copy.deepcopy(m), {nn.Linear}) for m in (ours, timms)]
        out, expected = (m(x) for m in quantized)
    linears = [sum(type(m) is nn.Linear for m in q.modules()) for q in quantized]
    assert linears[0] == linears[1] == 0
    assert not torch.allclose(out, float_logits, atol=1e-4)
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3)


class Doubled(nn.Module):
    """Not a dropout: scales its input by 2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x


def _drop1_replaced(mlp: nn.Module) -> None:
    mlp.drop1 = nn.Dropout(0.5)


def _drop1_p_set(mlp: nn.Module) -> None:
    mlp.drop1.p = 0.5


@pytest.mark.parametrize("change", [_drop1_replaced, _drop1_p_set], ids=["replaced", "p_set"])
def test_a_drop1_made_active_after_the_build_takes_effect_in_training(change):
    """The GELU recompute skipped drop1, decided at build by its p: a drop1 replaced by ``nn.Dropout(0.5)`` or its p
    set to 0.5 after the build was never applied in training (two calls gave the same output)."""
    fast, reference = _pair()
    for model in (fast, reference):
        for block in _blocks(model):
            change(block.mlp)
    x = torch.randn(2, 3, 64, 64)
    outs = []
    for model in (fast, reference):
        torch.manual_seed(2)
        outs.append([_run(model, x, "train") for _ in range(2)])
    (out, again), (expected, expected_again) = outs
    assert not torch.allclose(expected, expected_again)  # the reference drops at random
    assert not torch.allclose(out, again)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)  # the same draws


@pytest.mark.parametrize("path", ["attn.proj_drop", "mlp.drop1", "drop_path2"])  # one rule checks all five
def test_a_module_not_a_dropout_at_a_dropout_takes_effect_in_eval(path):
    """The row blocks skip the dropouts (inactive in eval), checked for hooks only: a module of another class put
    there was skipped too."""
    fast, reference = _pair()
    x = torch.randn(2, 3, 64, 64)
    plain = _run(reference, x, "eval_no_grad")
    for model in (fast, reference):
        _replace(model, path, lambda _: Doubled())
    out, expected = _run(fast, x, "eval_no_grad"), _run(reference, x, "eval_no_grad")
    assert not torch.allclose(expected, plain, atol=1e-2)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


def test_a_model_built_with_dropout_keeps_its_fast_paths(monkeypatch):
    """Dropout is inactive in eval: the row blocks run; in training the gather runs (dropout called, not skipped)."""
    from swinlite.fast.blocks import FastMlp

    torch.manual_seed(0)
    fast = timm.create_model(TINY, **{**SMALL, "drop_path_rate": 0.1, "proj_drop_rate": 0.1})
    calls = []
    method = FastMlp.forward_row_blocks
    monkeypatch.setattr(FastMlp, "forward_row_blocks", lambda self, *a, **k: calls.append(1) or method(self, *a, **k))
    _run(fast, torch.randn(1, 3, 64, 64), "eval_no_grad")
    assert len(calls) == len(_blocks(fast))
    assert all(block.as_built() for block in _blocks(fast.train()))
