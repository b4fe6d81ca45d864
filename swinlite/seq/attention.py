"""Multi-head self-attention over sequences with relative position representations (Shaw et al., 2018).

Sign conventions (both documented once here):

* Shaw mode (``rel_k``/``rel_v``): the embedding row for query i and key j is
  ``r(i, j) = clamp(j - i, -D, D) + D`` -- key minus query, so row ``D`` is "same position", rows
  below ``D`` are keys in the past and rows above are keys in the future.
* Bias mode (:class:`OffsetBiasTable`, the table of Swin's :class:`RelativePositionBias` with a 1-D window
  ``(D + 1,)``): the table row is ``clamp(i - j, -D, D) + D`` -- query minus key, the convention of the Swin index
  (``coords_i - coords_j``), so for ``L <= D + 1`` the bias is exactly that module's with the same table.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..models.checks import as_int, autocast_available
from ..models.swin import kernel_dropout, recording_graph
from .buffered import buffered_relative_attention
from .skew import relative_attention, relative_logits, relative_values

# Above this many (L * L * head_dim) elements the (L, L, d) gathered table stops paying; see "auto" below.
_GATHER_MAX_ELEMENTS = 2**18


class OffsetBiasTable(nn.Module):
    """Bias mode's learnable scalar per (offset ``i - j`` in -D..D, head): ``table`` (2D + 1, heads), initialised as
    Swin's :class:`~swinlite.models.swin.RelativePositionBias` table (trunc-normal, std .02). Unlike that module it
    holds no (N, N) index: the bias is built for each length from the table alone (O(L) memory, where a
    ``(D + 1,)``-window index took (D + 1)^2 longs: 512 MiB a layer at ``max_len=8192``)."""

    def __init__(
        self,
        max_distance: int,
        num_heads: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.empty(2 * max_distance + 1, num_heads, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.table, std=0.02)


def relative_distance_index(length: int, max_distance: int, device: torch.device | None = None) -> torch.Tensor:
    """Shaw embedding rows ``r(i, j) = clamp(j - i, -D, D) + D`` for all pairs, shape (L, L), long."""
    pos = torch.arange(length, device=device)
    return (pos[None, :] - pos[:, None]).clamp(-max_distance, max_distance) + max_distance  # (L, L)


class RelPosSelfAttention1d(nn.Module):
    """Self-attention on [B, L, C] with learned relative positions, for any length up to ``max_len``.

    Shaw mode (default), with ``r(i, j) = clamp(j - i, -D, D) + D`` and d = head_dim::

        logits[i, j] = q_i . (k_j + rel_k[r(i, j)]) / sqrt(d)          softmax over j
        out_i = sum_j a_ij (v_j + rel_v[r(i, j)])                      heads concatenated -> proj

    Bias mode (``mode="bias"``) replaces both relative terms by one learned scalar per (head, clipped offset
    ``clamp(i - j, -D, D)``), added to the logits: Swin's table of one row per offset, in 1-D (not T5's
    log-spaced buckets of distance). Nothing loops over positions; the key term is computed
    either by gathering an (L, L, d) embedding table (``method="gather"``) or by projecting q onto
    the offset embeddings and shifting the result into place, in query blocks
    (``method="skew"``, :mod:`~swinlite.seq.skew`, O(L d) extra memory besides the
    logits); the value term likewise. ``"auto"`` gathers while the (L, L, d) table is small and skews
    above. With the skew method no (B, H, L, L) tensor is built for the key term, nor, without
    autograd (``torch.no_grad()``, ``torch.inference_mode()``), for the value term
    (:func:`~swinlite.seq.buffered.buffered_relative_attention`). While ``torch.jit.trace`` or ``torch.export``
    records the forward (:func:`~swinlite.models.swin.recording_graph`) every method gathers, and bias mode
    gathers its table too: the recorded graph then holds for every length and grad mode (the skew kernels loop over
    query blocks, unrolled for the recorded length), so a trace runs at other lengths and an export takes a dynamic
    length, at the gather's O(L^2 d) memory. A trace does not check its inputs: torch records the input checks'
    Python branches as constants, and drops from the graph an assert op whose result nothing uses
    (``torch._assert_async``), so a traced layer runs a sequence longer than ``max_len`` (offsets clipped at D) and
    applies a (1, L) ``key_padding_mask`` to every sequence, silently; check inputs before calling a trace (an
    export keeps its shape guards).

    Args:
        dim: channels C.
        num_heads: attention heads; must divide ``dim``.
        max_len: longest sequence accepted.
        max_distance: clipping distance D; ``None`` means ``max_len - 1`` (no clipping). A D above it builds
            table rows no offset reads; it is kept as given, so that a state dict saved with it loads.
        value_rel: also add ``rel_v`` to the values (Shaw mode only).
        mode: ``"shaw"`` or ``"bias"``.
        method: ``"auto"``, ``"gather"`` or ``"skew"``; bias mode takes only ``"auto"``.
        qkv_bias: learn biases for q, k, v.
        attn_drop: dropout on attention weights: the ``attn_drop`` module's rate while it is in training mode, by
            its own flag (MC dropout: the layer in eval, its ``nn.Dropout`` modules in training), as Swin's attention
            drops them (:func:`~swinlite.models.swin.kernel_dropout`); a module replaced or hooked after the build is
            called on the whole (B, H, L, L) weights.
        proj_drop: dropout after the output projection.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        max_len: int,
        max_distance: int | None = None,
        value_rel: bool = False,
        mode: str = "shaw",
        method: str = "auto",
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dim, num_heads, max_len, max_distance = _check_config(
            dim, num_heads, max_len, max_distance, value_rel, mode, method
        )
        dd = {"device": device, "dtype": dtype}
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.max_len = max_len
        self.max_distance = max_len - 1 if max_distance is None else max_distance
        self.mode = mode
        self.method = method
        self.q = nn.Linear(dim, dim, bias=qkv_bias, **dd)
        self.k = nn.Linear(dim, dim, bias=qkv_bias, **dd)
        self.v = nn.Linear(dim, dim, bias=qkv_bias, **dd)
        num_rows = 2 * self.max_distance + 1
        shaw = mode == "shaw"
        self.rel_k = nn.Embedding(num_rows, self.head_dim, **dd) if shaw else None
        self.rel_v = nn.Embedding(num_rows, self.head_dim, **dd) if shaw and value_rel else None
        self.rel_bias = None if shaw else OffsetBiasTable(self.max_distance, num_heads, **dd)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim, **dd)
        self.proj_drop = nn.Dropout(proj_drop)
        self.reset_parameters()

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """The relative position tables (``rel_k``, ``rel_v``, ``rel_bias``), excluded from weight decay as Swin's."""
        return {n for n, _ in self.named_parameters() if n.startswith(("rel_k.", "rel_v.", "rel_bias."))}

    def reset_parameters(self) -> None:
        """The relative embeddings (trunc-normal, std .02, after ``nn.Embedding``'s own init); the linears and the
        bias table reset themselves, so ``module.apply(reset)`` after ``to_empty()`` initialises as construction."""
        for emb in (self.rel_k, self.rel_v):
            if emb is not None:
                nn.init.trunc_normal_(emb.weight, std=0.02)

    def forward(
        self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        """Attend over the sequence.

        Args:
            x: tokens [B, L, C], L <= max_len.
            key_padding_mask: bool [B, L], True at padding; those keys are never attended.
            causal: forbid attending to later positions (j > i); a bool.

        Returns:
            Tokens [B, L, C]. A query whose keys are all masked gets a finite but meaningless output.

        Raises:
            ValueError: for a wrong shape, L outside [1, max_len], x not of the layer's dtype (outside autocast), a
                mask not bool (B, L) or ``causal`` not a bool; in eager only, a ``torch.jit.trace`` of the layer
                checks nothing (see the class docstring).
        """
        self._check_input(x, key_padding_mask, causal)
        B, L, C = x.shape
        heads, d = self.num_heads, self.head_dim
        q, k, v = (lin(x).view(B, L, heads, d).transpose(1, 2) for lin in (self.q, self.k, self.v))  # (B, H, L, d)
        blocked = _blocked_pairs(L, key_padding_mask, causal, x.device)  # (B or 1, 1, L, L) bool or None
        # attn_drop's rate by its own mode (MC dropout: the model in eval, its nn.Dropout modules in training); None
        # where it is replaced or hooked: it is called on the whole (B, H, L, L) weights, as Swin's attention calls it
        p = kernel_dropout(self.attn_drop)
        if p is None or self.mode == "bias" or self._use_gather(L):
            out = self._attend_full(q, k, v, blocked, p)  # (B, H, L, d)
        elif self.rel_v is None:  # skewed relative logits per query block, straight into SDPA
            rel_k = _compute_dtype(self.rel_k.weight, q)
            out = relative_attention(q * d**-0.5, k, v, rel_k, self.max_distance, blocked, p)
        elif not torch.is_grad_enabled():  # value term at inference: query blocks in reused buffers
            rel_k, rel_v = (_compute_dtype(emb.weight, q) for emb in (self.rel_k, self.rel_v))
            out = buffered_relative_attention(q * d**-0.5, k, v, rel_k, rel_v, self.max_distance, blocked, p)
        else:
            out = self._attend_full(q, k, v, blocked, p)
        out = out.transpose(1, 2).reshape(B, L, C)  # (B, L, H*d)
        return self.proj_drop(self.proj(out))

    def _attend_full(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocked: torch.Tensor | None, p: float | None
    ) -> torch.Tensor:
        """Attention with the whole (B, H, L, L) relative term: short sequences, bias mode, the value term; the
        weights dropped at rate ``p``, or, for ``p=None`` (:func:`~swinlite.models.swin.kernel_dropout`), written out
        and passed through ``attn_drop``."""
        L = q.shape[2]
        q = q * self.head_dim**-0.5  # before the products, as the other paths: fp16's q.kᵀ overflowed unscaled
        bias = self._key_term(q, L) if self.mode == "shaw" else self._scalar_bias(L)  # (.., H, L, L)
        if self.rel_v is None and p is not None:  # SDPA, at attn_drop's rate: it adds the mask to q.kᵀ in fp32
            # (CPU) and gives a fully masked row zeros
            if torch.onnx.is_in_onnx_export():  # no backward in ONNX; torch's exporter fails on a mask needing grad
                bias = bias.detach()
            # filled in the mask's dtype: bias mode's fp32 table under autocast, filled with fp32's min, became -inf in
            # fp16 / bf16, and a fully masked row of -inf may give NaN on CUDA (its memory-efficient kernel)
            bias = bias.to(q.dtype)
            if blocked is not None:
                bias = bias.masked_fill(blocked, torch.finfo(bias.dtype).min)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p, scale=1.0)
        logits = q @ k.transpose(-2, -1) + bias  # (B, H, L, L), a fresh tensor
        if blocked is not None:  # after the sum, as the buffered kernel: fp16's min plus a logit below -16 is -inf,
            logits.masked_fill_(blocked, torch.finfo(logits.dtype).min)  # and a row of -inf a NaN from softmax
        attn = self.attn_drop(logits.softmax(dim=-1))  # (B, H, L, L)
        out = attn @ v  # (B, H, L, d)
        return out if self.rel_v is None else out + self._value_term(attn, L)

    def _use_gather(self, length: int) -> bool:
        """Whether the Shaw terms gather an (L, L, d) table: for ``method="gather"``, for ``"auto"`` while that table
        is small, and whenever a graph is recorded (its graph holds for every length and grad mode)."""
        if recording_graph() or self.method == "gather":
            return True
        return self.method == "auto" and length * length * self.head_dim <= _GATHER_MAX_ELEMENTS

    def _key_term(self, q: torch.Tensor, length: int) -> torch.Tensor:
        """The relative key term ``q_i . rel_k[r(i, j)]`` for (scaled) queries q, shape (B, H, L, L)."""
        if self._use_gather(length):
            emb = self.rel_k(relative_distance_index(length, self.max_distance, q.device))  # (L, L, d)
            return torch.einsum("bhid,ijd->bhij", q, emb)
        return relative_logits(q, self.rel_k.weight, self.max_distance)

    def _value_term(self, attn: torch.Tensor, length: int) -> torch.Tensor:
        """The relative value term ``sum_j a_ij rel_v[r(i, j)]``, shape (B, H, L, d)."""
        if self._use_gather(length):
            emb = self.rel_v(relative_distance_index(length, self.max_distance, attn.device))  # (L, L, d)
            return torch.einsum("bhij,ijd->bhid", attn, emb)
        return relative_values(attn, self.rel_v.weight, self.max_distance)

    def _scalar_bias(self, length: int) -> torch.Tensor:
        """Bias mode: ``table[clamp(i - j, -D, D) + D, h]``, shape (1, H, L, L), contiguous.

        Each head's bias is a Toeplitz matrix: row i reads the per-offset column backwards from offset
        i. It is built as sliding windows over one column per head, flipped (a single copy, no (L, L)
        index). Contiguous and 4-D on purpose: on CPU, ``scaled_dot_product_attention`` copies a
        strided mask and takes a slow path for a 3-D one. A recorded or compiled graph gathers instead, with the
        same result, so that it serves every length.
        """
        D, table = self.max_distance, self.rel_bias.table
        # unfold's graph holds for one length: torch.compile specialised L on it, a graph per length
        if recording_graph() or torch.compiler.is_compiling():
            rows = 2 * D - relative_distance_index(length, D, table.device)  # clamp(i - j, -D, D) + D: (L, L)
            return table[rows].permute(2, 0, 1).contiguous()[None]  # (1, H, L, L)
        offsets = torch.arange(length - 1, -length, -1, device=table.device)  # entry n: i - j = L-1-n
        column = table[offsets.clamp(-D, D) + D].T.contiguous()  # (H, 2L-1)
        return column.unfold(1, length, 1).flip(1)[None]  # [h, i, j] = column[h, L-1-i+j]: (1, H, L, L)

    def _check_input(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None, causal: bool) -> None:
        dim = self.num_heads * self.head_dim
        if x.ndim != 3 or x.shape[-1] != dim:
            raise ValueError(f"expected x of shape (B, L, {dim}), got {tuple(x.shape)}")
        if not 1 <= x.shape[1] <= self.max_len:
            raise ValueError(f"sequence length L={x.shape[1]} must be in [1, max_len={self.max_len}]")
        check_input_dtype(x, self.q.weight.dtype, "layer")
        if not isinstance(causal, bool):
            raise ValueError(f"causal must be a bool, got {causal!r}")
        if key_padding_mask is None:
            return
        if not isinstance(key_padding_mask, torch.Tensor):
            raise ValueError(
                f"key_padding_mask must be a bool tensor of shape (B, L) = {tuple(x.shape[:2])}, "
                f"got {type(key_padding_mask).__name__}"
            )
        if key_padding_mask.shape != x.shape[:2]:
            raise ValueError(
                f"key_padding_mask must have shape (B, L) = {tuple(x.shape[:2])}, got {tuple(key_padding_mask.shape)}"
            )
        if key_padding_mask.dtype != torch.bool:
            raise ValueError(f"key_padding_mask must be a bool tensor (True = padding), got {key_padding_mask.dtype}")


