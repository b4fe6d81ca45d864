"""Modules a user replaces or hooks after the build take effect on the fast path as on the reference (timm's Swin
calls each module): a LoRA linear (a subclass of ``nn.Linear``), a PEFT-style wrapper, another activation, forward
hooks, in eval without autograd (the row blocks), eval with autograd and training (the gather, the GELU recompute)."""

import copy
from collections.abc import Callable

import pytest
import timm
import torch
from torch import nn
from torch.nn.utils import prune

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
    _quantizes_as_timms(ours, timms, torch.randn(2, 3, 64, 64))


def _quantizes_as_timms(ours: nn.Module, timms: nn.Module, x: torch.Tensor) -> None:
    """Both models' linears quantized dynamically: none left, the logits changed, and ours equal timm's."""
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


# --- Swin-V2's attn.qkv: its q, k, v projection adds the merged q, v bias to the call of the (bias-free) qkv ------

V2_PICO = "swinlite_v2_pico_patch2_window4_32"
V2_X = (2, 3, 32, 32)


def _v2(fast: bool) -> nn.Module:
    """The Swin-V2 pico, fast or ``fast=False``, with the same weights either way; its q and v biases (built zero)
    random, so that the merged bias counts, and its post-norms' weights (built zero) 1, so that attention counts."""
    torch.manual_seed(0)
    reference = timm.create_model(V2_PICO, fast=False)
    with torch.no_grad():
        for block in _blocks(reference):
            block.attn.q_bias.normal_(std=0.1)
            block.attn.v_bias.normal_(std=0.1)
            block.norm1.weight.fill_(1.0)
    if not fast:
        return reference
    model = timm.create_model(V2_PICO)
    model.load_state_dict(reference.state_dict())
    return model


def _set_qkv_weights(model: nn.Module, weights: list[torch.Tensor]) -> nn.Module:
    """``model`` with every block's attn.qkv weight set to ``weights`` (in block order): the hand-made reference."""
    with torch.no_grad():
        for block, weight in zip(_blocks(model), weights, strict=True):
            block.attn.qkv.weight.copy_(weight)
    return model


