"""The fast Swin modules, the shift + partition gather they use, and the table of which kernel runs when.

:class:`FastSwinBlock`, :class:`FastWindowAttention`, :class:`FastMlp` and :class:`FastLinear` subclass the reference
modules of :mod:`swinlite.models.swin` (and timm's ``Mlp``, torch's ``nn.Linear``) without adding parameters or
buffers: the same ``state_dict``, the same function, other kernels. :func:`swinlite.fast.accelerate` swaps them in.
Only the attention kernel, the row blocks and the linears' library depend on the call (gradient to the bias,
device, dtype, dropout, grad mode, threads): :func:`select_attention_kernel`, :func:`row_blocks_for` and
:func:`onednn_serves` decide, by this table and the list of kernels after it:

| situation                            | shift + partition        | attention                       | MLP            |
|--------------------------------------|--------------------------|---------------------------------|----------------|
| reference (``fast=False``), always   | roll + partition         | explicit                        | plain          |
| CPU eval, ``no_grad``, a frozen bias | gather                   | sdpa (flash); bf16: expl. (**)  | plain          |
| CPU fp32 train                       | gather, inverse backward | recomputed (AVX2: explicit)     | GELU recompute |
| CPU fp32 train, attention dropout    | gather, inverse backward | explicit                        | GELU recompute |
| CPU bf16 (autocast) train            | gather, inverse backward | explicit                        | GELU recompute |
| CUDA, fp32 or bf16                   | gather, inverse backward | fastest of ``CUDA_CANDIDATES``  | as on the CPU  |
| CUDA, deterministic algorithms       | gather, inverse backward | explicit                        | as on the CPU  |
| TorchScript (``torch.jit.script``)   | gather, plain backward   | sdpa; CPU train: explicit       | plain          |
| ``torch.compile``                    | as in eager mode (*)     | as in eager mode                | as in eager    |
| ``torch.export`` (symbolic sizes)    | gather, index in graph   | explicit                        | plain          |
| ``torch.jit.trace``                  | roll + partition         | explicit                        | plain          |
| CPU eval without autograd, eager     | gather                   | as CPU eval, one row block each | row blocks     |

(**) bf16 attends through SDPA's flash kernel too on CPUs with AMX (:data:`CPU_FLASH_DTYPES`).
"train" means a gradient flows to the relative position bias. ``torch.compile`` traces every kernel into
one graph, without graph breaks (``tests/models/test_compile_graph.py``); (*) on the CPU at static sizes the graph
takes the gather index and the mask from the cache through an op (:func:`window_index`). Kernels:

- explicit: :func:`swinlite.models.swin.window_attention`, the reference's formula as written; the fast path runs
  it where no fused kernel fits (SDPA's CPU math fallback, which a trainable bias needs, runs slower than it in
  bf16; the recomputed kernel too, in bf16), for CPU inference in a dtype not in :data:`CPU_FLASH_DTYPES` (bf16
  where the CPU has no AMX: there the CPU flash kernel is the slower one, eager and compiled), and for fp32 training
  on CPUs whose widest vector unit PyTorch uses is AVX2 (:data:`RECOMPUTED_ON_THIS_CPU`): there the recomputed
  kernel's CPU flash forward is the slower one. Its weights go through the attention's ``attn_drop`` where that is
  replaced or hooked (:func:`~swinlite.models.swin.kernel_dropout`), on every row of the table.
  Fixed rules rather than a timing, so that a resumed run picks what the interrupted one picked; for the same reason
  CUDA runs it under deterministic algorithms (``train.deterministic``), where "fastest" would time a choice that
  ``resume.pt`` does not keep and another run or rank can make otherwise (explicit and sdpa differ in the last bits).
- sdpa: :func:`~swinlite.fast.window_sdpa.sdpa_window_attention`.
- recomputed: :func:`~swinlite.fast.window_sdpa.recomputed_window_attention` (needs the private CPU
  flash op, :data:`~swinlite.fast.window_sdpa.CPU_FLASH_WITH_LSE`; without it: explicit).
- flex: :func:`~swinlite.fast.window_flex.flex_window_attention` (FlexAttention, bias and mask as a score modifier;
  no attention dropout).
- triton: :func:`~swinlite.fast.window_triton.triton_window_attention` (one Triton kernel each way, a window and a head
  per program; no attention dropout).
- fastest: the fastest of :data:`CUDA_CANDIDATES` for the call's shapes, dtype and gradient, timed on the first
  eager call of each (:mod:`swinlite.fast.measured`), among those whose output there is the explicit formula's to
  :data:`CANDIDATE_TOLERANCE` (a candidate that is not is left out, with a warning); where nothing can be timed and
  nothing was (tracing, CUDA graph capture), sdpa.
- row blocks: :mod:`swinlite.fast.row_blocks`, CPU inference in blocks of rows through reused buffers, fp32 or
  under autocast, when :func:`row_blocks_for` says so (eval, no autograd, eager, exact GELU), with
  :data:`ROWS_PER_THREAD` tokens per thread; it overrides the "CPU eval" row above.
- gather: :func:`gather_tokens` below; index in graph: :func:`exported_shifted_window_attention`. Wherever the
  gather runs (not in the exported graph, nor in TorchScript), a block with masked padding attends in its window cut
  to a map side smaller than it (:meth:`GatheredWindowsBlock._attention_window`): the same attention, without the
  padded tokens.
- linear layers (every ``nn.Linear`` of the model is a :class:`FastLinear`, its MLP's and attention's too): in fp32
  on the CPU, eager or compiled, in the row blocks (there with GELU and the residual add fused), through oneDNN
  (:func:`~swinlite.fast.row_blocks.onednn_linear`; with autograd :mod:`swinlite.fast.linear_grad`, and the GELU
  recompute's fc2 too) where :data:`ONEDNN_FP32_ON_THIS_CPU` (AMD CPUs with AVX-512, where PyTorch's BLAS is the
  slower): into a frozen compiled graph (``swinlite.optimize_for_inference``) as oneDNN's own op, which inductor
  lowers with the weight a constant, into any other (a compiled train step) as the op ``swinlite::onednn_linear``
  (:func:`~swinlite.fast.linear_grad.traced_linear`), which inductor calls as it is;
  in bf16 (autocast or bf16 weights) in the row blocks through oneDNN too, packed weights, wherever oneDNN
  computes bf16 (:data:`ONEDNN_BF16`); everywhere else ``F.linear`` (compiled: inductor picks the kernels). Eager
  inference under autocast (CPU or GPU, no autograd) takes the weights from copies kept in autocast's dtype
  (:func:`~swinlite.fast.row_blocks.autocast_weights`): converted once, not in every autocast region.
- GELU recompute: :mod:`swinlite.fast.gelu_linear`, for an exact GELU without active dropout or norm between fc1
  and fc2 (``FastMlp.recomputes``, checked on each call; otherwise plain). The gather and the recompute need
  autograd only for their backward: without gradients they run their plain forward. TorchScript cannot script
  autograd Functions, so it runs their plain forward with autograd's backward.

Why each choice holds, with the measurements: ``benchmarks/kernels.md``.
"""