def check_input_dtype(x: torch.Tensor, dtype: torch.dtype, owner: str) -> None:
    """ValueError unless ``x`` is floating-point and of ``dtype`` (under autocast, of any floating dtype it casts: all
    but float64), worded as Swin's input check (:func:`~swinlite.models.checks.check_image_input`); ``owner`` names
    the module."""
    if not x.is_floating_point():
        raise ValueError(f"expected a floating-point input of the {owner}'s dtype {dtype}, got dtype {x.dtype}")
    if x.dtype == dtype:
        return
    device = x.device.type
    if x.dtype == torch.float64 or not (autocast_available(device) and torch.is_autocast_enabled(device)):
        raise ValueError(
            f"input dtype {x.dtype} differs from the {owner}'s {dtype}: convert one of them (or use autocast, which "
            "casts all but float64)"
        )


def _compute_dtype(table: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """An embedding table in the queries' dtype, for the kernels that write with ``out=``.

    Autocast does not cast the operands of an ``out=`` matmul, so under autocast an fp32 table would
    meet bf16/fp16 queries there; the cast is the one autocast applies to the other paths' matmuls
    (and a no-op without autocast, where q has the parameters' dtype).
    """
    return table.to(q.dtype)


def _blocked_pairs(
    length: int, key_padding_mask: torch.Tensor | None, causal: bool, device: torch.device
) -> torch.Tensor | None:
    """True where query i must not see key j: (B, 1, L, L), (1, 1, L, L) or None."""
    blocked = None
    if causal:
        pos = torch.arange(length, device=device)
        blocked = (pos[None, :] > pos[:, None])[None, None]  # (1, 1, L, L)
    if key_padding_mask is not None:
        padded = key_padding_mask[:, None, None, :].expand(-1, -1, length, -1)  # (B, 1, L, L), a view
        blocked = padded if blocked is None else blocked | padded
    return blocked


def _check_config(
    dim: int, num_heads: int, max_len: int, max_distance: int | None, value_rel: bool, mode: str, method: str
) -> tuple[int, int, int, int | None]:
    """ValueError naming the argument; returns ``dim``, ``num_heads``, ``max_len`` and ``max_distance`` as ints."""
    dim, num_heads, max_len = (
        _check_int(n, v, 1) for n, v in (("dim", dim), ("num_heads", num_heads), ("max_len", max_len))
    )
    if max_distance is not None:
        max_distance = _check_int("max_distance", max_distance, 0, " or None")
    if dim % num_heads != 0:
        raise ValueError(f"dim ({dim}) must be divisible by num_heads ({num_heads})")
    if mode not in ("shaw", "bias"):
        raise ValueError(f"mode must be 'shaw' or 'bias', got {mode!r}")
    if method not in ("auto", "gather", "skew"):
        raise ValueError(f"method must be 'auto', 'gather' or 'skew', got {method!r}")
    if value_rel and mode == "bias":
        raise ValueError("value_rel=True needs mode='shaw': bias mode has no value embeddings")
    if method != "auto" and mode == "bias":
        raise ValueError(f"method={method!r} applies to mode='shaw': bias mode adds its table to the logits as is")
    return dim, num_heads, max_len, max_distance


def _check_int(name: str, value: object, minimum: int, alternative: str = "") -> int:
    """``value`` as a Python int where it is an integer of any kind (:func:`~swinlite.models.checks.as_int`) and at
    least ``minimum``; a ValueError for a bool, a float or a smaller one."""
    number = as_int(value)
    if number is None or number < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}{alternative}, got {value!r}")
    return number