@pytest.mark.parametrize("mode", ["eval_no_grad", "train"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
def test_v2_qkv_forward_hooks_fire_and_take_effect(fast, mode):
    """Both paths read V2's attn.qkv weight: a forward hook on it never fired. One scaling its output channels by
    ``scale`` gives the model whose qkv weights' rows are so scaled (the merged bias is added after the call); not
    one factor for all: the cosine attention and the post-norm would cancel it."""
    model = _v2(fast)
    scales = [torch.linspace(0.5, 1.5, b.attn.qkv.out_features) for b in _blocks(model)]  # [3C] each
    weights = [s[:, None] * b.attn.qkv.weight for s, b in zip(scales, _blocks(model), strict=True)]
    expected_model = _set_qkv_weights(copy.deepcopy(model), weights)
    x = torch.randn(*V2_X)
    plain = _run(model, x, mode).detach()
    calls = []
    for block, scale in zip(_blocks(model), scales, strict=True):
        block.attn.qkv.register_forward_hook(lambda module, args, out, s=scale: calls.append(1) or out * s)
    out, expected = _run(model, x, mode), _run(expected_model, x, mode)
    assert len(calls) == len(_blocks(model))
    assert not torch.allclose(out, plain, atol=1e-3)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["eval_no_grad", "train"])
@pytest.mark.parametrize("adapter", [LoraLinear, WrappedWithWeight])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
def test_v2_qkv_adapters_take_effect(fast, adapter, mode):
    """A LoRA adapter on V2's attn.qkv (a subclass of ``nn.Linear``, or a wrapper exposing the base's weight) was
    ignored on both paths, its weight read: the model computes as one whose qkv weight is W + B·A, and its factors
    get gradients."""
    model = _v2(fast)
    expected_model = copy.deepcopy(model)
    x = torch.randn(*V2_X)
    plain = _run(model, x, mode).detach()
    torch.manual_seed(1)
    _replace(model, "attn.qkv", adapter)
    adapters = [block.attn.qkv for block in _blocks(model)]
    _set_qkv_weights(expected_model, [a.weight + a.lora_b @ a.lora_a for a in adapters])
    out, expected = _run(model, x, mode), _run(expected_model, x, mode)
    assert not torch.allclose(out, plain, atol=1e-3)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    if mode == "train":
        out.square().sum().backward()
        assert all(a.lora_b.grad is not None and a.lora_b.grad.abs().sum() > 0 for a in adapters)


@pytest.mark.parametrize("mode", ["eval_no_grad", "train"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
def test_v2_qkv_pruning_takes_effect(fast, mode):
    """``torch.nn.utils.prune`` on V2's attn.qkv: its forward pre-hook computes the weight from ``weight_orig`` and
    the mask on each call, which the paths that read the weight skipped: after ``weight_orig`` changed (as an
    optimizer step changes it) they computed with the stale weight. The model computes as one with the effective
    (masked) weight."""
    model = _v2(fast)
    expected_model = copy.deepcopy(model)
    for block in _blocks(model):
        prune.l1_unstructured(block.attn.qkv, "weight", amount=0.5)
        with torch.no_grad():
            block.attn.qkv.weight_orig.mul_(1.5)
    qkvs = [block.attn.qkv for block in _blocks(model)]
    _set_qkv_weights(expected_model, [qkv.weight_orig * qkv.weight_mask for qkv in qkvs])
    x = torch.randn(*V2_X)
    torch.testing.assert_close(_run(model, x, mode), _run(expected_model, x, mode), rtol=1e-4, atol=1e-4)


def test_quantize_dynamic_takes_effect_on_a_v2_reference_model():
    """docs/models.md: ``quantize_dynamic(model, {nn.Linear})`` quantizes a V2 model built with ``fast=False`` too
    (it failed: "linear(): argument 'weight' must be Tensor, not method", the quantized qkv's weight read): timm's
    SwinV2 of the same weights, quantized the same way and calling its qkv (``qkv_bias_separate``), to the V1
    test's tolerance."""
    if not {"fbgemm", "x86"} & set(torch.backends.quantized.supported_engines):
        pytest.skip("no quantized CPU engine")
    from timm.models.swin_transformer_v2 import SwinTransformerV2

    torch.manual_seed(0)
    timms = SwinTransformerV2(
        img_size=32, patch_size=2, embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8), window_size=4
    ).eval()
    timms.reset_classifier(10)
    for block in _blocks(timms):
        block.attn.qkv_bias_separate = True  # timm's SwinV2 then calls its qkv, and adds the merged bias after
        with torch.no_grad():
            block.attn.q_bias.normal_(std=0.1)
            block.attn.v_bias.normal_(std=0.1)
            block.norm1.weight.fill_(1.0)  # built zero: the attention would not count
    ours = timm.create_model(V2_PICO, fast=False).eval()
    ours.load_state_dict(timms.state_dict())
    x = torch.randn(*V2_X)
    with torch.no_grad():
        torch.testing.assert_close(timms(x), ours(x), rtol=1e-5, atol=1e-5)
    _quantizes_as_timms(ours, timms, x)


# --- attn.attn_drop: called on the attention weights, as timm's Swin calls it, or its rate read by its own mode ----

PICO = "swinlite_pico_patch2_window4_32"
PICO_X = (1, 3, 16, 16)


def _attention_dropout_model(name: str, fast: bool) -> nn.Module:
    """A pico model, V1 or V2, built with ``attn_drop_rate=0.5`` and no other dropout; V2's post-norms' weights
    (built zero) 1, so that its attention counts."""
    torch.manual_seed(0)
    model = timm.create_model(name, fast=fast, attn_drop_rate=0.5)
    if name == V2_PICO:
        with torch.no_grad():
            for block in _blocks(model):
                block.norm1.weight.fill_(1.0)
    return model


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("name", [PICO, V2_PICO], ids=["v1", "v2"])
def test_attn_drop_drops_by_its_own_mode(name, fast):
    """The rate was read while the attention module trained, whatever attn_drop's mode: MC dropout (the model in
    eval, its ``nn.Dropout`` modules in training) drew no attention dropout, and a model in training with its
    attn_drops in eval still dropped."""
    model = _attention_dropout_model(name, fast)
    x = torch.randn(*PICO_X)
    expected = _run(model, x, "eval_no_grad")
    for module in model.modules():
        if type(module) is nn.Dropout:
            module.train()
    with torch.no_grad():
        assert not torch.allclose(model(x), model(x))
    model.train()
    for block in _blocks(model):
        block.attn.attn_drop.eval()
    out, again = model(x), model(x)
    torch.testing.assert_close(out, again, rtol=0, atol=0)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("name", [PICO, V2_PICO], ids=["v1", "v2"])
def test_a_hooked_or_replaced_attn_drop_is_called(name, fast):
    """attn_drop was never called, only its ``p`` read: a forward hook on it never fired, and ``nn.Identity()`` in
    its place raised AttributeError ('p') in training. The hook sees the weights [B*nW, heads, N, N], as timm's."""
    model = _attention_dropout_model(name, fast)
    x = torch.randn(*PICO_X)
    expected = _run(model, x, "eval_no_grad")
    calls = _record_hooks(model, ["attn.attn_drop"])
    heads = [block.attn.num_heads for block in _blocks(model)]
    for mode in ("eval_no_grad", "train"):
        calls.clear()
        _run(model, x, mode)
        assert [(shape[1], shape[2] == shape[3]) for _, shape, _ in calls] == [(h, True) for h in heads]
    _replace(model, "attn.attn_drop", lambda _: nn.Identity())
    torch.testing.assert_close(_run(model, x, "train"), expected, rtol=1e-4, atol=1e-4)
