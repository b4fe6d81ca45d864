"""The fast Swin-V2 modules: the windows by one token gather, the cosine attention through SDPA where it fits.

:class:`FastSwinV2Block` and :class:`FastWindowAttentionV2` subclass :class:`~swinlite.models.swin.SwinV2Block`
and :class:`~swinlite.models.swin.WindowAttentionV2` without adding parameters or buffers (the MLP inside is
:class:`~swinlite.fast.blocks.FastMlp`, swapped like V1's). The table of what runs (a V2 column beside the table
of :mod:`swinlite.fast.blocks`):

| situation                           | shift + partition        | cosine attention           | MLP            |
|-------------------------------------|--------------------------|----------------------------|----------------|
| reference (``fast=False``), always  | roll + partition         | explicit                   | plain          |
| CPU eval, ``no_grad``, frozen bias  | gather                   | sdpa of (q̂·τ, k̂, v) (*)   | plain          |
| CPU eval without autograd, eager    | gather                   | row blocks                 | row blocks     |
| CPU train                           | gather, inverse backward | explicit                   | GELU recompute |
| CUDA, eval or train                 | gather (inverse backward)| fastest: explicit or sdpa  | as on the CPU  |
| CUDA, deterministic algorithms      | gather (inverse backward)| explicit                   | as on the CPU  |
| ``torch.export`` (symbolic sizes)   | gather, index in graph   | explicit                   | plain          |

(*) On the CPU in bf16: explicit, as V1's, except on CPUs with AMX (:data:`~swinlite.fast.blocks.CPU_FLASH_DTYPES`).

- fastest: the faster of :data:`CUDA_CANDIDATES` for the call's shapes, dtype and gradient, timed on the first eager
  call of each and checked against the explicit formula, as V1's (:func:`~swinlite.fast.blocks.fastest_attention`);
  sdpa where nothing can be timed (tracing, CUDA graph capture) and nothing was.

- row blocks: V1's row blocks, where :func:`~swinlite.fast.blocks.row_blocks_for` says (eval, no autograd, eager,
  exact GELU): the attention (:func:`~swinlite.fast.row_blocks.window_attention_rows` with ``tau``: cos(q, k)·τ,
  flash on (q̂·τ, k̂, v) in fp32, explicit in bf16 with τ applied to the fp32 logits as the reference does) and the
  MLP with the norm after fc2 (:func:`~swinlite.fast.row_blocks.mlp_rows`, ``post_norm``). The (tokens, 3C)
  projections, the maps and the hidden layer never exist for the whole batch, and on oneDNN's CPUs GELU is fused
  into fc1 and bf16 weights are kept packed.

- sdpa: :func:`sdpa_cosine_window_attention`: scaled cosine attention is dot-product attention of the
  normalised queries times τ and the normalised keys at scale 1, with the bias and the mask as SDPA's additive
  mask (the reference's values: -100 for other shift regions, -inf for padding), as V1's
  :func:`~swinlite.fast.window_sdpa.sdpa_window_attention`.
- Not the recomputed CPU training kernel (:func:`~swinlite.fast.window_sdpa.recomputed_window_attention`): it
  turns the -100 of the shift mask into -inf, negligible for V1's logits (its docstring says when), but V2's
  logits span ±τ (up to ±100) plus a bias in (0, 16): a key of another shift region can keep weight in the
  reference.
- Saves: the roll and partition copies each way (gather), and in eval the (heads, N, N) maps (flash kernel);
  ``python scripts/benchmark.py --size v2_tiny`` (figures: ``benchmarks/cpu_v2_tiny_b8_fp32.md``).
- Torch ops: ``F.scaled_dot_product_attention`` (flash on CPU and CUDA when no gradient flows to the mask; CUDA's
  memory-efficient kernel when one does); the gather of :mod:`swinlite.fast.blocks`.
- Pinned by: ``tests/fast/test_fast_v2.py`` (fast block against the reference block, values and gradients; the
  row blocks, fp32 and bf16 autocast, either library), ``tests/fast/test_measured.py`` (the "fastest" row) and
  ``tests/test_export.py`` (the export row).
"""

import torch
import torch.nn.functional as F
from timm.layers import register_notrace_module
from torch import nn

from ..models.swin import (
    ContinuousPositionBias,
    SwinV2Block,
    WindowAttentionV2,
    cosine_eps,
    cosine_tau,
    cosine_window_attention,
    window_attn_mask,
)
from .blocks import (
    DispatchedAttention,
    GatheredWindowsBlock,
    fast_linear,
    fast_linear_class,
    fastest_attention,
    unhooked,
)
from .kept import Kept, keeps_values
from .row_blocks import RowBlocks, compute_dtype, window_attention_rows