import functools
import platform
import warnings
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from timm.layers import GELU, DropPath, Mlp, register_notrace_module
from torch import nn

from ..device import cpu_computes_bf16
from ..models.swin import (
    SwinBlock,
    WindowAttention,
    cache_op_serves,
    exporting,
    non_negative_remainder,
    recording_graph,
    unhooked,
    window_attention,
    window_geometry,
    window_order,
)
from ..models.tensor_cache import MiB, tensor_cache
from . import measured, window_flex, window_sdpa, window_triton
from .gelu_linear import gelu_linear
from .linear_grad import onednn_linear_with_grad, traced_linear
from .row_blocks import (
    ONEDNN_LINEAR,
    RowBlocks,
    autocast_weights,
    compute_dtype,
    mlp_rows,
    window_attention_rows,
)

# --- the decisions (the table above) ---------------------------------------------------------------------------

# the kernels "fastest" times (flex and triton without attention dropout)
CUDA_CANDIDATES = ("explicit", "sdpa", "flex", "triton")
# the relative (Frobenius) distance from the explicit formula in fp32 beyond which "fastest" refuses a candidate's
# output or gradients, by the dtype of the call: rounding stays well below these (the explicit formula itself in
# bf16, logits of standard deviation 9: 1-2.5 %; TF32, where a user allows it, about 8x less), a wrong kernel (a bias
# or mask missed, a gradient doubled) lands near 100 %
CANDIDATE_TOLERANCE: dict[torch.dtype, float] = {torch.bfloat16: 0.1, torch.float16: 0.1, torch.float32: 0.01}
# fp32 training through the recomputed kernel: faster on a Xeon with AVX-512 and less memory, slower by 4-13 % of
# a Swin-T train step on an AMD EPYC where PyTorch vectorises with AVX2 (benchmarks/kernels.md)
RECOMPUTED_ON_THIS_CPU: bool = torch.backends.cpu.get_cpu_capability() != "AVX2"
ROWS_PER_THREAD = 4096  # tokens per thread in a row block (benchmarks/kernels.md: "Row block sizes")
ROW_BLOCK_BYTES = 16 * 2**20  # the largest row-block buffer
ATTENTION_MAP_BYTES_PER_THREAD = 2 * 2**20  # per thread, a row block's (windows, heads, N, N) attention maps in fp32
CPU_AMX: bool = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()  # Intel's matrix tiles (Sapphire Rapids+)


def cpu_flash_dtypes(amx: bool) -> tuple[torch.dtype, ...]:
    """The dtypes in which CPU inference attends through SDPA's flash kernel, on a CPU with AMX tiles or without:
    fp32, and bf16 where the kernel's bf16 matmuls run on the tiles; elsewhere in bf16 the explicit softmax is the
    faster one (benchmarks/kernels.md: "CPU bf16 inference", "CPU bf16 inference on AMX")."""
    return (torch.float32, torch.bfloat16) if amx else (torch.float32,)


CPU_FLASH_DTYPES: tuple[torch.dtype, ...] = cpu_flash_dtypes(CPU_AMX)  # this CPU's (tests patch it)


