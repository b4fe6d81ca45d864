"""The Triton window attention (swinlite.fast.window_triton, a CUDA candidate) against the per-window loop of
tests/reference.py and, inside a fast block, against the reference block: values and gradients, on CPU through
Triton's interpreter.

Triton decides when a kernel is defined (at import) whether it compiles for a GPU or interprets with NumPy, so the
interpreted tests run in a fresh process started with ``TRITON_INTERPRET=1`` by the first test; in this process
they are skipped. The interpreter's ``tl.dot`` is wrong in bf16 (it reads the bits as another type), so the
reduced-precision path is tested in fp16, which takes the same code."""

import contextlib
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch
from blockkit import assert_fast_block_matches_reference
from reference import assert_attention_matches_loop, hand_written_mask, loop_window_attention

from swinlite.fast import accelerate, blocks, window_triton

triton = pytest.importorskip("triton")
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
interpreted = pytest.mark.skipif(not INTERPRETED, reason="runs in the interpreter's process (the first test)")
B, NW, H, N, HD = 2, 3, 2, 6, 4  # 6 tokens padded to 16, heads of 4 channels padded to 16


def kernel_values_and_gradients(out: torch.Tensor, qkv: torch.Tensor, bias: torch.Tensor) -> list[torch.Tensor]:
    """The kernel's output and, after a backward of :func:`upstream`, its gradients to qkv and the bias."""
    out.backward(upstream(out))
    return [out.detach(), qkv.grad, bias.grad]


def loop_in_fp32(
    out: torch.Tensor, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None
) -> list[torch.Tensor]:
    """What :func:`kernel_values_and_gradients` should give: the per-window loop in fp32 on the same values."""
    qkv32 = qkv.detach().float().requires_grad_()
    bias32 = bias.detach().float().requires_grad_()
    expected = loop_window_attention(qkv32, bias32, None if mask is None else mask.float())
    expected.backward(upstream(out).float())
    return [expected.detach(), qkv32.grad, bias32.grad]


def upstream(out: torch.Tensor) -> torch.Tensor:
    """The same random gradient for an output's shape, dtype and device every time."""
    generator = torch.Generator().manual_seed(1)
    return torch.randn(out.shape, generator=generator).to(out.device, out.dtype)


# The interpreter's pytest loads only what its 7 tests use: no xdist or conftest.py (the grouping of workers; one
# thread comes with the worker's OMP_NUM_THREADS), no cache, and no unraisable-exception plugin, whose gc.collect
# calls at exit over dynamo's heap cost over a second (it only warns): ~2-3 CPU s less than a full session.
UNUSED_PLUGINS = ("xdist", "cacheprovider", "unraisableexception", "threadexception")
UNUSED_PLUGINS += ("hypothesispytest", "benchmark", "anyio")
LEAN_PYTEST = ["-o", "addopts=", "--noconftest", *(arg for name in UNUSED_PLUGINS for arg in ("-p", f"no:{name}"))]


def test_the_kernels_in_triton_s_interpreter():
    if INTERPRETED:
        pytest.skip("this is the interpreter's process")
    root = Path(__file__).parents[2]
    command = [sys.executable, "-m", "pytest", "-q", __file__, "-k", "interpreted", *LEAN_PYTEST]
    result = subprocess.run(
        command, cwd=root, env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "7 passed" in result.stdout, result.stdout[-2000:]  # they ran, none skipped


@interpreted
def test_interpreted_kernel_matches_loop_in_values_and_gradients():
    """Without a mask; with one (-100 between shift regions, -inf on a padded key) the same fp32 kernel is checked
    against the loop by the non-contiguous and the compiled tests below."""
    torch.manual_seed(0)
    qkv = torch.randn(B * NW, N, 3, H, HD, requires_grad=True)
    bias = torch.randn(H, N, N, requires_grad=True)
    kernel = partial(window_triton.triton_window_attention, batch=B, scale=HD**-0.5)
    assert_attention_matches_loop(kernel, qkv, bias, None)


@interpreted
@pytest.mark.parametrize("with_mask", [False, True])
def test_interpreted_kernel_in_fp16_is_the_loop_to_fp16_rounding(with_mask):
    """fp16 q, k, v (bias fp32, mask fp16, as a block under autocast hands them): the fp32 loop on the same values,
    within fp16 rounding of the probabilities and outputs; the gradients too."""
    torch.manual_seed(0)
    qkv = torch.randn(B * NW, N, 3, H, HD).half().requires_grad_()
    bias = torch.randn(H, N, N, requires_grad=True)
    mask = hand_written_mask(NW, N).half() if with_mask else None
    out = window_triton.triton_window_attention(qkv, bias, mask, B, HD**-0.5)
    assert out.dtype == torch.float16 and out.shape == (B * NW, H, N, HD)
    for got, want in zip(kernel_values_and_gradients(out, qkv, bias), loop_in_fp32(out, qkv, bias, mask), strict=True):
        torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-2)


