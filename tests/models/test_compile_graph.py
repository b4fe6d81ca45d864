"""torch.compile traces a whole swinlite model, fast or reference, into one graph, in eval and in training (dynamo
only, no codegen), and inductor compiles it where the fp32 linears take oneDNN in eager mode."""

import sys
import warnings
from collections.abc import Callable

import pytest
import timm
import torch
from torch.fx.experimental.symbolic_shapes import has_static_value

import swinlite  # noqa: F401  (registers the models)
from swinlite.fast import blocks, linear_grad
from swinlite.fast.row_blocks import ONEDNN_LINEAR, onednn_linear
from swinlite.models.swin import SwinBlock, exporting, window_geometry


def test_symbolic_sizes_build_the_cut_windows_bias_index_in_the_graph():
    """Under ``torch.compile(dynamic=True)`` a window cut to a small map computes what eager does, without dynamo
    tracing through the eager cache's ``lru_cache`` (a warning). (H and W are static under compile since
    ``compile_at_image_size``; ``torch.export`` is where the cut window's sides stay symbolic.)"""
    torch._dynamo.reset()
    model = _one_stage().eval()
    compiled = torch.compile(model, backend="eager", dynamic=True)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(2, 3, 6, 4)  # a 3x2 map under 4x4 windows
        torch.testing.assert_close(compiled(x), model(x))
    assert not [str(w.message) for w in caught if "lru_cache" in str(w.message)]


def test_export_is_told_by_the_flag_torch_export_sets(monkeypatch):
    """Before torch 2.14 dynamo answered ``torch.compiler.is_exporting()`` with True under ``torch.compile`` too
    (pytorch/pytorch#176347): compiled models took the symbolic path of an export, a graph break per block on torch
    2.11. ``exporting()`` reads the flag ``torch.export`` sets instead (True inside an export: tests/test_export.py)."""
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)
    assert not exporting()
    monkeypatch.setattr(torch.compiler, "_is_exporting_flag", True)
    assert exporting()


@pytest.mark.parametrize("name", ["swinlite_pico_patch2_window4_32", "swinlite_v2_pico_patch2_window4_32"])
def test_strict_export_at_a_static_size_equals_eager(name):
    """Dynamo's strict export refused ``torch.sym_ite`` of the plain bool a static size gives the shift's choice
    ("Unsupported torch.* op returned non-Tensor"), for every model."""
    torch.manual_seed(0)
    model = timm.create_model(name, depths=(2,), num_heads=(1,)).eval()  # W-MSA, then SW-MSA
    x = torch.randn(2, 3, 32, 32)
    exported = torch.export.export(model, (x,), strict=True).module()
    with torch.no_grad():
        torch.testing.assert_close(exported(x), model(x))


@pytest.mark.parametrize("fast", [True, False])
def test_compiled_training_does_not_ask_whether_autocast_exists(monkeypatch, fast):
    """Dynamo before torch 2.14 cannot trace ``torch.amp.is_autocast_available`` (a graph break in every MLP of a
    training step on torch 2.11): made to fail here, a compiled training step still traces into one graph and
    computes eager's values. (So it is test_compiled_graph_is_one_graph_taking_masks_and_indices_from_the_cache in
    training mode too: fullgraph=True refuses any graph break, and the recording backend counts the graphs.)"""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _two_stages(fast=fast).train()
    x = torch.randn(2, 3, 36, 28)
    torch.manual_seed(1)
    expected = model(x)

    def not_traceable(device_type: str) -> bool:
        raise AssertionError("torch.amp.is_autocast_available called under torch.compile")

    graphs: list[torch.fx.GraphModule] = []
    compiled = torch.compile(model, backend=_recording(graphs), fullgraph=True, dynamic=False)
    monkeypatch.setattr(torch.amp, "is_autocast_available", not_traceable)
    torch.manual_seed(1)
    torch.testing.assert_close(compiled(x), expected)
    assert len(graphs) == 1


