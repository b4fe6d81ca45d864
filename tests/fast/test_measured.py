"""Kernel choice by measurement (swinlite.fast.measured): the fastest candidate, timed once per key; the CUDA row of
the dispatch table ("fastest") runs it inside a fast attention layer, here on CPU."""

import time

import pytest
import timm
import torch
from pico import PICO

from swinlite.fast import accelerate, blocks, measured, v2
from swinlite.models.swin import WindowAttention, WindowAttentionV2

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch):
    monkeypatch.setattr(measured, "CHOICES", {})


def sleeper(seconds: float, calls: list[str], name: str):
    def run() -> None:
        calls.append(name)
        time.sleep(seconds)

    return run


def test_the_fastest_candidate_is_chosen_once_per_key():
    calls = []
    candidates = {"slow": sleeper(0.02, calls, "slow"), "fast": sleeper(0.0, calls, "fast")}
    assert measured.fastest("k", candidates, CPU, default="slow", repeats=2) == "fast"
    assert calls.count("slow") == calls.count("fast") == 3  # one warm-up, two timed
    assert measured.fastest("k", candidates, CPU, default="slow") == "fast"
    assert len(calls) == 6  # the second call reads the choice
    candidates = {"slow": sleeper(0.0, calls, "slow"), "fast": sleeper(0.02, calls, "fast")}
    assert measured.fastest("other", candidates, CPU, default="fast", repeats=1) == "slow"


def test_candidates_are_timed_in_turn():
    calls = []
    candidates = {"a": sleeper(0.0, calls, "a"), "b": sleeper(0.01, calls, "b")}
    assert measured.fastest_now(candidates, CPU, repeats=3) == "a"
    assert calls == ["a", "b"] * 4  # a warm-up round, then three timed rounds of every candidate


def test_a_failing_candidate_is_left_out_and_nothing_is_timed_while_tracing(monkeypatch):
    def unsupported() -> None:
        raise RuntimeError("no kernel for this shape")

    candidates = {"broken": unsupported, "works": lambda: None}
    assert measured.fastest("k", candidates, CPU, default="broken") == "works"
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert measured.fastest("k", candidates, CPU, default="broken") == "works"  # measured before: reused
    assert measured.fastest("new", candidates, CPU, default="broken") == "broken"  # not measured: the default
    assert "new" not in measured.CHOICES


def test_a_candidate_that_fails_after_its_warm_up_is_left_out():
    """E.g. out of memory in a timed round, with another candidate's memory still held."""
    calls = []

    def fails_second_time() -> None:
        calls.append("flaky")
        if len(calls) > 1:
            raise torch.OutOfMemoryError("out of memory")

    candidates = {"flaky": fails_second_time, "slow": sleeper(0.01, [], "slow")}
    assert measured.fastest_now(candidates, CPU, repeats=3) == "slow"
    assert calls == ["flaky", "flaky"]  # warm-up, then the first timed round; no further rounds
    assert measured.fastest_now({"flaky": fails_second_time}, CPU) is None


@pytest.mark.parametrize("grad", [False, True])
def test_fastest_row_runs_the_measured_kernel_and_computes_the_reference(monkeypatch, grad):
    """The layer times explicit and SDPA attention (flex left out: no CPU backward), runs the winner, and
    computes what the reference layer computes."""
    monkeypatch.setattr(blocks, "select_attention_kernel", lambda *args: "fastest")
    monkeypatch.setattr(blocks, "CUDA_CANDIDATES", ("explicit", "sdpa"))
    torch.manual_seed(0)
    reference = WindowAttention(8, 2, (2, 3))
    fast = accelerate(WindowAttention(8, 2, (2, 3)))
    fast.load_state_dict(reference.state_dict())
    x = torch.randn(2, 3, 6, 8)
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-5, atol=1e-5)
    ((key, choice),) = measured.CHOICES.items()
    assert choice in ("explicit", "sdpa") and key[-2] == grad  # timed with its backward when training


@pytest.mark.parametrize("name", [PICO, "swinlite_v2_pico_patch2_window4_32"])
def test_a_first_step_under_gradient_checkpointing_equals_the_plain_one(monkeypatch, name):
    """CUDA's "fastest" row times its kernels, each with a backward, on the first call of a shape: inside a
    checkpointed stage the trials' saved tensors were counted in the forward and not in the recomputation (the choice
    made by then): "A different number of tensors was saved during the original forward and recomputation"; their
    dropout draws shifted the caller's. Simulated on the CPU."""
    monkeypatch.setattr(blocks, "select_attention_kernel", lambda *args: "fastest")
    monkeypatch.setattr(blocks, "CUDA_CANDIDATES", ("explicit", "sdpa"))
    grads = []
    for checkpointing in (False, True):
        measured.CHOICES.clear()  # each run's first step times the kernels
        torch.manual_seed(0)
        model = timm.create_model(name, num_classes=3, attn_drop_rate=0.3).train()
        model.set_grad_checkpointing(checkpointing)
        model(torch.randn(2, 3, 32, 32)).logsumexp(1).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-6)


