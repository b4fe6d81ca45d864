"""The dispatch table of swinlite.fast.blocks, row by row, and what a block runs in each situation."""

import pytest
import torch

from swinlite.fast import FastWindowAttention, accelerate
from swinlite.fast import blocks as dispatch
from swinlite.fast.blocks import select_attention_kernel
from swinlite.models import swin
from swinlite.models.swin import WindowAttention

F32, BF16 = torch.float32, torch.bfloat16


@pytest.fixture(autouse=True)
def recomputed_kernel_cpu(monkeypatch):
    """The table's rows as on a CPU where fp32 training takes the recomputed kernel (every capability but AVX2, e.g.
    the AVX-512 Xeon measured) and bf16 inference the explicit softmax (no AMX); the AVX2 row and the AMX one have
    their own tests."""
    monkeypatch.setattr(dispatch, "RECOMPUTED_ON_THIS_CPU", True)
    monkeypatch.setattr(dispatch, "CPU_FLASH_DTYPES", dispatch.cpu_flash_dtypes(amx=False))


@pytest.mark.parametrize(
    "device,dtype,bias_grad,dropout,expected",
    [
        ("cpu", F32, False, False, "sdpa"),  # eval / no_grad / frozen bias
        ("cpu", BF16, False, False, "explicit"),  # ... in bf16, where the CPU flash kernel is the slower one
        ("meta", BF16, False, False, "sdpa"),  # (a rule of the CPU only)
        ("cpu", F32, True, False, "recomputed"),  # CPU fp32 train
        ("cpu", F32, True, True, "explicit"),  # ... with attention dropout
        ("cpu", BF16, True, False, "explicit"),  # CPU bf16 train
        ("cuda", BF16, False, False, "fastest"),  # CUDA: measured per shape (test_measured.py)
        ("cuda", F32, True, False, "fastest"),
        ("cuda", BF16, True, True, "fastest"),
        ("meta", F32, True, False, "sdpa"),  # another device
    ],
)
def test_dispatch_table(device, dtype, bias_grad, dropout, expected):
    assert select_attention_kernel(device, dtype, bias_grad, dropout) == expected


@pytest.fixture
def deterministic_algorithms():
    """torch's deterministic algorithms on for the test (``train.deterministic``), the previous setting after."""
    previous = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])


@pytest.mark.parametrize("dtype,bias_grad,dropout", [(BF16, False, False), (F32, True, False), (BF16, True, True)])
def test_deterministic_cuda_runs_a_fixed_kernel(deterministic_algorithms, dtype, bias_grad, dropout):
    """Under deterministic algorithms CUDA does not time its kernel (a choice resume.pt does not keep, which another
    run or rank can make otherwise): the explicit formula, as on the CPU rows that train; the CPU rows unchanged."""
    assert select_attention_kernel("cuda", dtype, bias_grad, dropout) == "explicit"
    assert select_attention_kernel("cpu", F32, True, False) == "recomputed"


@pytest.mark.parametrize("device,grad", [("cpu", True), ("cpu", False), ("meta", True)])
def test_fast_false_is_the_reference_everywhere(monkeypatch, device, grad):
    """fast=False (the first row): the reference layer makes no kernel choice; it runs the explicit formula
    whatever the device or grad mode (the meta device stands in for a non-CPU one)."""
    calls = []
    explicit = swin.window_attention
    monkeypatch.setattr(swin, "window_attention", lambda *args: calls.append("explicit") or explicit(*args))
    monkeypatch.setattr(dispatch, "select_attention_kernel", lambda *args: calls.append("dispatch") or "sdpa")
    attn = WindowAttention(8, 2, (2, 3), device=device)
    with torch.set_grad_enabled(grad):
        attn(torch.randn(2, 3, 6, 8, device=device))
    assert calls == ["explicit"]


def test_cpu_fp32_training_is_explicit_where_pytorch_vectorises_with_avx2(monkeypatch):
    """benchmarks/kernels.md: on an AMD EPYC without AVX-512 the recomputed kernel's train step is the slower one."""
    monkeypatch.undo()  # this machine's own value first
    assert dispatch.RECOMPUTED_ON_THIS_CPU is (torch.backends.cpu.get_cpu_capability() != "AVX2")
    monkeypatch.setattr(dispatch, "RECOMPUTED_ON_THIS_CPU", False)
    assert dispatch.select_attention_kernel("cpu", F32, True, False) == "explicit"
    assert dispatch.select_attention_kernel("cpu", F32, False, False) == "sdpa"  # inference is unchanged


def test_without_the_private_cpu_flash_op_cpu_training_is_explicit(monkeypatch):
    monkeypatch.setattr(dispatch.window_sdpa, "CPU_FLASH_WITH_LSE", False)
    assert select_attention_kernel("cpu", F32, True, False) == "explicit"


def test_torchscript_runs_sdpa_or_explicit():
    scripted = torch.jit.script(select_attention_kernel)
    assert scripted("cpu", F32, False, False) == "sdpa"
    assert scripted("cpu", F32, True, False) == "explicit"  # no autograd Functions in TorchScript
    assert scripted("cuda", F32, True, False) == "sdpa"  # nothing is timed in TorchScript


@pytest.mark.parametrize("grad,expected", [(False, "sdpa"), (True, "recomputed")])
def test_window_attention_runs_the_selected_kernel(monkeypatch, grad, expected):
    """The fast layer asks the dispatcher with its own state (grad mode, device, dtype) and runs its answer."""
    calls = []

    def spy(*args):
        calls.append(select_attention_kernel(*args))
        return calls[-1]

    monkeypatch.setattr(dispatch, "select_attention_kernel", spy)
    attn = accelerate(WindowAttention(8, 2, (2, 3)))
    assert isinstance(attn, FastWindowAttention)
    with torch.set_grad_enabled(grad):
        attn(torch.randn(2, 3, 6, 8))
    assert calls == [expected]
