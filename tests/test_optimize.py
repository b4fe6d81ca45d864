"""optimize_for_inference: a compiled callable computing the model's function (or the eager model, where that ran the
example faster), and one clear error in train mode."""

import copy
import time

import pytest
import timm
import torch
from torch._dynamo.utils import counters

import swinlite


def _small_model(depth: int = 1) -> torch.nn.Module:
    # one stage of one block (W-MSA), or of two (W-MSA, then SW-MSA): small enough to compile in seconds
    return timm.create_model("swinlite_pico_patch2_window4_32", depths=(depth,), num_heads=(1,)).eval()


def test_optimized_model_matches_eager_compiles_once_per_size_and_says_eager_past_the_recompile_limit(monkeypatch):
    """The compiled path (served whatever the timing says): eager's outputs, one graph per size, and the weights of
    the call (inductor's frozen graph read the live tensors it did not fold: an in-place change reached it).

    Then each call compiles a copy of the model, and after ``recompile_limit`` compiles (here this test's one) dynamo
    runs the forward eagerly: the callable said ``path == "compiled"`` (and could be timed the faster of two eager
    runs) without a graph; it says eager, with a warning, and computes the model's function."""
    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr("swinlite.optimize.fastest_now", lambda candidates, *args, **kwargs: "compiled")
    model = _small_model(depth=2)  # the one inductor compile of a shifted block here: the others take one block
    x = torch.randn(2, 3, 12, 10)  # 6x5 tokens: padded to 8x8 windows, shifted
    fn = swinlite.optimize_for_inference(model, x)
    assert fn.path == "compiled" and counters["stats"]["unique_graphs"] == 1
    y = torch.randn_like(x)
    with torch.inference_mode():
        expected = model(y)
    out = fn(y)
    assert out.shape == (2, 10) and not out.requires_grad
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    assert counters["stats"]["unique_graphs"] == 1  # same shape, new values: no recompile
    with torch.inference_mode():  # an inference tensor (FixedBatch pads under inference_mode): no recompile either
        z = torch.randn_like(x)
        torch.testing.assert_close(fn(z), model(z), atol=1e-4, rtol=1e-4)
    assert counters["stats"]["unique_graphs"] == 1
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(0.5)
    torch.testing.assert_close(fn(y), expected, atol=1e-4, rtol=1e-4)
    with torch._dynamo.config.patch(recompile_limit=1), pytest.warns(UserWarning, match="recompile_limit"):
        fn = swinlite.optimize_for_inference(model, x)
    assert fn.path == "eager"
    with torch.inference_mode():
        torch.testing.assert_close(fn(x), model(x))
    torch._dynamo.reset()


def test_a_float64_model_compiles_on_the_cpu(monkeypatch):
    """Inductor's oneDNN weight packing takes no float64 weights: freezing a float64 model failed inside inductor,
    whatever ``cpp.weight_prepack`` said once the process had frozen a float32 graph (as here first: a Linear, the
    cheapest graph to freeze, sets that state as a convolution does)."""
    monkeypatch.setattr("swinlite.optimize.fastest_now", lambda candidates, *args, **kwargs: "compiled")
    with torch._inductor.config.patch(freezing=True), torch.inference_mode():
        torch.compile(torch.nn.Linear(3, 4).eval())(torch.randn(2, 3))
    model = _small_model().double()
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    fn = swinlite.optimize_for_inference(model, x)
    with torch.inference_mode():
        torch.testing.assert_close(fn(x), model(x), atol=1e-12, rtol=1e-12)


def test_built_under_bf16_autocast_it_checks_at_bf16s_tolerance(monkeypatch):
    """Under autocast the model computes in bf16 whatever the input's dtype: the check took fp32's 1e-4 from the
    input and refused a graph one bf16 step (2e-3) from eager."""
    monkeypatch.setattr("swinlite.optimize.fastest_now", lambda candidates, *args, **kwargs: "compiled")
    torch.manual_seed(0)
    model, x = _small_model(), torch.randn(2, 3, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fn = swinlite.optimize_for_inference(model, x)
        with torch.inference_mode():
            torch.testing.assert_close(fn(x), model(x), atol=1e-2, rtol=1e-2)


def _slow(fn):
    def run(*args):
        time.sleep(0.05)
        return fn(*args)

    return run


def _counted(fn):
    """``fn`` as a stand-in for a compiled callable: its call counts as a graph compiled, as dynamo's would."""

    def run(*args):
        counters["stats"]["unique_graphs"] += 1
        return fn(*args)

    return run


@pytest.mark.parametrize("slower", ["compiled", "eager"])
def test_the_faster_path_serves_with_the_weights_of_the_call(monkeypatch, slower):
    """The compiled graph and the eager model are timed on the example and the faster serves; either way a later
    change to the model's weights does not reach the callable. (torch.compile is replaced by a copy of the model,
    made slow or left as is: what is tested is the choice, not inductor.)"""
    model = _small_model()
    compiled = copy.deepcopy(model)
    monkeypatch.setattr(
        torch, "compile", lambda m, **kwargs: _counted(_slow(compiled) if slower == "compiled" else compiled)
    )
    if slower == "eager":
        model.register_forward_pre_hook(lambda module, args: time.sleep(0.05))
    x = torch.randn(2, 3, 12, 10)
    with torch.inference_mode():
        expected = model(x)
    fn = swinlite.optimize_for_inference(model, x)
    assert fn.path == ("eager" if slower == "compiled" else "compiled")
    with torch.no_grad():
        model.head.fc.weight.mul_(2.0)  # the compiled graph froze the old weights; the eager path runs a copy of them
    torch.testing.assert_close(fn(x), expected)


def test_a_compiled_graph_that_differs_from_eager_is_refused(monkeypatch):
    """(torch.compile replaced by a copy of the model one off from it: what is tested is the check, not inductor.)"""
    model, x = _small_model(), torch.randn(2, 3, 8, 8)
    off = copy.deepcopy(model)
    monkeypatch.setattr(torch, "compile", lambda m, **kwargs: _counted(lambda images: off(images) + 1))
    with pytest.raises(RuntimeError, match=r"^the compiled model's output differs from eager beyond 0.0001: "):
        swinlite.optimize_for_inference(model, x)
    assert swinlite.optimize_for_inference(model, x, check=False).path in ("compiled", "eager")


def test_model_in_training_mode_is_rejected():
    with pytest.raises(ValueError, match="eval"):
        swinlite.optimize_for_inference(_small_model().train(), torch.randn(1, 3, 8, 8))
    model = _small_model().eval()
    model.layers[0].train()  # the model's own flag says eval: a compiled graph of its dropout passed
    with pytest.raises(ValueError, match=r"eval mode \(its layers\.0 is in training mode\)"):
        swinlite.optimize_for_inference(model, torch.randn(1, 3, 8, 8))


@pytest.mark.parametrize(
    "device,mode,expected,graphs",
    [
        ("cuda", None, "reduce-overhead", True),  # CUDA graphs by default on CUDA
        ("cuda", "max-autotune-no-cudagraphs", "max-autotune-no-cudagraphs", False),
        ("cpu", None, None, False),
        ("cpu", "reduce-overhead", "reduce-overhead", False),  # no CUDA graph on the CPU whatever the mode
    ],
)
def test_cuda_compiles_to_cuda_graphs_by_default(device, mode, expected, graphs):
    from swinlite.optimize import compile_mode, uses_cuda_graphs

    assert compile_mode(device, mode) == expected
    assert uses_cuda_graphs(device, compile_mode(device, mode)) is graphs
