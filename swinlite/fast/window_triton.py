"""Window attention as one Triton kernel each way, sized for Swin's windows: a program holds one window's q, k and v
for one head (49 tokens for 7×7 windows, padded to 64), so no (B*nW, heads, N, N) logits or additive mask exist in
memory and a tile is one window, where FlexAttention's and SDPA's kernels tile for long sequences.

softmax(q·kᵀ·scale + bias + mask[w])·v over the windows of a block, as :func:`swinlite.models.swin.window_attention`
computes it: the logits, the bias + mask and the softmax in fp32 inside the kernel (as SDPA's fused kernels), the
probabilities rounded to v's dtype for the product with v. The forward keeps each row's log-sum-exp; the backward
recomputes the probabilities from it (as flash attention does) and runs a few windows per program, summing the
gradient to the bias over them in registers before one atomic add per program.

- Saves: on CUDA, the maps and the mask SDPA is handed; whether it wins is measured per shape on the GPU by
  :func:`swinlite.fast.measured.fastest` (the ``fastest`` row of the table in :mod:`swinlite.fast.blocks`); not yet
  measured on a GPU (benchmarks/kernels.md).
- Torch ops: ``torch.library.custom_op`` (opaque to ``torch.compile``, so CUDA graphs and inductor take it as one op)
  around ``triton.jit`` kernels; fp32 matmuls in IEEE fp32 (``input_precision="ieee"``), not TF32. Where Triton is
  missing (:data:`TRITON_AVAILABLE` False) the table never names this kernel; windows of more than
  :data:`MAX_TOKENS` tokens, heads wider than :data:`MAX_HEAD_DIM`, a kernel that does not build for the GPU, or a
  gradient under ``torch.use_deterministic_algorithms`` (the bias gradient is summed by atomic adds) raise
  ``NotImplementedError``, which leaves it out of the timing. No attention dropout.
- Pinned by: ``tests/fast/test_window_triton.py``, on CPU through Triton's interpreter (``TRITON_INTERPRET=1``):
  against the per-window loop of ``tests/reference.py``, values and gradients of qkv and the bias, with and without a
  shift/padding mask, in fp32 and fp16 (the interpreter's ``tl.dot`` cannot take bf16; bf16 runs the same code), and
  a shifted, padded block through it against the reference block, and the op under ``torch.compile(fullgraph=True)``;
  and each kernel compiled to an sm_90 cubin; launched with the tensors' GPU current (a stand-in kernel).
"""

import contextlib

import torch

from .first_order import refuse_double_backward

try:
    import triton
    import triton.language as tl
    from triton.errors import TritonError

    TRITON_AVAILABLE = True
except ImportError:  # torch without Triton (CPU-only wheels)
    TRITON_AVAILABLE = False

MAX_TOKENS = 128  # tokens per window: the (N, N) logits of a program stay in registers up to 128²
MAX_HEAD_DIM = 128
WINDOWS_PER_PROGRAM = 4  # backward: windows whose bias gradient a program sums before its atomic add


def triton_window_attention(
    qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, scale: float
) -> torch.Tensor:
    """Window attention by the Triton kernels, bias and mask added inside them.

    Args:
        qkv: projections (B*nW, N, 3, heads, hd), windows batch-major.
        bias: relative position bias (heads, N, N), may require grad.
        mask: (nW, N, N) additive mask or None (no gradient); window w of every image takes ``mask[w]``.
        batch: B (the kernels read nW from the mask).
        scale: logit scale, usually hd ** -0.5.

    Returns:
        (B*nW, heads, N, hd), a view of a (B*nW, N, heads, hd) tensor: merging the heads afterwards copies nothing.
    """
    if not TRITON_AVAILABLE:
        raise NotImplementedError("Triton is not installed")
    _, tokens, _, _, head_dim = qkv.shape
    if tokens > MAX_TOKENS or head_dim > MAX_HEAD_DIM:
        raise NotImplementedError(f"windows of at most {MAX_TOKENS} tokens, heads of at most {MAX_HEAD_DIM} channels")
    if torch.are_deterministic_algorithms_enabled() and torch.is_grad_enabled() and bias.requires_grad:
        raise NotImplementedError("the bias gradient is summed by atomic adds, not deterministic")
    out, _ = torch.ops.swinlite.triton_window_attention(qkv, bias, mask, scale)
    return out.transpose(1, 2)