def _blocks_with_a_mask(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Blocks whose window geometry at their input size has a mask, counted on an eager run."""
    sizes = []

    def record(block: torch.nn.Module, args: tuple) -> None:
        sizes.append((block, tuple(args[0].shape[1:3])))

    hooks = [b.register_forward_pre_hook(record) for b in _blocks(model)]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    cpu = torch.device("cpu")

    def window(block: torch.nn.Module, size: tuple[int, int]) -> tuple[int, int]:  # the fast blocks cut theirs
        return block._attention_window(*size) if hasattr(block, "_attention_window") else block.window

    return sum(window_geometry(s, window(b, s), b.shift, b.mask_padding, cpu).mask is not None for b, s in sizes)


def _blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if isinstance(m, SwinBlock)]


def _recording(graphs: list[torch.fx.GraphModule]) -> Callable:
    """A dynamo backend that keeps each graph it is given in ``graphs`` and runs it as traced."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append(gm)
        return gm.forward

    return backend


@pytest.mark.parametrize("fast", [True, False])
def test_compiled_graph_is_one_graph_taking_masks_and_indices_from_the_cache(fast):
    """In eval mode the model traces into one graph without a break (fullgraph=True refuses any; training:
    test_compiled_training_does_not_ask_whether_autocast_exists). On the CPU at static sizes the graph calls the
    cache's ops instead of building each mask (and each gather index) from an arange, which inductor would recompute
    inside the kernels reading them on every call. fp32 inference attends as eager does (bf16:
    test_compiled_cpu_inference_attends_as_eager)."""
    torch._dynamo.reset()
    model = _two_stages(fast=fast).eval()
    x = torch.randn(2, 3, 36, 28)  # padded windows at every stage, a shift in the second
    graphs: list[torch.fx.GraphModule] = []
    backend = _recording(graphs)

    with torch.no_grad():
        out = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)(x)
        expected = model(x)
    torch.testing.assert_close(out, expected)
    (graph,) = graphs
    calls = [n for n in graph.graph.nodes if n.op == "call_function"]
    targets = [str(n.target) for n in calls]
    assert targets.count("swinlite.window_mask") == _blocks_with_a_mask(model, x) > 0
    assert targets.count("swinlite.shifted_window_index") == (len(_blocks(model)) if fast else 0)
    assert not [t for t in targets if "masked_fill" in t]  # no mask built in the graph
    if fast:
        _assert_attends_as_eager(model, calls, torch.float32)


def test_cache_ops_agree_with_their_fake_kernels():
    cpu = torch.device("cpu")
    for dtype in (torch.float32, torch.bfloat16):
        torch.library.opcheck(torch.ops.swinlite.window_mask.default, ([7, 9], [4, 4], [2, 2], True, cpu, dtype))
    torch.library.opcheck(torch.ops.swinlite.shifted_window_index.default, ([8, 12], [4, 4], [2, 2], cpu))


def test_compiled_cpu_inference_attends_as_eager():
    """CPU inference attends through SDPA's flash kernel in fp32 and the explicit softmax in bf16 (the flash kernel on
    CPUs with AMX), compiled as in eager mode (the faster one in each: benchmarks/kernels.md, "CPU bf16 inference"),
    with the cached mask in its dtype. bf16 here; fp32 in
    test_compiled_graph_is_one_graph_taking_masks_and_indices_from_the_cache (the same model, fast, in fp32)."""
    torch._dynamo.reset()
    dtype = torch.bfloat16
    model = _two_stages().eval().to(dtype)
    graphs: list[torch.fx.GraphModule] = []
    backend = _recording(graphs)

    with torch.no_grad():
        torch.compile(model, backend=backend, dynamic=False)(torch.randn(2, 3, 36, 28, dtype=dtype))  # masks
    _assert_attends_as_eager(model, [n for n in graphs[0].graph.nodes if n.op == "call_function"], dtype)


def _assert_attends_as_eager(model: torch.nn.Module, calls: list[torch.fx.Node], dtype: torch.dtype) -> None:
    """Every block of the graph's ``calls`` attends through SDPA's flash kernel where ``dtype`` takes it on this CPU,
    with the cache's mask in ``dtype`` (no conversion per call)."""
    flash = sum("scaled_dot_product_attention" in str(n.target) for n in calls)
    assert flash == (len(_blocks(model)) if dtype in blocks.CPU_FLASH_DTYPES else 0)
    masks = [n.meta["example_value"].dtype for n in calls if str(n.target) == "swinlite.window_mask"]
    assert masks and set(masks) == {dtype}


def _two_stages(**kwargs) -> torch.nn.Module:
    # the pico model cut to two stages (an unshifted block, a patch merging, an unshifted and a shifted block): all
    # its kinds of module, from the patch embedding to the head, and 3 blocks for dynamo to trace instead of 5
    return timm.create_model("swinlite_pico_patch2_window4_32", depths=(1, 2), num_heads=(1, 2), **kwargs)


def _one_stage() -> torch.nn.Module:
    # one stage of two blocks (W-MSA, then SW-MSA): compiled by inductor in seconds
    torch.manual_seed(0)
    return timm.create_model("swinlite_pico_patch2_window4_32", depths=(2,), num_heads=(1,))


def _one_block() -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model("swinlite_pico_patch2_window4_32", depths=(1,), num_heads=(1,))