@interpreted
def test_interpreted_kernel_compiles_into_one_graph():
    """As the custom op it is, torch.compile (fullgraph, inductor) takes it, forward and backward: the loop's values
    and gradients."""
    torch.manual_seed(0)
    qkv = torch.randn(B * NW, N, 3, H, HD, requires_grad=True)
    bias = torch.randn(H, N, N, requires_grad=True)
    kernel = torch.compile(partial(window_triton.triton_window_attention, batch=B, scale=HD**-0.5), fullgraph=True)
    assert_attention_matches_loop(kernel, qkv, bias, hand_written_mask(NW, N))


@interpreted
def test_interpreted_kernel_takes_a_non_contiguous_projection():
    """qkv as the attention hands it may be any view; the result and gradients are those of its contiguous copy."""
    torch.manual_seed(0)
    wide = torch.randn(B * NW, N, 3, H, 2 * HD)
    qkv = wide[..., :HD].requires_grad_()  # heads at a stride of 2*HD
    bias = torch.randn(H, N, N, requires_grad=True)
    kernel = partial(window_triton.triton_window_attention, batch=B, scale=HD**-0.5)
    assert_attention_matches_loop(kernel, qkv, bias, hand_written_mask(NW, N))


@interpreted
def test_interpreted_block_through_triton_equals_the_reference_block(monkeypatch):
    """The Triton kernel as the table's choice for a block (shifted, padded 5x9 -> 8x12), values and gradients. The
    kernel gets the shift and padding mask here; an unshifted padded block hands it a padding mask alone, through
    the same call (that block's geometry is test_window_flex's and test_fast_block's)."""
    monkeypatch.setattr(blocks, "select_attention_kernel", lambda *args: "triton")
    assert_fast_block_matches_reference(shift=True)


@interpreted
def test_interpreted_kernel_passes_the_dispatch_s_check(monkeypatch, recwarn):
    """Through the "fastest" row, timed against the explicit formula: its output and gradients pass the comparison
    with the explicit formula (no warning, and it ran in every round: a candidate that fails it runs once). One
    window of one image: the interpreter runs every program of every round (the kernels' geometry, batches and
    windows, is the tests' above)."""
    from swinlite.fast import measured
    from swinlite.models.swin import WindowAttention

    monkeypatch.setattr(measured, "CHOICES", {})
    monkeypatch.setattr(blocks, "select_attention_kernel", lambda *args: "fastest")
    monkeypatch.setattr(blocks, "CUDA_CANDIDATES", ("explicit", "triton"))
    calls = []
    kernel = window_triton.triton_window_attention
    monkeypatch.setattr(window_triton, "triton_window_attention", lambda *a: calls.append(1) or kernel(*a))
    torch.manual_seed(0)
    layer = accelerate(WindowAttention(8, 2, (2, 3)))
    layer(torch.randn(1, 1, 6, 8)).sum().backward()
    assert len(calls) >= 4 and not [w for w in recwarn if "off the explicit formula" in str(w.message)]