if TRITON_AVAILABLE:

    @triton.jit
    def _dot(a, b, IEEE: tl.constexpr):
        if IEEE:
            return tl.dot(a, b, input_precision="ieee")
        return tl.dot(a, b)

    @triton.jit
    def _load_qkv(qkv, w, h, tokens, dims, rows, stride_w, stride_n, stride_t, HD: tl.constexpr):
        """q, k, v of window w, head h: (BLOCK, HD_BLOCK) each, zero beyond N tokens and HD channels."""
        at = qkv + w * stride_w + h * HD + tokens[:, None] * stride_n + dims[None, :]
        tile = rows[:, None] & (dims[None, :] < HD)
        q = tl.load(at, mask=tile, other=0.0)
        k = tl.load(at + stride_t, mask=tile, other=0.0)
        v = tl.load(at + 2 * stride_t, mask=tile, other=0.0)
        return q, k, v

    @triton.jit
    def _logits(
        q,
        k,
        bias,
        mask,
        w,
        h,
        num_windows,
        scale,
        tokens,
        real,
        N: tl.constexpr,
        HAS_MASK: tl.constexpr,
        IEEE: tl.constexpr,
    ):
        """q·kᵀ·scale + bias[h] + mask[w % nW] in fp32, (BLOCK, BLOCK); keys beyond N at -inf."""
        logits = _dot(q, tl.trans(k), IEEE) * scale
        pair = real[:, None] & real[None, :]
        at = tokens[:, None] * N + tokens[None, :]
        logits += tl.load(bias + h * N * N + at, mask=pair, other=0.0).to(tl.float32)
        if HAS_MASK:
            logits += tl.load(mask + (w % num_windows) * N * N + at, mask=pair, other=0.0).to(tl.float32)
        return tl.where(real[None, :], logits, float("-inf"))

    @triton.jit
    def _forward_kernel(
        qkv,
        bias,
        mask,
        out,
        lse,
        stride_w,
        stride_n,
        stride_t,
        num_windows,
        heads,
        scale,
        N: tl.constexpr,
        HD: tl.constexpr,
        BLOCK: tl.constexpr,
        HD_BLOCK: tl.constexpr,
        HAS_MASK: tl.constexpr,
        IEEE: tl.constexpr,
    ):
        """One program per (window, head): out (windows, N, heads, HD) and lse (windows, heads, N)."""
        w = tl.program_id(0)
        h = tl.program_id(1)
        tokens = tl.arange(0, BLOCK)
        dims = tl.arange(0, HD_BLOCK)
        real = tokens < N
        q, k, v = _load_qkv(qkv, w, h, tokens, dims, real, stride_w, stride_n, stride_t, HD)
        logits = _logits(q, k, bias, mask, w, h, num_windows, scale, tokens, real, N, HAS_MASK, IEEE)
        row_max = tl.max(logits, 1)
        p = tl.exp(logits - row_max[:, None])
        total = tl.sum(p, 1)
        o = _dot((p / total[:, None]).to(v.dtype), v, IEEE)  # (BLOCK, HD_BLOCK)
        at = ((w * N + tokens[:, None]) * heads + h) * HD + dims[None, :]
        tl.store(out + at, o.to(out.dtype.element_ty), mask=real[:, None] & (dims[None, :] < HD))
        tl.store(lse + (w * heads + h) * N + tokens, row_max + tl.log(total), mask=real)

    @triton.jit
    def _backward_kernel(
        qkv,
        bias,
        mask,
        out,
        lse,
        grad_out,
        grad_qkv,
        grad_bias,
        stride_w,
        stride_n,
        stride_t,
        num_windows,
        total_windows,
        heads,
        scale,
        N: tl.constexpr,
        HD: tl.constexpr,
        BLOCK: tl.constexpr,
        HD_BLOCK: tl.constexpr,
        WINDOWS: tl.constexpr,
        HAS_MASK: tl.constexpr,
        IEEE: tl.constexpr,
    ):
        """One program per (head, run of WINDOWS windows): grad_qkv (laid out as qkv) and grad_bias (heads, N, N),
        fp32, summed into by atomic adds."""
        h = tl.program_id(0)
        tokens = tl.arange(0, BLOCK)
        dims = tl.arange(0, HD_BLOCK)
        real = tokens < N
        bias_grad = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for i in range(WINDOWS):
            w = tl.program_id(1) * WINDOWS + i
            rows = real & (w < total_windows)  # no rows in a window past the last
            tile = rows[:, None] & (dims[None, :] < HD)
            q, k, v = _load_qkv(qkv, w, h, tokens, dims, rows, stride_w, stride_n, stride_t, HD)
            at = ((w * N + tokens[:, None]) * heads + h) * HD + dims[None, :]  # in out and grad_out
            o = tl.load(out + at, mask=tile, other=0.0)
            do = tl.load(grad_out + at, mask=tile, other=0.0)
            logits = _logits(q, k, bias, mask, w, h, num_windows, scale, tokens, real, N, HAS_MASK, IEEE)
            row_lse = tl.load(lse + (w * heads + h) * N + tokens, mask=rows, other=0.0)
            p = tl.where(rows[:, None], tl.exp(logits - row_lse[:, None]), 0.0)  # the forward's probabilities
            dv = _dot(tl.trans(p.to(do.dtype)), do, IEEE)
            dp = _dot(do, tl.trans(v), IEEE)
            delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)  # rowsum(dP ∘ P) = rowsum(dO ∘ O)
            ds = p * (dp - delta[:, None])  # gradient to the logits, (BLOCK, BLOCK)
            bias_grad += ds
            dq = _dot(ds.to(k.dtype), k, IEEE) * scale
            dk = _dot(tl.trans(ds.to(q.dtype)), q, IEEE) * scale
            grad_at = grad_qkv + w * stride_w + h * HD + tokens[:, None] * stride_n + dims[None, :]
            tl.store(grad_at, dq.to(grad_qkv.dtype.element_ty), mask=tile)
            tl.store(grad_at + stride_t, dk.to(grad_qkv.dtype.element_ty), mask=tile)
            tl.store(grad_at + 2 * stride_t, dv.to(grad_qkv.dtype.element_ty), mask=tile)
        pair = real[:, None] & real[None, :]
        tl.atomic_add(grad_bias + h * N * N + tokens[:, None] * N + tokens[None, :], bias_grad, mask=pair)

    def _launch(kernel, grid: tuple[int, int], device: torch.device, *args, **meta) -> None:
        """``kernel[grid](*args, **meta)`` on ``device``, its tensors' GPU: Triton launches on the current device's
        stream, another GPU's where they are on ``cuda:1`` and nothing called ``set_device`` (on the CPU, Triton's
        interpreter, as it is). A kernel that does not build or fit on this GPU leaves the timing."""
        on_device = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
        try:
            with on_device:
                kernel[grid](*args, **meta)
        except TritonError as error:
            raise NotImplementedError(f"the Triton window attention does not run here: {error}") from error

    def _sizes(qkv: torch.Tensor) -> dict[str, int | bool]:
        """The kernels' compile-time sizes for qkv (windows, N, 3, heads, hd)."""
        _, tokens, _, _, head_dim = qkv.shape
        block = max(16, triton.next_power_of_2(tokens))  # tl.dot takes dimensions of at least 16
        return {
            "N": tokens,
            "HD": head_dim,
            "BLOCK": block,
            "HD_BLOCK": max(16, triton.next_power_of_2(head_dim)),
            "IEEE": qkv.dtype == torch.float32,
            "num_warps": 8 if block > 64 else 4,
        }

    @torch.library.custom_op("swinlite::triton_window_attention", mutates_args=())
    def _attention(
        qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, scale: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(out (windows, N, heads, hd) in qkv's dtype, lse (windows, heads, N) fp32)."""
        qkv, bias = qkv.contiguous(), bias.contiguous()
        windows, tokens, _, heads, head_dim = qkv.shape
        out = qkv.new_empty(windows, tokens, heads, head_dim)
        lse = qkv.new_empty(windows, heads, tokens, dtype=torch.float32)
        has_mask = mask is not None
        mask = mask.contiguous() if has_mask else bias  # an unread pointer without a mask
        num_windows = mask.shape[0] if has_mask else 1
        strides = qkv.stride()[:3]
        _launch(
            _forward_kernel, (windows, heads), qkv.device, qkv, bias, mask, out, lse, *strides, num_windows, heads,
            scale, HAS_MASK=has_mask, **_sizes(qkv),
        )  # fmt: skip
        return out, lse

    @_attention.register_fake
    def _(qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, scale: float):
        windows, tokens, _, heads, head_dim = qkv.shape
        out = qkv.new_empty(windows, tokens, heads, head_dim)
        return out, qkv.new_empty(windows, heads, tokens, dtype=torch.float32)

    @torch.library.custom_op("swinlite::triton_window_attention_backward", mutates_args=())
    def _attention_backward(
        grad_out: torch.Tensor,
        qkv: torch.Tensor,
        bias: torch.Tensor,
        mask: torch.Tensor | None,
        out: torch.Tensor,
        lse: torch.Tensor,
        scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(gradient to qkv, laid out contiguous, gradient to the bias in its dtype)."""
        qkv, bias, grad_out = qkv.contiguous(), bias.contiguous(), grad_out.contiguous()
        windows, tokens, _, heads, _ = qkv.shape
        grad_qkv = torch.empty_like(qkv)
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
        has_mask = mask is not None
        mask = mask.contiguous() if has_mask else bias
        num_windows = mask.shape[0] if has_mask else 1
        strides = qkv.stride()[:3]
        grid = (heads, triton.cdiv(windows, WINDOWS_PER_PROGRAM))
        _launch(
            _backward_kernel, grid, qkv.device, qkv, bias, mask, out, lse, grad_out, grad_qkv, grad_bias, *strides,
            num_windows, windows, heads, scale, WINDOWS=WINDOWS_PER_PROGRAM, HAS_MASK=has_mask, **_sizes(qkv),
        )  # fmt: skip
        return grad_qkv, grad_bias.to(bias.dtype)

    @_attention_backward.register_fake
    def _(grad_out, qkv, bias, mask, out, lse, scale):
        return torch.empty_like(qkv, memory_format=torch.contiguous_format), torch.empty_like(bias)

    def _setup_context(ctx, inputs: tuple, output: tuple) -> None:
        qkv, bias, mask, scale = inputs
        out, lse = output
        ctx.save_for_backward(qkv, bias, mask, out, lse)
        ctx.scale = scale

    def _backward(ctx, grad_out: torch.Tensor, _grad_lse: torch.Tensor | None) -> tuple:
        refuse_double_backward()
        qkv, bias, mask, out, lse = ctx.saved_tensors
        grad_qkv, grad_bias = torch.ops.swinlite.triton_window_attention_backward(
            grad_out, qkv, bias, mask, out, lse, ctx.scale
        )
        return grad_qkv, grad_bias, None, None

    _attention.register_autograd(_backward, setup_context=_setup_context)