CUDA_CANDIDATES = ("explicit", "sdpa")  # the cosine attention kernels "fastest" times on CUDA

_TABLES = Kept()  # continuous position bias -> its offset table


class FastContinuousPositionBias(ContinuousPositionBias):
    """:class:`~swinlite.models.swin.ContinuousPositionBias` whose offset table (the MLP of every offset) is kept
    between calls where no gradient can reach it (:func:`kept_offset_table`): inference runs the MLP once, not in
    every block call (two linears and a ReLU: three kernels a block, which at batch 1 on a GPU are launches the step
    waits on). The gather of the table into the window's (heads, N, N) bias and its sigmoid run per call, as in the
    reference (the table is (2W - 1)² rows, the bias N² per head: for large windows, tens of MB a block; and the
    sigmoid's place in that layout keeps the bias bit for bit the reference's)."""

    def forward(self, window: tuple[int, int] | None = None) -> torch.Tensor:
        if not torch.jit.is_scripting():  # TorchScript skips this branch
            if keeps_values(self.coords.device) and mlp_as_built(self):
                return self.bias(kept_offset_table(self), window)
        return self.bias(self.offset_table(), window)


@torch.jit.unused
def mlp_as_built(bias: ContinuousPositionBias) -> bool:
    """Whether the offset table is a function of the MLP's parameters and the coordinates alone, which
    :func:`kept_offset_table` keys it on: the MLP as built, linears (:func:`~swinlite.fast.blocks.fast_linear_class`)
    around a ReLU, and none of its modules hooked (:func:`~swinlite.fast.blocks.unhooked`). A module replaced or
    hooked after the build may compute anything from the same parameters. Dict reads, on each call."""
    mlp = bias._modules["mlp"]
    if type(mlp) is not nn.Sequential or len(mlp._modules) != 3:
        return False
    first, act, second = mlp._modules.values()
    built = fast_linear_class(first) and type(act) is nn.ReLU and fast_linear_class(second)
    return built and unhooked(mlp, first, act, second)


@torch.jit.unused
def kept_offset_table(bias: ContinuousPositionBias) -> torch.Tensor:
    """``bias.offset_table()``, computed once while its weights, coordinates and the dtype its MLP computes in stay
    as they are (:class:`~swinlite.fast.kept.Kept`). Call where :func:`~swinlite.fast.kept.keeps_values` and
    :func:`mlp_as_built`."""
    dtype = compute_dtype(bias.coords)  # the MLP's linears compute in autocast's dtype, where it is on
    return _TABLES.get(bias, (*bias.mlp.parameters(), bias.coords), dtype, bias.offset_table)


_QKV_BIASES = Kept()  # V2 window attention -> its merged q, k, v bias


@torch.jit.unused
def kept_qkv_bias(attn: WindowAttentionV2, dtype: torch.dtype) -> torch.Tensor | None:
    """``attn.merged_qkv_bias()`` in ``dtype`` (the projection's), kept while the q and v biases are unchanged
    (:class:`~swinlite.fast.kept.Kept`): inference concatenates them once, not in every call (zeros, a
    concatenation and under autocast a conversion per block: launches at batch 1 on a GPU). Call where
    :func:`~swinlite.fast.kept.keeps_values`."""
    if attn.q_bias is None or attn.v_bias is None:
        return None

    def merged() -> torch.Tensor:
        return attn.merged_qkv_bias().to(dtype)

    return _QKV_BIASES.get(attn, (attn.q_bias, attn.v_bias), dtype, merged)


def sdpa_cosine_window_attention(
    qkv: torch.Tensor,
    bias: torch.Tensor,
    mask: torch.Tensor | None,
    batch: int,
    logit_scale: torch.Tensor,
    dropout_p: float,
) -> torch.Tensor:
    """:func:`~swinlite.models.swin.cosine_window_attention` by ``F.scaled_dot_product_attention``.

    cos(q, k)·τ is the dot product of q·τ/|q| and k/|k|, so SDPA at scale 1 runs it, with the bias and the mask as
    its additive mask (:func:`~swinlite.models.swin.window_attn_mask`, the reference's values).

    Args:
        qkv: projections (B*nW, N, 3, heads, hd).
        bias: continuous position bias (heads, N, N).
        mask: (nW, N, N) additive mask or None.
        batch: B.
        logit_scale: log τ per head (heads, 1, 1), clamped at log(100) here.
        dropout_p: dropout on the attention weights.

    Returns:
        (B*nW, heads, N, hd).
    """
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B*nW, heads, N, hd), views without copies
    tau = cosine_tau(logit_scale).to(q.dtype)  # (heads, 1, 1)
    eps = cosine_eps(q.dtype)
    q = q * (tau / torch.linalg.vector_norm(q, dim=-1, keepdim=True).clamp_min(eps))  # q·τ/|q|, as F.normalize
    k = F.normalize(k, dim=-1, eps=eps)
    attn_mask = window_attn_mask(bias, mask, batch)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=1.0)