class _DoubledGradient(torch.autograd.Function):
    """The identity whose backward doubles the gradient: a kernel right forward and wrong backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return 2 * grad


@pytest.mark.parametrize("wrong", ["out", "qkv"])
def test_a_fast_candidate_with_other_values_is_not_chosen(monkeypatch, wrong):
    """A kernel that is fast but wrong on this device (here SDPA made to drop the bias, or to double its gradient) is
    left out with a warning naming it and what is off, and the layer still computes the reference's values and
    gradients."""
    monkeypatch.setattr(blocks, "select_attention_kernel", lambda *args: "fastest")
    monkeypatch.setattr(blocks, "CUDA_CANDIDATES", ("explicit", "sdpa"))
    sdpa = blocks.window_sdpa.sdpa_window_attention
    if wrong == "out":
        broken = lambda qkv, bias, *a: sdpa(qkv, torch.zeros_like(bias), *a)  # noqa: E731
    else:
        broken = lambda *a: _DoubledGradient.apply(sdpa(*a))  # noqa: E731
    monkeypatch.setattr(blocks.window_sdpa, "sdpa_window_attention", broken)
    explicit = blocks.window_attention

    def slow_explicit(*args):
        time.sleep(0.02)  # the wrong kernel would win on time
        return explicit(*args)

    monkeypatch.setattr(blocks, "window_attention", slow_explicit)
    torch.manual_seed(0)
    reference = WindowAttention(8, 2, (2, 3))
    with torch.no_grad():
        reference.rel_pos.table.normal_()  # a bias that matters
    fast = accelerate(WindowAttention(8, 2, (2, 3)))
    fast.load_state_dict(reference.state_dict())
    x = torch.randn(2, 3, 6, 8)
    with pytest.warns(UserWarning, match=f"sdpa window attention's {wrong} is .* off the explicit formula's"):
        out = fast(x)
    torch.testing.assert_close(out, reference(x), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    reference(x).sum().backward()
    for a, b in zip(fast.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    assert list(measured.CHOICES.values()) == ["explicit"]


def test_candidates_are_compared_with_the_formula_in_fp32_under_autocast(monkeypatch):
    """Under bf16 autocast the candidates run in bf16, the formula they are compared with in fp32 (autocast off)."""
    monkeypatch.setattr(blocks, "select_attention_kernel", lambda *args: "fastest")
    monkeypatch.setattr(blocks, "CUDA_CANDIDATES", ("explicit", "sdpa"))
    explicit, calls = blocks.window_attention, []

    def spy(qkv, *args):
        calls.append((qkv.dtype, torch.is_autocast_enabled("cpu")))
        return explicit(qkv, *args)

    monkeypatch.setattr(blocks, "window_attention", spy)
    layer = accelerate(WindowAttention(8, 2, (2, 3)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layer(torch.randn(2, 3, 6, 8))
    assert (torch.float32, False) in calls and (torch.bfloat16, True) in calls  # the check; the explicit candidate
    assert (torch.float32, True) not in calls


@pytest.mark.parametrize("grad", [False, True])
def test_swin_v2_fastest_row_times_its_two_kernels_and_computes_the_reference(monkeypatch, grad):
    """Swin-V2's cosine attention on the "fastest" row: explicit or SDPA of (q·τ/|q|, k/|k|, v), timed, the
    reference's values and gradients; the timing's backward adds nothing to the parameters' gradients (τ's
    included)."""
    monkeypatch.setattr(blocks, "select_attention_kernel", lambda *args: "fastest")  # V1 and V2 dispatch there
    torch.manual_seed(0)
    reference = WindowAttentionV2(8, 2, (2, 3))
    fast = accelerate(WindowAttentionV2(8, 2, (2, 3)))
    fast.load_state_dict(reference.state_dict())
    x = torch.randn(2, 3, 6, 8)
    with torch.set_grad_enabled(grad):
        out, expected = fast(x), reference(x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    ((key, choice),) = measured.CHOICES.items()
    assert key[0] == "cosine window attention" and choice in v2.CUDA_CANDIDATES and key[-2] == grad
    if grad:
        out.sum().backward()
        expected.sum().backward()
        for a, b in zip(fast.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