FP32_POINTERS = {"bias", "lse", "grad_bias"}  # fp32 whatever the projections' dtype (the bias is the parameters')
DATA_POINTERS = {"qkv", "mask", "out", "grad_out", "grad_qkv"}  # in the projections' dtype


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("kernel", ["_forward_kernel", "_backward_kernel"])
def test_kernels_build_for_an_h200_without_one(kernel, dtype):
    """Triton's compiler takes each kernel down to an sm_90 cubin here (no GPU needed): what the interpreter does not
    check (types in ``tl.dot``, layouts) builds; 7x7 windows of 32-channel heads with a mask, within an H200's 227 KiB
    of shared memory per block."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(window_triton, kernel)
    qkv = torch.empty(1, 49, 3, 1, 32, dtype=torch.float32 if dtype == "fp32" else torch.bfloat16)
    sizes = window_triton._sizes(qkv)
    constexprs = {"HAS_MASK": True, "WINDOWS": window_triton.WINDOWS_PER_PROGRAM, **sizes}
    constexprs = {name: constexprs[name] for name in fn.arg_names if name in constexprs}

    def arg_type(name: str) -> str:
        if name in constexprs:
            return "constexpr"
        if name in FP32_POINTERS:
            return "*fp32"
        if name in DATA_POINTERS:
            return f"*{dtype}"
        return "fp32" if name == "scale" else "i32"

    signature = {name: arg_type(name) for name in fn.arg_names}
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": sizes["num_warps"]})
    assert compiled.asm["cubin"] and compiled.metadata.shared <= 227 * 1024


@pytest.mark.parametrize("device,current", [("cuda:1", [torch.device("cuda:1")]), ("cpu", [])])
def test_kernels_launch_on_their_tensors_gpu(monkeypatch, device, current):
    """Triton launches on the current device's stream: for tensors on cuda:1 (nothing called set_device) cuda:1 is
    made current around the launch; on the CPU (the interpreter) no device is switched. torch.cuda.device and the
    kernel are stand-ins that record which device is current."""
    devices = []

    @contextlib.contextmanager
    def cuda_device(gpu: torch.device):
        devices.append(gpu)
        yield
        devices.pop()

    monkeypatch.setattr(torch.cuda, "device", cuda_device)
    launches = []
    kernel = {(3, 1): lambda *args, **meta: launches.append((list(devices), args, meta))}  # kernel[grid](...)
    window_triton._launch(kernel, (3, 1), torch.device(device), "qkv", N=6)
    assert launches == [(current, ("qkv",), {"N": 6})] and not devices


@pytest.mark.skipif(INTERPRETED or not torch.cuda.is_available(), reason="needs a GPU (benchmarks/gpu_run.sh runs it)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_mask", [False, True])
def test_compiled_kernel_on_cuda_matches_loop(dtype, with_mask):
    """The kernels as the GPU compiles them, at Swin-T's window shape (49 tokens, 32-channel heads, 64 windows of 2
    images): values and gradients against the fp32 loop on the same values, fp32 to 1e-4, bf16 within 1 %."""
    torch.manual_seed(0)
    qkv = torch.randn(64, 49, 3, 3, 32, device="cuda").to(dtype).requires_grad_()
    bias = torch.randn(3, 49, 49, device="cuda", requires_grad=True)
    mask = hand_written_mask(32, 49).cuda().to(dtype) if with_mask else None
    out = window_triton.triton_window_attention(qkv, bias, mask, 2, 32**-0.5)
    for got, want in zip(kernel_values_and_gradients(out, qkv, bias), loop_in_fp32(out, qkv, bias, mask), strict=True):
        if dtype == torch.float32:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        else:  # bf16 storage rounds each value by up to 2**-8 of itself: compare the whole tensor
            assert (got.float() - want).norm() / want.norm() < 1e-2


def test_shapes_the_kernel_does_not_take_leave_it_out_of_the_timing():
    """Windows over MAX_TOKENS tokens, and a bias gradient under deterministic algorithms, raise NotImplementedError,
    which measured.fastest takes as "not a candidate"; before any kernel runs."""
    n = window_triton.MAX_TOKENS + 1
    with pytest.raises(NotImplementedError, match="at most"):
        window_triton.triton_window_attention(torch.zeros(1, n, 3, 1, 16), torch.zeros(1, n, n), None, 1, 0.25)
    bias = torch.zeros(1, N, N, requires_grad=True)
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(NotImplementedError, match="deterministic"):
            window_triton.triton_window_attention(torch.zeros(1, N, 3, 1, HD), bias, None, 1, 0.25)
    finally:
        torch.use_deterministic_algorithms(False)
