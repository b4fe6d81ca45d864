"""CPU inference in blocks of rows: the window attention and the MLP of a block, a few thousand tokens at
a time, through buffers reused from one row block to the next.

Without autograd nothing has to be kept for backward, so the (tokens, 3C) projections, the (tokens, 4C)
MLP hidden state and the (B*nW, heads, N, N) bias + mask need not exist for the whole batch at once. The
plain eager path allocates each of them whole: at Swin-T's first stage, batch 8, the hidden state alone
is larger than glibc's largest mmap threshold (32 MB), so every call maps fresh pages and faults them
in; the ops that first write them (the bias copy of ``addmm``, GELU) spend more time faulting than
computing. Here each row block's hidden state stays in cache between fc1, GELU and fc2, the residual and
fc2's bias are written into the output before fc2 accumulates onto it, and the bias + shift mask is added
once per call, for the windows of one row block, which every row block then reads.

Under CPU autocast the matmuls, GELU and the attention run in autocast's dtype (bf16), as they would under
autocast. In a Swin model that is the dtype of the residual stream already (autocast's patch-embedding convolution
gives bf16, and LayerNorm keeps its input's dtype); a block fed fp32 keeps its residual stream in fp32, each row
block's normalised tokens converted into a reused buffer, and returns fp32 as the reference block under autocast does.
The attention is SDPA's flash kernel or the explicit formula, as the plan says (in bf16 the CPU flash kernel is the
slower one except on CPUs with AMX: :data:`~swinlite.fast.blocks.CPU_FLASH_DTYPES`); the explicit formula adds
bias + mask and takes the softmax in fp32, as timm's Swin does under autocast.

How many tokens a row block holds is the caller's choice (:class:`RowBlocks`, decided with the rest of the
table in :func:`swinlite.fast.blocks.row_blocks_for`): every op of a row block is one parallel region of all
threads, and each region waits for its slowest thread, so the blocks grow with the thread count.

- Saves: time in CPU inference, fp32 and bf16 autocast (``python scripts/benchmark.py --size tiny --batch 8
  --tasks inference``; figures in benchmarks/kernels.md); under autocast, each weight's converted copy is kept while
  the weight is unchanged (:func:`_cast`; benchmarks/cpu_bf16_weight_copies.md), at half the fp32 weights'
  memory. Same ops, same order of reduction within each token: results equal the plain path's to float rounding
  of the matmuls.
- Torch ops: ``addmm``/``mm`` with ``out=``, ``addmm_``, ``F.scaled_dot_product_attention`` in fp32, ``matmul``
  and ``softmax`` in bf16, ``torch.ops.aten.gelu_``; where ``plan.onednn`` the linears by oneDNN's
  ``mkldnn::_linear_pointwise`` instead (:func:`onednn_linear`, GELU and the residual add fused; the op inductor
  emits for CPU linears, private to PyTorch): in fp32 on CPUs whose BLAS is the slower
  (:data:`~swinlite.fast.blocks.ONEDNN_FP32_ON_THIS_CPU`), in bf16 wherever oneDNN computes bf16
  (:data:`~swinlite.fast.blocks.ONEDNN_BF16`; converted weights kept in its packed layout,
  ``mkldnn::_reorder_linear_weight``). Only for CPU without autograd (out= ops have no autograd and do not
  autocast: the dtype is passed in); :func:`~swinlite.fast.blocks.row_blocks_for` decides.
- Pinned by: ``tests/fast/test_row_blocks.py`` (against the reference block: shifted and padded, row
  blocks of part of an image, of whole images and ragged; fp32 and bf16 weights; bf16 autocast; no biases) and
  ``tests/fast/test_fast_v2.py`` (the Swin-V2 block: cosine attention, post-norm MLP).
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..models.checks import autocast_available
from ..models.swin import cosine_eps, window_attn_mask
from .kept import Kept, keeps_values

# oneDNN's linear op, which inductor emits for CPU linears, with fused post-ops; where PyTorch is built with oneDNN
ONEDNN_LINEAR: bool = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class RowBlocks(NamedTuple):
    """How a block runs in row blocks.

    Attributes:
        rows: tokens per row block (whole windows for the attention).
        dtype: dtype of the matmuls and the attention: autocast's, or the input's without autocast.
        flash: attention by SDPA's CPU flash kernel, else by the explicit softmax (:func:`_explicit_attention`).
        map_bytes: the attention's row blocks hold fewer windows where their (windows, heads, N, N) maps, counted
            in fp32, would take more than this.
        onednn: linear layers through oneDNN (:func:`onednn_linear`, GELU and the residual add fused; in fp32 or
            bf16), else through ``addmm`` into reused buffers.
    """

    rows: int
    dtype: torch.dtype
    flash: bool
    map_bytes: int
    onednn: bool


def _linear_into(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """out = x @ weightᵀ + bias, written into ``out`` (rows, out_features)."""
    if bias is None:
        return torch.mm(x, weight.t(), out=out)
    return torch.addmm(bias, x, weight.t(), out=out)


def onednn_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    gelu: bool = False,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """x @ weightᵀ + bias through oneDNN (no autograd), then an exact GELU (``gelu``) or ``+ residual``, fused
    into the matmul: ``mkldnn::_linear_pointwise``, in fp32 where :data:`~swinlite.fast.blocks.ONEDNN_FP32_ON_THIS_CPU`
    says, in bf16 where :data:`~swinlite.fast.blocks.ONEDNN_BF16` does.

    Args:
        x: [..., in], on the CPU.
        weight, bias: [out, in] (plain or packed by ``mkldnn::_reorder_linear_weight``) and [out] or None.
        gelu: apply the exact (erf) GELU.
        residual: [..., out] to add, or None; not with ``gelu``.

    Returns:
        [..., out], a new tensor.
    """
    rows = x.reshape(-1, x.shape[-1])  # (T, in): inductor's linear patterns expect 2-D operands
    if residual is not None:
        y = torch.ops.mkldnn._linear_pointwise.binary(rows, residual.reshape(-1, weight.shape[0]), weight, bias, "add")
    elif gelu:
        y = torch.ops.mkldnn._linear_pointwise(rows, weight, bias, "gelu", [], "none")  # "none": erf, not tanh
    else:
        y = torch.ops.mkldnn._linear_pointwise(rows, weight, bias, "none", [], "")
    return y if x.dim() == 2 else y.view(*x.shape[:-1], weight.shape[0])  # (..., out)


def _add_linear_into(
    residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor
) -> None:
    """out = residual + x @ weightᵀ + bias: residual and bias written first, the matmul accumulates."""
    if bias is None:
        out.copy_(residual)
    else:
        torch.add(residual, bias, out=out)
    out.addmm_(x, weight.t())


_CASTS = Kept()  # a tensor's storage -> the tensor's copy in another dtype (and layout)


def _cast(t: torch.Tensor | None, dtype: torch.dtype, pack: bool = False) -> torch.Tensor | None:
    """``t`` in ``dtype``: a weight's copy is kept while the weight is unchanged (:class:`Kept`), so autocast
    inference converts each weight once, not once per call (autocast's own cache lasts one region). With ``pack``,
    a converted matrix is kept in oneDNN's blocked layout for :func:`onednn_linear` (in place of the plain copy: no
    more memory; the linears then skip reordering the weight on every call)."""
    if t is None or t.dtype == dtype:
        return t

    def convert() -> torch.Tensor:
        copy = t.detach().to(dtype)
        if pack and copy.dim() == 2:
            copy = torch.ops.mkldnn._reorder_linear_weight(copy)  # (out, in), oneDNN's layout
        return copy

    return _CASTS.get(t.untyped_storage(), (t,), (dtype, pack), convert)  # no weak reference to t: swap_tensors


def autocast_applies(x: torch.Tensor) -> bool:
    """Whether autocast converts the operands of a linear layer on ``x``: it is on for x's device, and x is not
    float64 (which autocast leaves alone). The CPU and CUDA have autocast; another device is asked
    (:func:`~swinlite.models.checks.autocast_available`: the meta device has none)."""
    device = x.device.type
    if x.dtype == torch.float64 or not (device in ("cpu", "cuda") or autocast_available(device)):
        return False
    return torch.is_autocast_enabled(device)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a linear layer computes in for input ``x``: autocast's where it applies (:func:`autocast_applies`),
    else x's."""
    return torch.get_autocast_dtype(x.device.type) if autocast_applies(x) else x.dtype