@functools.cache
def cpu_vendor() -> str:
    """The x86 vendor string, e.g. ``"AuthenticAMD"``, ``"GenuineIntel"``; ``""`` where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    processor = platform.processor()  # Windows: "AMD64 Family 25 Model 97 Stepping 2, AuthenticAMD"
    return processor.rsplit(",", 1)[-1].strip() if "," in processor else ""


# fp32 CPU linears through oneDNN rather than PyTorch's BLAS (MKL), which picks its code paths by
# CPU vendor: on an AMD EPYC with AVX-512 oneDNN ran Swin-T's linears faster, on one where PyTorch vectorises with
# AVX2 the slower (benchmarks/kernels.md, "fp32 linear layers through oneDNN"); Intel CPUs keep MKL, Intel's library
# (not measured against oneDNN)
ONEDNN_FP32_ON_THIS_CPU: bool = (
    ONEDNN_LINEAR and cpu_vendor() == "AuthenticAMD" and torch.backends.cpu.get_cpu_capability() == "AVX512"
)
# bf16 CPU linears of the row blocks through oneDNN's linear op, weights packed in its layout and GELU fused, rather
# than ``addmm``: where oneDNN computes in bf16 (AVX-512 or AMX), which also serves PyTorch's bf16 ``addmm``, but
# through a bias copied into the output and the weight reordered on every call (benchmarks/kernels.md, "bf16 linear
# layers of the row blocks")
ONEDNN_BF16: bool = ONEDNN_LINEAR and cpu_computes_bf16()


def select_attention_kernel(device_type: str, dtype: torch.dtype, bias_grad: bool, dropout: bool) -> str:
    """Name of the window attention kernel for one call of a fast block (module docstring: the table).

    Args:
        device_type: device of the projections, e.g. ``"cpu"``, ``"cuda"``.
        dtype: dtype of the projections (autocast already applied).
        bias_grad: a gradient flows to the relative position bias.
        dropout: attention dropout is active (``attn_drop`` in training mode with ``p > 0``).

    Returns:
        ``"explicit"``, ``"sdpa"``, ``"recomputed"``, or ``"fastest"``: the fastest of :data:`CUDA_CANDIDATES`
        for the call's shapes, timed once (:mod:`swinlite.fast.measured`): CUDA without deterministic algorithms.
    """
    if device_type == "cuda":
        if not torch.jit.is_scripting():  # (a branch TorchScript skips: nothing is timed there)
            # a timing's choice is not in resume.pt and can differ between runs and ranks: under deterministic
            # algorithms the reference's formula, whose ops all have deterministic CUDA kernels
            return "explicit" if torch.are_deterministic_algorithms_enabled() else "fastest"
        return "sdpa"
    if device_type != "cpu":
        return "sdpa"
    if not bias_grad:
        if not torch.jit.is_scripting():  # (a branch TorchScript skips: its table row runs sdpa)
            if not cpu_flash(dtype):
                return "explicit"
        return "sdpa"
    if torch.jit.is_scripting():
        return "explicit"
    if dtype == torch.float32 and not dropout and window_sdpa.CPU_FLASH_WITH_LSE and RECOMPUTED_ON_THIS_CPU:
        return "recomputed"
    return "explicit"


def cpu_flash(dtype: torch.dtype) -> bool:
    """Whether CPU inference in ``dtype`` attends through SDPA's flash kernel (:data:`CPU_FLASH_DTYPES`)."""
    return dtype in CPU_FLASH_DTYPES


def row_blocks_for(training: bool, x: torch.Tensor, width: int) -> RowBlocks | None:
    """How a block runs :mod:`.row_blocks`, or None: CPU eval without autograd, not traced (eager).

    Every op of a row block is one parallel region of all threads, and a region ends when its slowest thread does:
    on a shared CPU a thread that lost its core for a scheduler slice holds up every region it is part of. So a
    row block gives each thread :data:`ROWS_PER_THREAD` tokens (fewer, larger regions, at any thread count), up to
    :data:`ROW_BLOCK_BYTES` for its widest buffer (which then stays under glibc's mmap threshold and is reused
    without page faults), and the attention's row blocks hold at most :data:`ATTENTION_MAP_BYTES_PER_THREAD` of
    (windows, heads, N, N) maps per thread: with many heads, the maps of 4096 tokens are the larger buffers, freshly
    mapped and faulted in by every row block (benchmarks/kernels.md: "Row block sizes"). Under CPU autocast the row
    blocks compute in autocast's dtype.

    Args:
        training: the block's ``training`` flag (dropout and stochastic depth must be off).
        x: the block's input.
        width: channels of the block's widest row-block buffer (the MLP's hidden layer).
    """
    if training or x.device.type != "cpu" or torch.is_grad_enabled() or torch.compiler.is_compiling():
        return None
    if recording_graph():
        return None
    dtype = compute_dtype(x)
    threads = max(1, torch.get_num_threads())
    rows = min(ROWS_PER_THREAD * threads, ROW_BLOCK_BYTES // (width * dtype.itemsize))
    fp32 = dtype == x.dtype == torch.float32
    onednn = (fp32 and ONEDNN_FP32_ON_THIS_CPU) or (dtype == torch.bfloat16 and ONEDNN_BF16)
    return RowBlocks(max(rows, 1), dtype, cpu_flash(dtype), ATTENTION_MAP_BYTES_PER_THREAD * threads, onednn)


def fastest_attention(
    kind: str,
    names: Sequence[str],
    run: Callable[[str, torch.Tensor, torch.Tensor], torch.Tensor],
    formula: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor],
    qkv: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    dropout_p: float,
) -> str:
    """The fastest of the kernels ``names`` for this call's shapes, forward (and backward where a gradient flows),
    timed on copies of the inputs the first time (:func:`swinlite.fast.measured.fastest`). Without dropout a
    candidate whose first output (or gradient to qkv or the bias) is farther from the explicit formula's in fp32 than
    :data:`CANDIDATE_TOLERANCE` allows is left out, with a warning: a kernel wrong on one GPU is not chosen for being
    fast.

    Args:
        kind: what the kernels compute, e.g. ``"window attention"``; part of the choice's key and of the warning.
        names: the candidates.
        run: ``run(name, qkv, bias)``, the candidate's output for the call's mask, batch and dropout; it must not
            reach a parameter's gradient other than through qkv and bias.
        formula: ``formula(qkv, bias, mask)``, the explicit formula's output; called on fp32 copies with autocast off.
        qkv, bias, mask: the call's projections (B*nW, N, 3, heads, hd), bias (heads, N, N) and shift/padding mask
            (nW, N, N) or None.
        dropout_p: attention dropout (the outputs are then random: not compared).
    """
    train = torch.is_grad_enabled() and (qkv.requires_grad or bias.requires_grad)
    key = (kind, qkv.device, qkv.dtype, tuple(qkv.shape), mask is not None, train, dropout_p > 0)
    choice = measured.CHOICES.get(key)
    if choice is not None:  # every call after the first of its shapes: no trial closures built
        return choice
    expected: dict[str, torch.Tensor] = {}  # the explicit formula's output and gradients in fp32, at first use

    def check(name: str, got: dict[str, torch.Tensor]) -> None:
        if not expected:
            q, b = qkv.detach().float().requires_grad_(train), bias.detach().float().requires_grad_(train)
            with torch.set_grad_enabled(train), torch.autocast(qkv.device.type, enabled=False):  # fp32 throughout
                out = formula(q, b, None if mask is None else mask.float())
            if train:
                out.sum().backward()
            expected.update(out=out.detach(), qkv=q.grad, bias=b.grad)
        tolerance = CANDIDATE_TOLERANCE.get(qkv.dtype, CANDIDATE_TOLERANCE[torch.float32])
        for what, value in got.items():
            error = ((value.float() - expected[what]).norm() / expected[what].norm()).item()
            if not error <= tolerance:  # NaN too
                where = f"{qkv.device} ({qkv.dtype}, qkv {tuple(qkv.shape)})"
                message = f"swinlite: {name} {kind}'s {what} is {error:.1e} off the explicit formula's on {where}"
                warnings.warn(f"{message}; not used", stacklevel=3)
                raise RuntimeError(f"{name} {kind} gives other values here")

    def trial(name: str) -> Callable[[], None]:
        q = b = None  # leaves copied from the call's inputs when first timed (not at every call: most read the choice)
        checked = dropout_p > 0.0  # random outputs: nothing to compare

        def once() -> None:
            nonlocal q, b, checked
            if q is None:
                q, b = qkv.detach().requires_grad_(train), bias.detach().requires_grad_(train)
            with torch.set_grad_enabled(train):
                out = run(name, q, b)
            if train:
                out.sum().backward()
            if not checked:  # the first run: its gradients are not yet summed with another's
                check(name, {"out": out.detach(), **({"qkv": q.grad, "bias": b.grad} if train else {})})
                checked = True

        return once

    return measured.fastest(key, {n: trial(n) for n in names}, qkv.device, default="sdpa")