class FastWindowAttentionV2(DispatchedAttention, WindowAttentionV2):
    """:class:`~swinlite.models.swin.WindowAttentionV2` through SDPA where it fits (module docstring: the table), its
    q, k, v projection through oneDNN where :func:`~swinlite.fast.blocks.onednn_serves` says, as a
    :class:`~swinlite.fast.blocks.FastLinear`'s (V2 adds its own bias to that projection)."""

    def project_qkv(self, x: torch.Tensor) -> torch.Tensor:
        """Window tokens [..., C] -> q, k, v [..., 3C], as ``WindowAttentionV2.project_qkv``: by ``qkv``'s weight
        while it is a linear of the class built (:func:`~swinlite.fast.blocks.fast_linear_class`), unhooked; else by
        its call (``called_qkv``)."""
        if not torch.jit.is_scripting():  # TorchScript skips this branch
            qkv = self._modules["qkv"]
            if not (fast_linear_class(qkv) and unhooked(qkv)):
                return self.called_qkv(x)
            if keeps_values(x.device):
                return fast_linear(x, qkv.weight, kept_qkv_bias(self, compute_dtype(x)))
        return fast_linear(x, self.qkv.weight, self.merged_qkv_bias())

    def _run(
        self,
        kernel: str,
        qkv: torch.Tensor,
        bias: torch.Tensor,
        mask: torch.Tensor | None,
        batch: int,
        dropout_p: float,
        logit_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The cosine attention by ``kernel``, with the module's log τ or ``logit_scale`` (the timing's detached)."""
        if logit_scale is None:
            logit_scale = self.logit_scale
        if kernel == "sdpa":
            return sdpa_cosine_window_attention(qkv, bias, mask, batch, logit_scale, dropout_p)
        return cosine_window_attention(qkv, bias, mask, batch, logit_scale, dropout_p)  # also for V1's "recomputed"

    @torch.jit.unused
    def _fastest(
        self, qkv: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None, batch: int, dropout_p: float
    ) -> str:
        """The faster of :data:`CUDA_CANDIDATES` for this call (:func:`~swinlite.fast.blocks.fastest_attention`)."""
        logit_scale = self.logit_scale.detach()  # the timing runs backward: not into the parameter's gradient
        return fastest_attention(
            "cosine window attention",
            CUDA_CANDIDATES,
            lambda name, q, b: self._run(name, q, b, mask, batch, dropout_p, logit_scale),
            lambda q, b, m: cosine_window_attention(q, b, m, batch, logit_scale.float(), 0.0),
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
        tau = cosine_tau(self.logit_scale)  # (heads, 1, 1)
        qkv_bias = kept_qkv_bias(self, plan.dtype)
        qkv, proj = self.qkv, self.proj
        return window_attention_rows(x, qkv.weight, qkv_bias, proj.weight, proj.bias, bias, mask, 1.0, plan, tau=tau)


@register_notrace_module  # as SwinV2Block: the padding and shift depend on the input size
class FastSwinV2Block(SwinV2Block, GatheredWindowsBlock):
    """:class:`~swinlite.models.swin.SwinV2Block` with shift + partition (and back) as one gather each way
    (:class:`~swinlite.fast.blocks.GatheredWindowsBlock`'s ``_attn``), and its attention and MLP in row blocks for
    CPU inference."""

    fast_attention = FastWindowAttentionV2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, H, W, C] -> [B, H, W, C], res-post-norm as ``SwinV2Block.forward``."""
        if not torch.jit.is_scripting():  # TorchScript skips this branch
            plan = self._row_blocks(x)
            if plan is not None:  # CPU inference: attention and x + norm2(mlp(x)) in row blocks
                x = x + self.norm1(self._attn(x, plan))
                return self.mlp.forward_row_blocks(x, self.norm2, plan, post_norm=True)
        x = x + self.drop_path1(self.norm1(self._attn(x)))  # res-post-norm: the norm ends the branch
        return x + self.drop_path2(self.norm2(self.mlp(x)))