def autocast_weights(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of a linear layer on ``x``: where inference runs under autocast on the CPU or a GPU (no
    autograd, eager), the kept copies in autocast's dtype (:func:`_cast`), else the tensors themselves.

    Autocast converts fp32 weights in every autocast region, so an inference loop (one region per batch) converted
    each weight and bias on every call: one kernel each, about a hundred for Swin-T, which at batch 1 on a GPU are
    launches the step waits on. The copies cost half the fp32 weights' memory while the model lives and are made
    again after a weight changes (an optimizer step between two validations). The values are autocast's own."""
    if x.device.type not in ("cpu", "cuda") or weight.dtype != torch.float32:
        return weight, bias
    if not autocast_applies(x) or not keeps_values(x.device):
        return weight, bias
    dtype = torch.get_autocast_dtype(x.device.type)  # autocast applies (checked above)
    # a module's parameters only: a tensor made per call would be a new key every call
    weight, bias = (_cast(t, dtype) if isinstance(t, torch.nn.Parameter) else t for t in (weight, bias))
    return weight, bias


def _in_dtype(x: torch.Tensor, buffer: torch.Tensor | None) -> torch.Tensor:
    """x itself, or x converted into (the first rows of) ``buffer`` when the dtypes differ."""
    return x if buffer is None else buffer[: x.shape[0]].copy_(x)


def window_attention_rows(
    windows: torch.Tensor,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor | None,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor | None,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    plan: RowBlocks,
    tau: torch.Tensor | None = None,
) -> torch.Tensor:
    """proj(attention(qkv(windows))), about ``plan.rows`` tokens of windows at a time: dot-product attention, or
    with ``tau`` Swin-V2's scaled cosine attention.

    Args:
        windows: window tokens [B, nW, N, C], contiguous.
        qkv_weight, qkv_bias: the q, k, v projection, [3C, C] and [3C] or None.
        proj_weight, proj_bias: the output projection, [C, C] and [C] or None.
        bias: relative position bias [heads, N, N].
        mask: additive shift/padding mask [nW, N, N] or None.
        scale: logit scale; not used with ``tau``.
        plan: tokens per row block and the dtype of the computation.
        tau: τ per head [heads, 1, 1] in fp32 (already clamped and exponentiated) for cosine attention,
            cos(q, k)·τ for q·scale·kᵀ (Swin-V2, :func:`~swinlite.models.swin.cosine_window_attention`), or None.

    Returns:
        [B, nW, N, C] in ``plan.dtype``.
    """
    B, nW, N, C = windows.shape
    heads, dtype = bias.shape[0], plan.dtype
    qkv_weight, qkv_bias, proj_weight, proj_bias = (
        _cast(t, dtype, plan.onednn) for t in (qkv_weight, qkv_bias, proj_weight, proj_bias)
    )
    x = windows.view(B * nW * N, C)
    per_block = max(1, min(plan.rows // N, plan.map_bytes // (heads * N * N * torch.float32.itemsize)))  # windows
    blocks = _window_blocks(B, nW, per_block)
    largest = max(count for _, count, _ in blocks)
    whole = plan.onednn and len(blocks) == 1  # one row block: oneDNN's new output is the result, not copied
    out = None if whole else x.new_empty(x.shape, dtype=dtype)
    qkv_buffer = None if plan.onednn else x.new_empty(largest * N, qkv_weight.shape[0], dtype=dtype)  # reused
    in_buffer = None if x.dtype == dtype else x.new_empty(largest * N, C, dtype=dtype)
    # bias + mask for the windows of the largest row block (whole images, or part of one image); every row
    # block reads a slice of it: windows [offset, offset + count) of the image(s)
    images = largest // nW if largest >= nW else 1
    mask_dtype = dtype if plan.flash else torch.promote_types(dtype, torch.float32)  # as _explicit_attention adds
    attn_mask = window_attn_mask(bias.to(mask_dtype), _cast(mask, mask_dtype), images)  # (1 or images*nW, heads, N, N)
    for first, count, offset in blocks:
        rows = slice(first * N, (first + count) * N)
        if qkv_buffer is None:
            qkv = onednn_linear(_in_dtype(x[rows], in_buffer), qkv_weight, qkv_bias)  # (tokens, 3C)
        else:
            qkv = _linear_into(_in_dtype(x[rows], in_buffer), qkv_weight, qkv_bias, qkv_buffer[: count * N])
        heads_qkv = qkv.view(count, N, 3, heads, C // heads).permute(2, 0, 3, 1, 4)  # (3, count, heads, N, hd), a view
        block_mask = attn_mask if mask is None else attn_mask[offset : offset + count]
        if plan.flash:
            q, k, v = heads_qkv.unbind(0)
            if tau is not None:  # cos(q, k)·τ as the dot product of q·τ/|q| and k/|k|, at scale 1
                eps = cosine_eps(dtype)
                q, k = F.normalize(q, dim=-1, eps=eps) * tau.to(dtype), F.normalize(k, dim=-1, eps=eps)  # new
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=block_mask, scale=1.0 if tau is not None else scale)
        else:
            o = _explicit_attention(heads_qkv, block_mask, scale, tau)
        o = o.transpose(1, 2).reshape(count * N, C)  # (count, heads, N, hd) -> (tokens, C); a view after flash
        if whole:
            return onednn_linear(o, proj_weight, proj_bias).view(B, nW, N, C)
        if plan.onednn:
            out[rows] = onednn_linear(o, proj_weight, proj_bias)
        else:
            _linear_into(o, proj_weight, proj_bias, out[rows])
    return out.view(B, nW, N, C)


def _explicit_attention(
    qkv: torch.Tensor, attn_mask: torch.Tensor, scale: float, tau: torch.Tensor | None = None
) -> torch.Tensor:
    """softmax(q·scale·kᵀ + attn_mask)·v, :func:`~swinlite.models.swin.window_attention`'s formula as timm's Swin runs
    it under autocast: logits in q's dtype, the fp32 bias + mask added in fp32, softmax in fp32, its probabilities
    rounded to q's dtype for the product with v; in float64, float64 throughout. (The reference casts bias and mask
    to q's dtype and takes the softmax in it; in bf16 the fp32 softmax is the faster one and the closer to fp32.)
    qkv (3, windows, heads, N, hd), any strides; attn_mask fp32 (float64 for float64 qkv), broadcast to (windows,
    heads, N, N); with ``tau`` (fp32, (heads, 1, 1)) Swin-V2's cosine attention, cos(q, k)·τ for q·scale·kᵀ.
    Returns (windows, heads, N, hd) in qkv's dtype.

    q, k and v are copied once, contiguous: as views of the projection their heads cannot be folded into one batch
    dimension, and ``matmul`` would copy q·scale, kᵀ and v each (benchmarks/kernels.md, "bf16 linear layers of the
    row blocks")."""
    q, k, v = qkv.clone(memory_format=torch.contiguous_format).unbind(0)  # 3 x (windows, heads, N, hd), a copy
    wide = torch.promote_types(q.dtype, torch.float32)  # of the logits and the softmax
    if tau is None:
        logits = torch.matmul(q.mul_(scale), k.transpose(-2, -1)).to(wide).add_(attn_mask)  # (windows, heads, N, N)
    else:  # cos(q, k) in q's dtype, times τ in fp32 (as the reference: logits up to ±100 would round coarsely)
        eps = cosine_eps(q.dtype)
        F.normalize(q, dim=-1, eps=eps, out=q)  # in place: q/|q|
        F.normalize(k, dim=-1, eps=eps, out=k)
        cos = torch.matmul(q, k.transpose(-2, -1))  # (windows, heads, N, N)
        logits = torch.addcmul(attn_mask, cos.to(wide), tau.to(wide))
    return torch.matmul(logits.softmax(-1).to(q.dtype), v)


def _window_blocks(batch: int, num_windows: int, per_block: int) -> list[tuple[int, int, int]]:
    """(first window, windows, first window's index within its image) of each row block of at most
    ``per_block`` windows: whole images when an image has no more windows than that, else equal parts of one."""
    if per_block >= num_windows:
        images = min(per_block // num_windows, batch)
        return [(b * num_windows, min(images, batch - b) * num_windows, 0) for b in range(0, batch, images)]
    parts = -(-num_windows // per_block)
    size = -(-num_windows // parts)
    return [
        (b * num_windows + w, min(size, num_windows - w), w) for b in range(batch) for w in range(0, num_windows, size)
    ]


def mlp_rows(
    x: torch.Tensor,
    norm: torch.nn.LayerNorm,
    fc1_weight: torch.Tensor,
    fc1_bias: torch.Tensor | None,
    fc2_weight: torch.Tensor,
    fc2_bias: torch.Tensor | None,
    plan: RowBlocks,
    post_norm: bool = False,
) -> torch.Tensor:
    """x + fc2(gelu(fc1(norm(x)))) (exact GELU), or with ``post_norm`` x + norm(fc2(gelu(fc1(x)))) (Swin-V2's
    res-post-norm), ``plan.rows`` tokens at a time.

    Args:
        x: tokens [..., C], contiguous; the residual stream, in its own dtype.
        norm: the pre-norm, or with ``post_norm`` the norm after fc2 (a LayerNorm over C; it keeps its input's dtype).
        fc1_weight, fc1_bias: [hidden, C] and [hidden] or None.
        fc2_weight, fc2_bias: [C, hidden] and [C] or None.
        plan: tokens per row block and the dtype of the matmuls and GELU.
        post_norm: normalise fc2's output instead of x.

    Returns:
        [..., C] in x's dtype.
    """
    dtype = plan.dtype
    fc1_weight, fc1_bias, fc2_weight, fc2_bias = (
        _cast(t, dtype, plan.onednn) for t in (fc1_weight, fc1_bias, fc2_weight, fc2_bias)
    )
    tokens = x.reshape(-1, x.shape[-1])  # (T, C)
    size = min(plan.rows, tokens.shape[0])
    cast = tokens.dtype != dtype
    in_buffer = tokens.new_empty(size, tokens.shape[1], dtype=dtype) if cast else None
    if plan.onednn:  # GELU fused into fc1; the residual add into fc2 where the residual is in the matmul dtype

        def block(residual: torch.Tensor) -> torch.Tensor:  # (rows, C) -> residual + MLP, a new tensor
            branch_in = residual if post_norm else norm(residual)
            h = onednn_linear(_in_dtype(branch_in, in_buffer), fc1_weight, fc1_bias, gelu=True)  # (rows, hidden)
            if post_norm:  # the norm ends the branch (fc2's output in the matmul dtype, as autocast gives it)
                return torch.add(residual, norm(onednn_linear(h, fc2_weight, fc2_bias)))
            if cast:  # fc2's output rounded to the matmul dtype, as autocast's linear gives it, then added
                return torch.add(residual, onednn_linear(h, fc2_weight, fc2_bias))
            return onednn_linear(h, fc2_weight, fc2_bias, residual=residual)

        if size == tokens.shape[0]:  # one row block: its new output is the result, not copied
            return block(tokens).view(x.shape)
        out = torch.empty_like(tokens)
        for start in range(0, tokens.shape[0], size):
            out[start : start + size] = block(tokens[start : start + size])
        return out.view(x.shape)
    out = torch.empty_like(tokens)
    hidden = tokens.new_empty(size, fc1_weight.shape[0], dtype=dtype)  # (rows, hidden), reused
    out_buffer = tokens.new_empty(size, tokens.shape[1], dtype=dtype) if cast or post_norm else None
    for start in range(0, tokens.shape[0], size):
        rows = slice(start, start + size)
        residual = tokens[rows]
        branch_in = residual if post_norm else norm(residual)
        h = _linear_into(_in_dtype(branch_in, in_buffer), fc1_weight, fc1_bias, hidden[: residual.shape[0]])
        torch.ops.aten.gelu_(h)
        if out_buffer is None:
            _add_linear_into(residual, h, fc2_weight, fc2_bias, out[rows])
            continue
        # fc2's output in the matmul dtype (as autocast's linear gives it), normalised with post_norm, then added
        branch = _linear_into(h, fc2_weight, fc2_bias, out_buffer[: h.shape[0]])
        torch.add(residual, norm(branch) if post_norm else branch, out=out[rows])
    return out.view(x.shape)