# --- cyclic shift + window partition as one token gather -------------------------------------------------------
# The reference rolls the map, partitions it into windows and, after attention, merges the windows and rolls
# back: two copies each way. One index_select over a precomputed permutation replaces each pair, and its backward
# is the inverse index_select instead of autograd's zero fill + scatter-add. The gather copies whole rows of the
# [B*L, C] view rather than gathering along dim 1 of [B, L, C], which is slower (benchmarks/kernels.md).
# Pinned by tests/fast/test_gather.py (against a naive loop) and tests/fast/test_fast_block.py.


def shifted_window_index(
    padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token order of "cyclic shift, then window partition" as one gather, and its inverse.

    ``x.flatten(1, 2)[:, index]`` equals the windows of ``torch.roll(x, (-sh, -sw), (1, 2))``, window-major
    and row-major inside each window, flattened to [B, nW*N, C], for a map [B, Hp, Wp, C];
    ``y[:, inverse]`` undoes it.

    Args:
        padded: map size (Hp, Wp), multiples of the window.
        window: (Wh, Ww).
        shift: cyclic shift (sh, sw), already reduced by ``effective_shift``.
        device: device of the indices.

    Returns:
        (index, inverse), both int64 of length Hp*Wp.
    """
    Hp, Wp = padded
    rows, cols = window_order(padded, window, device)  # of the shifted map; it holds the token from (+sh, +sw)
    index = non_negative_remainder(rows + shift[0], Hp) * Wp + non_negative_remainder(cols + shift[1], Wp)
    inverse = torch.empty_like(index).scatter_(0, index, torch.arange(index.numel(), device=device))
    return index, inverse


# 64 MiB here and for the batch's rows: a Swin-T's blocks take 2.8 MiB at 800x1333 (0.13 MiB at 224x224), as much
# again per image of the batch, so batch 16 at 800x1333 or 256 at 224x224 stays: docs/performance.md, "Memory kept
# across input sizes"
_cached_shifted_window_index = tensor_cache(max_bytes=64 * MiB)(shifted_window_index)


def window_index(
    padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], device: torch.device, batch: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`shifted_window_index` for ``batch`` images, as rows of the [B*Hp*Wp, C] view of their maps
    (:func:`batch_rows`), built once per (padded, window, shift, device, batch) and shared, as
    :func:`~swinlite.models.swin.window_geometry` is: an eager call then gathers with one kernel each way, not four
    (the row arithmetic is three kernel launches, which at batch 1 or 2 on a GPU cost more than the gather). TorchScript
    and ``torch.export`` build it inside the graph; so does ``torch.compile``, except for the index where
    :func:`~swinlite.models.swin.cache_op_serves` (computed in the graph, the index arithmetic would run inside every
    gather)."""
    if torch.jit.is_scripting() or exporting():
        index, inverse = shifted_window_index(padded, window, shift, device)
    elif torch.compiler.is_compiling():
        index, inverse = _compiled_window_index(padded, window, shift, device)
    else:
        return _cached_batch_window_index(padded, window, shift, device, batch)
    length = index.shape[0]
    return batch_rows(index, batch, length), batch_rows(inverse, batch, length)


def batch_rows(index: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """Rows of the [B*L, C] view of x [B, L, C] that ``x[:, index]`` takes, image after image: (B*L,) int64."""
    if batch == 1:
        return index
    return ((torch.arange(batch, device=index.device) * length).unsqueeze(1) + index).view(-1)


@tensor_cache(max_bytes=64 * MiB)
def _cached_batch_window_index(
    padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], device: torch.device, batch: int
) -> tuple[torch.Tensor, torch.Tensor]:
    index, inverse = _cached_shifted_window_index(padded, window, shift, device)
    return batch_rows(index, batch, index.shape[0]), batch_rows(inverse, batch, index.shape[0])


@torch.jit.unused
def _compiled_window_index(
    padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`window_index` while ``torch.compile`` traces: through ``swinlite::shifted_window_index`` where
    :func:`~swinlite.models.swin.cache_op_serves`, else built in the graph."""
    if not cache_op_serves(padded, device):
        return shifted_window_index(padded, window, shift, device)
    pair = torch.ops.swinlite.shifted_window_index(padded, window, shift, device)  # (2, Hp*Wp)
    return pair[0], pair[1]


@torch.library.custom_op("swinlite::shifted_window_index", mutates_args=())
def _window_index_op(padded: list[int], window: list[int], shift: list[int], device: torch.device) -> torch.Tensor:
    """The cached (index, inverse) of :func:`shifted_window_index`, stacked: int64 [2, Hp*Wp] (a new tensor)."""
    return torch.stack(_cached_shifted_window_index(tuple(padded), tuple(window), tuple(shift), device))


@_window_index_op.register_fake
def _(padded: list[int], window: list[int], shift: list[int], device: torch.device) -> torch.Tensor:
    return torch.empty(2, padded[0] * padded[1], dtype=torch.int64, device=device)


def _take_tokens(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``x[:, index]`` for x [B, L, C], as one gather of whole rows of the [B*L, C] view (``rows``:
    :func:`batch_rows` of ``index``)."""
    B, L, C = x.shape
    return x.reshape(B * L, C).index_select(0, rows).view(B, L, C)


class _GatherTokens(torch.autograd.Function):
    """``x[:, index]`` for a permutation ``index``, whose backward is the gather ``grad[:, inverse]``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, rows: torch.Tensor, inverse_rows: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(inverse_rows)
        return _take_tokens(x, rows)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (inverse_rows,) = ctx.saved_tensors
        return _take_tokens(grad, inverse_rows), None, None


def gather_tokens(x: torch.Tensor, rows: torch.Tensor, inverse_rows: torch.Tensor) -> torch.Tensor:
    """Reorder the tokens of each image of x [B, L, C] by a permutation ``index``, given as the rows
    (:func:`batch_rows`) of it and of its inverse for B images (:func:`window_index` returns both).

    TorchScript cannot script the autograd Function: a scripted model runs the same gather with autograd's own
    backward (a scatter-add; same gradient).
    """
    if torch.jit.is_scripting():
        return _take_tokens(x, rows)
    return _GatherTokens.apply(x, rows, inverse_rows)


def exported_window_index(
    size: tuple[int, int],
    padded: tuple[int, int],
    window: tuple[int, int],
    shift: tuple[int, int],
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`shifted_window_index` for a graph with symbolic sizes, and the way back to the un-padded map.

    Built in the graph from the sizes: the index by integer arithmetic on one arange
    (:func:`~swinlite.models.swin.window_order`), the way back by scattering positions through it and cropping;
    the reference's roll, partition, merge and crop without a tensor of activations or a view of more than two
    symbolic sizes (cheap for torch.export to reason about).

    Args:
        size: un-padded map size (H, W).
        padded: (Hp, Wp), multiples of the window.
        window: (Wh, Ww).
        shift: cyclic shift (sh, sw), already reduced by ``effective_shift``.
        device: device of the indices.

    Returns:
        (index, back): ``index`` [Hp*Wp] as :func:`shifted_window_index`'s, and ``back`` [H, W]: for each token of
        the un-padded map, its position among the windows (merge windows, reverse shift and crop).
    """
    index, inverse = shifted_window_index(padded, window, shift, device)
    back = inverse.view(padded[0], padded[1])[: size[0], : size[1]]
    return index, back.clone(memory_format=torch.contiguous_format)  # the copy a reshape would make, stated


@torch.jit.unused
def exported_shifted_window_attention(block: SwinBlock, x: torch.Tensor) -> torch.Tensor:
    """``block._attn(x)`` for a graph with symbolic sizes (``torch.export``): pad, one gather into the windows,
    the block's attention, one gather back to the un-padded map. The reference rolls with slices and
    concatenations, partitions, merges, rolls back and crops: six copies each way in ONNX Runtime instead of one
    or two. Exact copies, so the same function; pinned by tests/fast/test_gather.py and the export tests.

    x: normalised map [B, H, W, C] -> attention output [B, H, W, C].
    """
    B, H, W, C = x.shape
    geometry = window_geometry((H, W), block.window, block.shift, block.mask_padding, x.device, x.dtype)
    Hp, Wp = geometry.padded
    index, back = exported_window_index((H, W), geometry.padded, block.window, geometry.shift, x.device)
    x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H)).reshape(B, Hp * Wp, C)
    num_windows = (Hp // block.window[0]) * (Wp // block.window[1])
    windows = x.index_select(1, index).view(B, num_windows, -1, C)  # (B, nW, N, C)
    out = block.attn(windows, geometry.mask)  # (B, nW, N, C)
    out = out.reshape(B, Hp * Wp, C).index_select(1, back.view(-1))  # (B, H*W, C)
    return out.view(B, back.shape[0], back.shape[1], C)  # (B, H, W, C): sizes as the reference's crop gives them


# --- the fast modules ------------------------------------------------------------------------------------------


def onednn_serves(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether a linear layer runs through oneDNN: fp32 on a CPU of the rule (:data:`ONEDNN_FP32_ON_THIS_CPU`), no
    autocast, not exported; eager or compiled (:func:`~swinlite.fast.linear_grad.traced_linear`)."""
    if not ONEDNN_FP32_ON_THIS_CPU or x.device.type != "cpu" or torch.is_autocast_enabled("cpu"):
        return False
    return x.dtype == weight.dtype == torch.float32 and not recording_graph()


def fast_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, through oneDNN where :func:`onednn_serves` says:
    :func:`~swinlite.fast.linear_grad.traced_linear` without autograd,
    :func:`~swinlite.fast.linear_grad.onednn_linear_with_grad` where a gradient flows."""
    if not torch.jit.is_scripting():  # TorchScript skips this branch
        if onednn_serves(x, weight):
            if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
                return onednn_linear_with_grad(x, weight, bias)
            return traced_linear(x, weight, bias)
        weight, bias = autocast_weights(x, weight, bias)  # inference under autocast: converted once, not per call
    return F.linear(x, weight, bias)


@register_notrace_module  # timm's FX feature extraction keeps it one node, as an nn.Linear
class FastLinear(nn.Linear):
    """``nn.Linear`` through oneDNN where :func:`onednn_serves` says (fp32 on a CPU of
    :data:`ONEDNN_FP32_ON_THIS_CPU`, eager inference or training, or compiled into a frozen graph:
    :func:`fast_linear`), else ``F.linear``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., in] -> [..., out]."""
        return fast_linear(x, self.weight, self.bias)


def children(module: nn.Module, *names: str) -> list[nn.Module]:
    """``module``'s children ``names``, each a dict read: ``module.name`` goes through ``nn.Module.__getattr__``,
    which costs more than the rest of a check that runs on every call (:meth:`GatheredWindowsBlock.as_built`)."""
    modules = module._modules
    return [modules[name] for name in names]


def passes_through(module: nn.Module) -> bool:
    """Whether a fast path may skip the call of the dropout-like ``module`` (a block's ``drop_path1``/``2``, the
    attention's ``attn_drop`` and ``proj_drop``, the MLP's ``drop1``/``2``): it is of a class the blocks build there,
    exactly ``nn.Identity``, ``nn.Dropout`` or timm's ``DropPath``, and inactive on this call (in eval, or with
    probability 0). A user may replace one or set its ``p`` after the build: read on each call, dict reads."""
    cls = type(module)
    if cls is nn.Identity:
        return True
    if cls is nn.Dropout:
        return not module.training or module.p == 0.0
    return cls is DropPath and (not module.training or module.drop_prob == 0.0)


def fast_linear_class(module: nn.Module) -> bool:
    """Whether ``module`` is of a class whose call the fast paths may replace by reading its weight and bias:
    ``nn.Linear`` or :class:`FastLinear` exactly (a subclass, an adapter's, may add to its forward)."""
    return type(module) is FastLinear or type(module) is nn.Linear


def exact_gelu(act: nn.Module) -> bool:
    """Whether ``act`` is an exact GELU of a class the fused kernels compute: timm's ``GELU`` (``act_layer="gelu"``,
    ``F.gelu``) or torch's ``nn.GELU()`` without the tanh approximation; exactly those classes."""
    return type(act) is GELU or (type(act) is nn.GELU and act.approximate == "none")


class FastMlp(Mlp):
    """timm's ``Mlp`` whose fc2(gelu(h)) recomputes the GELU in backward instead of storing it.

    With exact GELU, no norm and no active dropout between the layers, fc2(gelu(h)) runs in
    :func:`~swinlite.fast.gelu_linear.gelu_linear` (:meth:`recomputes`, checked on each call; ``recompute_act``
    False turns it off); outputs and gradients are those of the plain composition, which runs in every other case.
    """

    recompute_act: bool = True

    @torch.jit.unused
    def layers_fuse(self) -> bool:
        """Whether the layers are of the classes the fused paths compute: linears (:func:`fast_linear_class`), an
        exact GELU between them (:func:`exact_gelu`) and no norm."""
        fc1, act, norm, fc2 = children(self, "fc1", "act", "norm", "fc2")
        return exact_gelu(act) and type(norm) is nn.Identity and fast_linear_class(fc1) and fast_linear_class(fc2)

    @torch.jit.unused
    def as_built(self) -> bool:
        """Whether fc2(gelu(h)) may run fused, reading fc2's weights and skipping the calls of act, norm, drop1 and
        fc2: the layers still of the classes it computes (:meth:`layers_fuse`; a user may replace one after the
        build, e.g. by an adapter) and none of the skipped ones hooked (:func:`unhooked`)."""
        return self.layers_fuse() and unhooked(*children(self, "act", "norm", "drop1", "fc2"))

    @torch.jit.unused
    def recomputes(self) -> bool:
        """Whether fc2(gelu(h)) runs fused on this call: the layers as built (:meth:`as_built`) and drop1 inactive
        (:func:`passes_through`; in training, a model built with dropout, or given it since, runs it)."""
        return self.recompute_act and self.as_built() and passes_through(self._modules["drop1"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., dim] -> [..., dim]."""
        h = self.fc1(x)  # (..., hidden)
        recompute = False  # TorchScript: the plain composition (a scripted gelu_linear is that composition)
        if not torch.jit.is_scripting():  # TorchScript skips this branch
            # a recording takes the reference's composition, as does a replaced or hooked layer, or active drop1
            recompute = not recording_graph() and self.recomputes()
        if recompute:
            onednn = False
            if not torch.jit.is_scripting():  # TorchScript skips this branch
                onednn = onednn_serves(h, self.fc2.weight)
            return self.drop2(gelu_linear(h, self.fc2.weight, self.fc2.bias, onednn))
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(h)))))

    @torch.jit.unused
    def forward_row_blocks(
        self, x: torch.Tensor, norm: nn.Module, plan: RowBlocks, post_norm: bool = False
    ) -> torch.Tensor:
        """x + self(norm(x)), or with ``post_norm`` x + norm(self(x)) (Swin-V2), for CPU inference in row blocks
        (:func:`~swinlite.fast.row_blocks.mlp_rows`).

        Needs the block's layers as built (:meth:`GatheredWindowsBlock.as_built`) and its dropouts inactive
        (:meth:`GatheredWindowsBlock.dropouts_pass_through`).
        x: [..., dim], contiguous.
        """
        weights = (self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias)
        return mlp_rows(x, norm, *weights, plan, post_norm=post_norm)


class DispatchedAttention:
    """The ``attend_at_rate`` of the fast window attentions, V1's (:class:`FastWindowAttention`) and Swin-V2's
    (:class:`~swinlite.fast.v2.FastWindowAttentionV2`): while exporting the reference's (its class comes after this
    one in the bases; ONNX has no fused kernel to gain from), else the subclass's ``_run`` of the kernel
    :func:`select_attention_kernel` picks, ``"fastest"`` resolved by its ``_fastest``. The reference's ``attend``
    calls it with ``attn_drop``'s rate, or calls ``attn_drop`` on the explicit weights where it is replaced or hooked
    (:func:`~swinlite.models.swin.kernel_dropout`)."""

    def attend_at_rate(
        self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, dropout_p: float
    ) -> torch.Tensor:
        """qkv (B*nW, N, 3, heads, hd) -> (B*nW, heads, N, hd), as the reference class's ``attend_at_rate``."""
        if not torch.jit.is_scripting():  # (a block TorchScript skips)
            if recording_graph():
                return super().attend_at_rate(qkv, bias, mask, batch, dropout_p)
        kernel = select_attention_kernel(qkv.device.type, qkv.dtype, bias.requires_grad, dropout_p > 0.0)
        if kernel == "fastest":
            kernel = self._fastest(qkv, bias, mask, batch, dropout_p)
        return self._run(kernel, qkv, bias, mask, batch, dropout_p)


class FastWindowAttention(DispatchedAttention, WindowAttention):
    """:class:`~swinlite.models.swin.WindowAttention` through the kernel :func:`select_attention_kernel` picks."""

    def _run(
        self,
        kernel: str,
        qkv: torch.Tensor,
        bias: torch.Tensor,
        mask: torch.Tensor | None,
        batch: int,
        dropout_p: float,
    ) -> torch.Tensor:
        if kernel == "sdpa":
            return window_sdpa.sdpa_window_attention(qkv, bias, mask, batch, self.scale, dropout_p)
        if kernel == "recomputed":
            return self._recomputed(qkv, bias, mask, batch)
        if kernel == "flex":
            return self._flex(qkv, bias, mask, batch)
        if kernel == "triton":
            return self._triton(qkv, bias, mask, batch)
        return window_attention(qkv, bias, mask, batch, self.scale, dropout_p)

    @torch.jit.unused
    def _recomputed(self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, B: int) -> torch.Tensor:
        return window_sdpa.recomputed_window_attention(qkv, bias, mask, B, self.scale)

    @torch.jit.unused
    def _flex(self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, B: int) -> torch.Tensor:
        return window_flex.flex_window_attention(qkv, bias, mask, B, self.scale)

    @torch.jit.unused
    def _triton(self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, B: int) -> torch.Tensor:
        return window_triton.triton_window_attention(qkv, bias, mask, B, self.scale)

    @torch.jit.unused
    def _fastest(
        self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, dropout_p: float
    ) -> str:
        """The fastest of :data:`CUDA_CANDIDATES` that serve this call (:func:`fastest_attention`)."""
        available = {"flex": window_flex.FLEX_AVAILABLE, "triton": window_triton.TRITON_AVAILABLE}
        names = [n for n in CUDA_CANDIDATES if n not in available or (available[n] and dropout_p == 0.0)]
        return fastest_attention(
            "window attention",
            names,
            lambda name, q, b: self._run(name, q, b, mask, batch, dropout_p),
            lambda q, b, m: window_attention(q, b, m, batch, self.scale, 0.0),
            qkv,
            bias,
            mask,
            dropout_p,
        )

    @torch.jit.unused
    def forward_row_blocks(
        self, x: torch.Tensor, mask: torch.Tensor | None, plan: RowBlocks, window: tuple[int, int] | None = None
    ) -> torch.Tensor:
        """:meth:`forward` for CPU inference, a row block of windows at a time (:mod:`swinlite.fast.row_blocks`)."""
        bias = self.rel_pos(window)  # (heads, N, N)
        qkv, proj = self.qkv, self.proj
        return window_attention_rows(x, qkv.weight, qkv.bias, proj.weight, proj.bias, bias, mask, self.scale, plan)


class GatheredWindowsBlock(SwinBlock):
    """``SwinBlock._attn`` with shift + partition (and merge + reverse shift) as one token gather each way: the frame
    the fast V1 and V2 blocks share (:class:`FastSwinBlock`, :class:`~swinlite.fast.v2.FastSwinV2Block`). A block
    runs its attention on the windows through :meth:`_attend_windows`; a subclass names the attention class it was
    written for as ``fast_attention``.

    Its fast paths run while the block is as built (:meth:`as_built`, checked on each call): otherwise, a module
    replaced or hooked since the build, the block runs as the reference does, calling each of its modules."""

    @torch.jit.unused
    def as_built(self) -> bool:
        """Whether the fast paths may run: every module whose call they skip or whose input they change is of the
        class they were written for and unhooked (:func:`unhooked`). The row blocks read the
        attention's and the MLP's linears' weights, skip the attention's dropouts and call ``norm2`` on rows of
        tokens; the gather hands the attention windows cut to a small map (:meth:`_attention_window`). A few attribute
        reads, on each call."""
        attn, mlp, norm2, drop_path1, drop_path2 = children(self, "attn", "mlp", "norm2", "drop_path1", "drop_path2")
        if type(attn) is not self.fast_attention or type(mlp) is not FastMlp or not mlp.as_built():
            return False
        qkv, proj, attn_drop, proj_drop = children(attn, "qkv", "proj", "attn_drop", "proj_drop")
        if not (fast_linear_class(qkv) and fast_linear_class(proj)):
            return False
        fc1, drop2 = children(mlp, "fc1", "drop2")
        return unhooked(attn, qkv, proj, attn_drop, proj_drop, mlp, fc1, drop2, norm2, drop_path1, drop_path2)

    @torch.jit.unused
    def dropouts_pass_through(self) -> bool:
        """Whether the row blocks may skip the dropouts' calls (:func:`passes_through`): a dropout in eval mode, its
        own (MC dropout puts the dropouts of a model in eval in training), is off at any rate; a module of another
        class put at one is called, by the reference's path."""
        drop_path1, drop_path2 = children(self, "drop_path1", "drop_path2")
        attn_drop, proj_drop = children(self._modules["attn"], "attn_drop", "proj_drop")
        drop1, drop2 = children(self._modules["mlp"], "drop1", "drop2")
        return all(map(passes_through, (attn_drop, proj_drop, drop1, drop2, drop_path1, drop_path2)))

    def _attn(self, x: torch.Tensor, plan: RowBlocks | None = None) -> torch.Tensor:
        """x normalised map [B, H, W, C] -> attention output [B, H, W, C]; ``plan``: row blocks (CPU inference;
        given only where the block is as built)."""
        if not torch.jit.is_scripting():  # (a block TorchScript skips)
            if exporting():  # symbolic sizes: the geometry and the gathers are built in the graph
                return exported_shifted_window_attention(self, x)
            if torch.jit.is_tracing():  # the reference's roll + partition: the gather index is cached per size
                return SwinBlock._attn(self, x)
            if plan is None and not self.as_built():  # a module replaced or hooked: the reference's windows
                return SwinBlock._attn(self, x)
        B, H, W, C = x.shape
        dtype = x.dtype  # the mask's: the attention's, under autocast its dtype (the row blocks take it in x's)
        window = self.window
        if not torch.jit.is_scripting():  # (a block TorchScript skips)
            if plan is None:  # the mask in the attention's dtype is not converted again on every call
                dtype = compute_dtype(x)
            window = self._attention_window(H, W)
        geometry = window_geometry((H, W), window, self.shift, self.mask_padding, x.device, dtype)
        Hp, Wp = geometry.padded
        index, inverse = window_index(geometry.padded, window, geometry.shift, x.device, B)
        if Hp > H or Wp > W:
            x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))  # (B, Hp, Wp, C)
        # cyclic shift + partition windows, as one gather: (B, Hp*Wp, C) -> (B, nW*N, C), window-major
        windows = gather_tokens(x.reshape(B, Hp * Wp, C), index, inverse)
        num_windows = (Hp // window[0]) * (Wp // window[1])
        cut = None if window == self.window else window
        x = self._attend_windows(windows.view(B, num_windows, -1, C), geometry.mask, plan, cut)  # (B, nW, N, C)
        x = gather_tokens(x.view(B, Hp * Wp, C), inverse, index)  # merge windows + reverse cyclic shift
        x = x.view(B, Hp, Wp, C)
        if Hp > H or Wp > W:  # a no-op slice would still cost a zero fill and a copy in backward
            x = x[:, :H, :W]
        return x

    @torch.jit.unused
    def _row_blocks(self, x: torch.Tensor) -> RowBlocks | None:
        """How this block runs in row blocks for its input ``x`` (:func:`row_blocks_for`; the block as built), or
        None."""
        if not (self.as_built() and self.dropouts_pass_through()):
            return None
        return row_blocks_for(self.training, x, self.mlp.fc1.out_features)

    @torch.jit.unused
    def _attention_window(self, height: int, width: int) -> tuple[int, int]:
        """The window the block attends in on a ``height`` x ``width`` map: its own, cut to the map along a side the
        map does not fill where padding is masked. The same attention (a masked padded key gets zero weight, and one
        window covering a side takes no shift along it), without the padded tokens' projections and logits: at 64²
        a window-7 Swin-T's third and fourth stages had 49-token windows over 4x4 and 2x2 maps."""
        if not self.mask_padding:  # padded tokens take part in attention: the window decides what they are
            return self.window
        return min(self.window[0], height), min(self.window[1], width)

    def _attend_windows(
        self,
        windows: torch.Tensor,
        mask: torch.Tensor | None,
        plan: RowBlocks | None,
        window: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """The block's attention on its windows [B, nW, N, C] -> [B, nW, N, C]: through row blocks when ``plan``
        says (CPU inference), else the attention module; ``window``: the windows' size where cut
        (:meth:`_attention_window`), else None."""
        if plan is not None:
            return self.attn.forward_row_blocks(windows, mask, plan, window)
        return self.attn(windows, mask, window)


@register_notrace_module  # as SwinBlock: the padding and shift depend on the input size
class FastSwinBlock(GatheredWindowsBlock):
    """:class:`~swinlite.models.swin.SwinBlock` with shift + partition as one gather, and row blocks for CPU
    inference; its ``attn`` and ``mlp`` are :class:`FastWindowAttention` and :class:`FastMlp`."""

    fast_attention = FastWindowAttention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, H, W, C] -> [B, H, W, C]."""
        if not torch.jit.is_scripting():  # TorchScript skips this branch
            plan = self._row_blocks(x)
            if plan is not None:  # CPU inference
                x = x + self._attn(self.norm1(x), plan)
                return self.mlp.forward_row_blocks(x, self.norm2, plan)  # x + mlp(norm2(x))
        x = x + self.drop_path1(self._attn(self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))