@pytest.mark.skipif(not ONEDNN_LINEAR, reason="PyTorch built without oneDNN")
def test_a_compiled_train_step_takes_the_onednn_linears_as_eager_does(monkeypatch):
    """Where the fp32 linears take oneDNN in eager mode (AMD CPUs: the rule forced on here, on any CPU), inductor
    without freezing cannot lower oneDNN's linear op (its weight is a graph input, not a constant): the compiled
    training graph calls every linear and its input gradient through the ops ``swinlite::onednn_linear`` and
    ``swinlite::onednn_input_grad``, as often as eager mode calls oneDNN, and computes eager's output and gradients
    (with ``F.linear`` there, it ran PyTorch's BLAS, the slower on those CPUs)."""
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", True)
    monkeypatch.setattr(linear_grad, "ONEDNN_INPUT_GRAD_ROWS", 0)  # the input gradients through oneDNN at any size
    calls = []

    def spy(*args, **kwargs):
        calls.append(sys._getframe(1).f_code.co_name)
        return onednn_linear(*args, **kwargs)

    monkeypatch.setattr(linear_grad, "onednn_linear", spy)
    torch._dynamo.reset()
    # the linears are those of any block: one block alone, unshifted (no patch embedding, norm or head around it),
    # keeps inductor's kernels few
    model = _one_block().layers[0].blocks[0].train()
    x = torch.randn(2, 4, 4, model.norm1.normalized_shape[0])  # 4x4 tokens: one window
    out = torch.compile(model, backend="inductor", fullgraph=True, dynamic=False)(x)
    out.square().sum().backward()
    compiled, got = list(calls), {name: p.grad for name, p in model.named_parameters()}
    model.zero_grad()
    calls.clear()
    expected = model(x)
    expected.square().sum().backward()
    linears, mlps = sum(isinstance(m, torch.nn.Linear) for m in model.modules()), len(_blocks(model))
    assert sorted(compiled) == ["_linear_op"] * linears + ["onednn_input_grad"] * linears
    assert sorted(calls) == ["forward"] * (linears - mlps) + ["onednn_input_grad"] * linears + ["traced_linear"] * mlps
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    for name, p in model.named_parameters():
        torch.testing.assert_close(got[name], p.grad, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.skipif(not ONEDNN_LINEAR, reason="PyTorch built without oneDNN")
@pytest.mark.parametrize("frozen", [False, True])
def test_only_a_frozen_graph_takes_onednn_linears(monkeypatch, frozen):
    """The graph ``optimize_for_inference`` compiles (inductor's freezing, no autograd) keeps oneDNN's linear op, whose
    weight freezing makes a constant (benchmarks/kernels.md, "`optimize_for_inference` on CPU"); any other compiled
    graph has none: there every linear is the op ``swinlite::onednn_linear``, which inductor calls as it is."""
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", True)
    torch._dynamo.reset()
    model = _one_stage().eval()
    graphs: list[torch.fx.GraphModule] = []
    backend = _recording(graphs)

    with torch._inductor.config.patch(freezing=frozen), torch.inference_mode():
        torch.compile(model, backend=backend, dynamic=False)(torch.randn(2, 3, 12, 10))
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert targets.count("mkldnn._linear_pointwise") == (linears if frozen else 0)
    assert targets.count("swinlite.onednn_linear.default") == (0 if frozen else linears)


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_new_image_size_is_traced_at_static_height_and_width(dynamic):
    """A graph serves one image size (every block's padding, shift and window cut are Python decisions on its map
    size), so a new size, under automatic dynamic shapes (``dynamic=None``) or with ``dynamic=True``, is traced with H
    and W static and the geometry read from the cache; the batch is left to dynamo. Traced with symbolic H and W, sympy
    reasoned about nested ceil divisions of them in every view and guard: a second odd size took minutes to trace."""
    torch._dynamo.reset()
    model = _one_stage().eval()
    graphs: list[torch.fx.GraphModule] = []
    backend = _recording(graphs)

    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    with torch.no_grad():
        for size in ((32, 32), (27, 41)):  # 27x41: a 14x21 map, padded to 16x24 windows
            x = torch.randn(2, 3, *size)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    assert len(graphs) == 2  # one per size
    for graph in graphs:
        nodes = list(graph.graph.nodes)
        (images,) = [n.meta["example_value"] for n in nodes if n.op == "placeholder" and n.name == "l_x_"]
        assert has_static_value(images.shape[2]) and has_static_value(images.shape[3])  # H and W
        assert has_static_value(images.shape[0]) != bool(dynamic)  # the batch as dynamo chose
    targets = [str(n.target) for n in graphs[1].graph.nodes if n.op == "call_function"]
    assert "swinlite.window_mask" in targets  # the mask from the cache, not built in the graph
