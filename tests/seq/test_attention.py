"""RelPosSelfAttention1d against a naive per-(i, j) loop of the Shaw et al. formulas."""

import itertools

import numpy as np
import pytest
import timm.optim
import torch
from reference import naive_rel_pos_attention_1d
from torch._dynamo.testing import CompileCounter

from swinlite.models.swin import RelativePositionBias
from swinlite.seq import RelPosSelfAttention1d
from swinlite.seq.skew import relative_logits, relative_values, skew, unskew

DIM, HEADS, MAX_LEN = 8, 2, 9


def make(seed: int = 0, **kwargs) -> RelPosSelfAttention1d:
    torch.manual_seed(seed)
    attn = RelPosSelfAttention1d(DIM, HEADS, MAX_LEN, **kwargs).double()
    with torch.no_grad():  # tables larger than the init so the relative terms matter in the comparison
        for p in attn.parameters():
            p.normal_(0, 0.5)
    return attn


def padding_mask(batch: int, length: int) -> torch.Tensor:
    mask = torch.zeros(batch, length, dtype=torch.bool)
    mask[0, length - 2 :] = True  # first sequence right-padded, second full length
    return mask


@pytest.mark.parametrize(("rows", "length"), [(1, 5), (2, 2), (3, 7), (6, 6)])
def test_skew_and_unskew_place_offsets(rows, length):
    width = length + rows - 1
    rel = torch.randn(3, rows, width)
    out = skew(rel)
    assert out.shape == (3, rows, length)
    for t, j in itertools.product(range(rows), range(length)):
        assert torch.equal(out[:, t, j], rel[:, t, j - t + rows - 1])
    attn = torch.randn(3, rows, length)
    expected = torch.zeros(3, rows, width)
    for t, j in itertools.product(range(rows), range(length)):
        expected[:, t, j - t + rows - 1] = attn[:, t, j]
    assert torch.equal(unskew(attn), expected)


@pytest.mark.parametrize("block", [1, 3, 7, 128])  # 3 does not divide L = 7: padded last block
@pytest.mark.parametrize("max_distance", [1, 6, 20])
def test_blocked_relative_terms_and_gradients_match_naive_loop(block, max_distance):
    B, H, L, d, D = 2, 3, 7, 4, max_distance
    inputs = [torch.randn(shape, dtype=torch.float64, requires_grad=True) for shape in ((B, H, L, d), (B, H, L, L))]
    q, attn = inputs
    weight = torch.randn(2 * D + 1, d, dtype=torch.float64, requires_grad=True)
    logits, values = torch.zeros(B, H, L, L, dtype=torch.float64), torch.zeros(B, H, L, d, dtype=torch.float64)
    for i, j in itertools.product(range(L), range(L)):
        e = weight[min(max(j - i, -D), D) + D]
        logits[:, :, i, j] = q[:, :, i] @ e
        values[:, :, i] += attn[:, :, i, j, None] * e
    ours = relative_logits(q, weight, D, block), relative_values(attn, weight, D, block)
    torch.testing.assert_close(ours[0], logits)
    torch.testing.assert_close(ours[1], values)
    probe = [torch.randn_like(logits), torch.randn_like(values)]
    grads = torch.autograd.grad(sum((o * p).sum() for o, p in zip(ours, probe, strict=True)), [q, attn, weight])
    expected = torch.autograd.grad(
        sum((o * p).sum() for o, p in zip((logits, values), probe, strict=True)), [q, attn, weight]
    )
    for g, e in zip(grads, expected, strict=True):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("grad", [True, False])  # without autograd the skew method runs the buffered kernel
@pytest.mark.parametrize("method", ["gather", "skew"])
@pytest.mark.parametrize("max_distance", [None, 2])
@pytest.mark.parametrize("value_rel", [False, True])
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_shaw_matches_naive_loop(grad, method, max_distance, value_rel, pad, causal):
    attn = make(max_distance=max_distance, value_rel=value_rel, method=method)
    x = torch.randn(2, 7, DIM, dtype=torch.float64)  # L = 7 < max_len: run-time length below the maximum
    mask = padding_mask(2, 7) if pad else None
    with torch.set_grad_enabled(grad):
        out = attn(x, mask, causal)
    torch.testing.assert_close(out, naive_rel_pos_attention_1d(attn, x, mask, causal))


@pytest.mark.parametrize(
    ("grad", "value_rel", "max_distance", "pad", "causal"),
    [
        (True, False, None, False, False),
        (True, False, 5, True, True),
        (True, False, None, True, False),
        (False, False, None, False, False),
        (False, True, 5, True, False),
        (False, True, None, True, True),
        (False, False, 5, False, True),
    ],
)
def test_long_sequence_query_blocks_match_naive_loop(grad, value_rel, max_distance, pad, causal):
    """L = 70: the skew paths work in query blocks of 64, the last one padded."""
    torch.manual_seed(0)
    attn = RelPosSelfAttention1d(DIM, HEADS, 70, max_distance=max_distance, value_rel=value_rel, method="skew")
    attn = attn.double()
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(0, 0.5)
    x = torch.randn(2, 70, DIM, dtype=torch.float64)
    mask = padding_mask(2, 70) if pad else None
    with torch.set_grad_enabled(grad):
        out = attn(x, mask, causal)
    torch.testing.assert_close(out, naive_rel_pos_attention_1d(attn, x, mask, causal))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("value_rel", [False, True])
def test_long_sequence_inference_under_autocast_matches_autograd_path(dtype, value_rel):
    """fp32 tables meet bf16/fp16 queries in the ``out=`` matmuls of the inference kernels (skew path, L = 70)."""
    torch.manual_seed(0)
    attn = RelPosSelfAttention1d(DIM, HEADS, 70, value_rel=value_rel, method="skew")
    x = torch.randn(2, 70, DIM)
    mask = padding_mask(2, 70)
    with torch.autocast("cpu", dtype=dtype):
        expected = attn(x, mask, causal=True)  # autograd: SDPA or the full (L, L) terms, cast by autocast
        with torch.inference_mode():
            out = attn(x, mask, causal=True)
    assert out.dtype == expected.dtype == dtype
    torch.testing.assert_close(out, expected.detach(), atol=2e-2, rtol=2e-2)


@pytest.mark.slow
@pytest.mark.parametrize(("value_rel", "grad"), [(True, False), (False, True)])
def test_inductor_compiles_the_query_block_kernels_as_eager(value_rel, grad):
    """L = 65, causal: the buffered kernel (inference) and SDPA per query block (training) under inductor. The
    causal mask padded to whole blocks with F.pad made inductor write C++ that did not compile."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    attn = RelPosSelfAttention1d(DIM, HEADS, 65, value_rel=value_rel, method="skew").eval()
    x = torch.randn(2, 65, DIM)
    mask = padding_mask(2, 65)
    with torch.set_grad_enabled(grad):
        out = torch.compile(attn, backend="inductor", dynamic=False)(x, mask, causal=True)
        torch.testing.assert_close(out, attn(x, mask, causal=True))


@pytest.mark.parametrize("grad", [True, False])  # without autograd the value term runs the buffered kernel
@pytest.mark.parametrize("kwargs", [dict(value_rel=True, method="skew"), dict(mode="bias")])
def test_compiled_layer_serves_new_lengths_without_recompiling(kwargs, grad):
    """method="skew" with value_rel: the query-block windows came from ``unfold`` with step T = min(64, L), and bias
    mode built its (L, L) bias by ``unfold`` of size L; torch.compile specialised on both, so every new length
    recompiled (past 8 lengths, eager fallback)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    attn = RelPosSelfAttention1d(DIM, HEADS, MAX_LEN, max_distance=2, **kwargs).eval()
    counter = CompileCounter()  # dynamo only, no inductor: counts graphs
    compiled = torch.compile(attn, backend=counter)
    with torch.set_grad_enabled(grad):
        for length in (5, 6, 7, 9):
            x = torch.randn(2, length, DIM)
            torch.testing.assert_close(compiled(x), attn(x))
    assert counter.frame_count <= 2  # the first length static, the second one dynamic for all others


def test_long_sequence_gradients_match_naive_loop():
    """L = 70 under autograd: SDPA per query block (two blocks, the last padded) has the loop's gradients."""
    torch.manual_seed(0)
    attn = RelPosSelfAttention1d(DIM, HEADS, 70, method="skew").double()
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(0, 0.5)
    x = torch.randn(2, 70, DIM, dtype=torch.float64)
    mask = padding_mask(2, 70)
    params = [attn.q.weight, attn.k.weight, attn.v.weight, attn.rel_k.weight]
    grads = torch.autograd.grad(attn(x, mask, causal=True).square().sum(), params)
    expected = torch.autograd.grad(naive_rel_pos_attention_1d(attn, x, mask, causal=True).square().sum(), params)
    for g, e in zip(grads, expected, strict=True):
        assert g.abs().sum() > 0
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("value_rel", [False, True])
def test_attention_dropout_reaches_both_terms(grad, value_rel):
    """With every attention weight dropped, neither v nor rel_v reaches the output: only proj's bias is left."""
    attn = make(value_rel=value_rel, method="skew")
    attn.attn_drop.p = 1.0
    x = torch.randn(2, 7, DIM, dtype=torch.float64)
    with torch.set_grad_enabled(grad):
        out = attn.train()(x)
    torch.testing.assert_close(out, attn.proj.bias.expand_as(out))
    assert not torch.allclose(attn.eval()(x), out)


@pytest.mark.parametrize("grad", [True, False])  # without autograd, Shaw's value term takes the buffered kernel
@pytest.mark.parametrize("kwargs", [{"method": "gather"}, {"method": "skew"}, {"method": "skew", "value_rel": True},
                                    {"mode": "bias"}])  # fmt: skip
def test_attention_dropout_follows_the_attn_drop_module(kwargs, grad):
    """The rate was read from the layer's training flag, as Swin's was: MC dropout (the layer in eval, its nn.Dropout
    in training) dropped nothing, attn_drop.eval() in a layer in training was ignored, a replaced attn_drop
    (nn.Identity) raised AttributeError 'p' and a hook on it never ran. Now by kernel_dropout, as Swin's attention."""
    attn, x = make(**kwargs), torch.randn(2, 7, DIM, dtype=torch.float64)
    attn.attn_drop.p = 0.5
    with torch.set_grad_enabled(grad):
        plain = attn.eval()(x)
        attn.attn_drop.train()  # MC dropout
        assert not torch.allclose(attn(x), attn(x))
        attn.train().attn_drop.eval()
        torch.testing.assert_close(attn(x), plain)
        attn.attn_drop = torch.nn.Identity()
        torch.testing.assert_close(attn(x), plain)
        calls = []
        attn.attn_drop.register_forward_hook(lambda module, args, out: calls.append(out.shape))
        torch.testing.assert_close(attn(x), plain)
    assert calls == [(2, HEADS, 7, 7)]


RECORDED = [{"method": "skew"}, {"method": "skew", "value_rel": True}, {"mode": "bias"}]


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # the input checks, constant in the trace
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("kwargs", RECORDED)
def test_trace_at_one_length_runs_at_another(kwargs, grad):
    """Traced at L = 70 (two query blocks of the skew kernels), called at L = 150 (three): the trace records the
    gather, whose graph holds for every length and grad mode. The skew kernels' loop over query blocks was recorded
    unrolled for L = 70 (rows >= 128 wrong) and depended on the grad mode."""
    torch.manual_seed(0)
    attn = RelPosSelfAttention1d(DIM, HEADS, 150, max_distance=5, **kwargs)
    x, mask = torch.randn(2, 70, DIM), padding_mask(2, 70)
    longer = torch.randn(2, 150, DIM), padding_mask(2, 150)
    with torch.set_grad_enabled(grad):
        traced = torch.jit.trace(attn, (x, mask))  # checks the trace against a second run
        torch.testing.assert_close(traced(*longer), attn(*longer))


@pytest.mark.parametrize("kwargs", RECORDED)
def test_export_with_a_dynamic_length(kwargs):
    """torch.export with L dynamic records the gather too: the skew kernels and bias mode's unfold specialised L."""
    torch.manual_seed(0)
    attn = RelPosSelfAttention1d(DIM, HEADS, 150, max_distance=5, **kwargs).eval()
    length = torch.export.Dim("L", max=150)
    shapes = {"x": {1: length}, "key_padding_mask": {1: length}, "causal": None}
    args = (torch.randn(2, 70, DIM), padding_mask(2, 70))
    exported = torch.export.export(attn, args, {"causal": True}, dynamic_shapes=shapes).module()
    for length in (2, 150):
        x, mask = torch.randn(2, length, DIM), padding_mask(2, length)
        torch.testing.assert_close(exported(x, mask, causal=True), attn(x, mask, causal=True))


@pytest.mark.filterwarnings("ignore:# The axis name")  # torch's exporter on the one dynamic dimension named twice
@pytest.mark.parametrize("kwargs", [{"method": "skew"}])  # a mask that needs grad to SDPA (bias mode: the same line)
def test_onnx_export_with_a_dynamic_length_matches_onnxruntime(kwargs, tmp_path):
    """torch.onnx.export (the dynamo exporter) failed with torch's ConversionError on an SDPA mask that needs grad
    (the key term, bias mode); the layer detaches it while exporting to ONNX, which has no backward."""
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    attn = RelPosSelfAttention1d(DIM, HEADS, 150, max_distance=5, **kwargs).eval()
    length = torch.export.Dim("L", max=150)
    path = tmp_path / "attn.onnx"
    args = (torch.randn(2, 70, DIM), padding_mask(2, 70))
    shapes = {"x": {1: length}, "key_padding_mask": {1: length}}
    torch.onnx.export(attn, args, path, input_names=["x", "key_padding_mask"], dynamic_shapes=shapes, verbose=False)
    session = ort.InferenceSession(path)
    for length in (3, 150):
        x, mask = torch.randn(2, length, DIM), padding_mask(2, length)
        (out,) = session.run(None, {"x": x.numpy(), "key_padding_mask": mask.numpy()})
        torch.testing.assert_close(torch.from_numpy(out), attn(x, mask).detach())


@pytest.mark.parametrize("max_distance", [None, 3])
@pytest.mark.parametrize("causal", [False, True])
def test_bias_mode_matches_naive_loop(max_distance, causal):
    attn = make(max_distance=max_distance, mode="bias")
    x = torch.randn(2, MAX_LEN, DIM, dtype=torch.float64)
    mask = padding_mask(2, MAX_LEN)
    torch.testing.assert_close(attn(x, mask, causal), naive_rel_pos_attention_1d(attn, x, mask, causal))


def test_bias_mode_uses_relative_position_bias_convention():
    """Swin's RelativePositionBias with a 1-D window (D + 1,) and the same table gives the same bias (its index)."""
    attn = make(max_distance=4, mode="bias")
    swin = RelativePositionBias((attn.max_distance + 1,), HEADS).double()
    with torch.no_grad():
        swin.table.copy_(attn.rel_bias.table)
    torch.testing.assert_close(attn._scalar_bias(attn.max_distance + 1), swin()[None])


def test_bias_mode_holds_no_quadratic_buffer():
    """The bias mode held a RelativePositionBias whose unused (D + 1, D + 1) index took 512 MiB a layer at 8192."""
    attn = RelPosSelfAttention1d(16, 2, max_len=8192, mode="bias")
    assert sum(b.numel() for b in attn.buffers()) == 0 and attn.rel_bias.table.shape == (2 * 8191 + 1, 2)


@pytest.mark.parametrize("length", [1, 2, MAX_LEN])
def test_all_paths_agree_at_any_length(length):
    x = torch.randn(2, length, DIM, dtype=torch.float64)
    outs = [make(value_rel=True, method=m)(x, causal=True) for m in ("gather", "skew", "auto")]
    torch.testing.assert_close(outs[0], outs[1])
    torch.testing.assert_close(outs[0], outs[2])


@pytest.mark.parametrize("method", ["gather", "skew"])
def test_gradients_reach_projections_and_tables(method):
    attn = make(max_distance=3, value_rel=True, method=method)
    params = [attn.q.weight, attn.k.weight, attn.v.weight, attn.rel_k.weight, attn.rel_v.weight]
    assert len({p.data_ptr() for p in params[:3]}) == 3, "q, k, v must be distinct parameters"
    x = torch.randn(2, 7, DIM, dtype=torch.float64)
    mask = padding_mask(2, 7)
    grads = torch.autograd.grad(attn(x, mask, causal=True).square().sum(), params)
    expected = torch.autograd.grad(naive_rel_pos_attention_1d(attn, x, mask, causal=True).square().sum(), params)
    for g, e in zip(grads, expected, strict=True):
        assert g.abs().sum() > 0
        torch.testing.assert_close(g, e)
    assert not torch.allclose(grads[0], grads[1]) and not torch.allclose(grads[1], grads[2])


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize(("mode", "method"), [("shaw", "gather"), ("shaw", "skew"), ("bias", "auto")])
@pytest.mark.parametrize("causal", [False, True])
def test_right_padding_does_not_change_real_positions(grad, mode, method, causal):
    attn = make(max_distance=3, value_rel=mode == "shaw", mode=mode, method=method)
    x = torch.randn(2, 5, DIM, dtype=torch.float64)
    padded = torch.cat([x, 100 * torch.randn(2, 4, DIM, dtype=torch.float64)], dim=1)  # junk in the padding
    mask = torch.zeros(2, 9, dtype=torch.bool)
    mask[:, 5:] = True
    with torch.set_grad_enabled(grad):
        out = attn(padded, mask, causal)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out[:, :5], attn(x, causal=causal))


def force_negative_logits(attn: RelPosSelfAttention1d) -> None:
    """Every content logit q.k/sqrt(d) = -32: fp16's min plus it overflows to -inf."""
    with torch.no_grad():
        attn.q.weight.zero_()
        attn.k.weight.zero_()
        attn.q.bias.fill_(4.0)
        attn.k.bias.fill_(-4.0)


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("precision", ["half", "autocast"])
@pytest.mark.parametrize(
    "kwargs",
    [{"method": m, "value_rel": v} for m in ("gather", "skew") for v in (False, True)] + [{"mode": "bias"}],
)
def test_fully_masked_queries_stay_finite_in_fp16(kwargs, precision, grad):
    """Left padding and causal: the first queries see no key. The full-logits path masked the bias with fp16's min
    before adding the logits, whose sum overflowed to -inf: a row of -inf, NaN from softmax (SDPA takes the mask as
    is). Every query gets a finite output, and the others the fp32 one."""
    torch.manual_seed(0)
    attn = RelPosSelfAttention1d(DIM, HEADS, MAX_LEN, **kwargs)
    force_negative_logits(attn)
    x, mask = torch.randn(2, 6, DIM), torch.zeros(2, 6, dtype=torch.bool)
    mask[0, :3] = True
    with torch.no_grad():
        expected = attn(x, mask, causal=True)
    half = attn.half() if precision == "half" else attn
    inputs = (x.half() if precision == "half" else x).requires_grad_(grad)
    with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.float16, enabled=precision == "autocast"):
        out = half(inputs, mask, causal=True)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0, 3:].float(), expected[0, 3:], atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(out[1].float(), expected[1], atol=1e-2, rtol=1e-2)
    if grad:
        out.float().sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (inputs, *half.parameters()))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_bias_mode_hands_sdpa_a_finite_mask_under_autocast(dtype, monkeypatch):
    """Bias mode's fp32 table was filled with fp32's min, then cast to autocast's dtype: -inf at every masked key,
    which CPU's SDPA takes, but CUDA's memory-efficient kernel may turn a fully masked row of it into NaN."""
    masks, sdpa = [], torch.nn.functional.scaled_dot_product_attention

    def spy(*args, attn_mask, **kwargs):
        masks.append(attn_mask)
        return sdpa(*args, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    attn = RelPosSelfAttention1d(DIM, HEADS, MAX_LEN, mode="bias")
    x, mask = torch.randn(2, 6, DIM), torch.zeros(2, 6, dtype=torch.bool)
    mask[0] = True  # the first item all padding
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        out = attn(x, mask)
    (bias,) = masks
    assert bias.dtype == dtype and torch.isfinite(bias).all()
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize(
    "kwargs",
    [{"method": m, "value_rel": v} for m in ("gather", "skew") for v in (False, True)] + [{"mode": "bias"}],
)
def test_large_logits_stay_finite_in_fp16(kwargs, grad):
    """Raw q.k up to 80000 (past fp16's 65504), scaled logits up to 40000: the value term's full-logits path
    scaled after q.kᵀ, which overflowed to inf (gather, and skew under autograd). Every path scales q first and
    gives the fp64 loop's output on the fp16 weights."""
    attn = make(max_distance=2, **kwargs)
    x = torch.randn(2, 7, DIM, dtype=torch.float64)
    with torch.no_grad():
        q, k = attn.q(x).unflatten(-1, (HEADS, -1)), attn.k(x).unflatten(-1, (HEADS, -1))  # (B, L, H, d)
        scale = (80000 / torch.einsum("bihd,bjhd->bhij", q, k).abs().max()).sqrt()
        for p in (*attn.q.parameters(), *attn.k.parameters()):
            p.mul_(scale)
    half, x = attn.half(), x.half().requires_grad_(grad)
    with torch.set_grad_enabled(grad):
        out = half(x)
    assert torch.isfinite(out).all()
    if grad:
        out.float().square().sum().backward()
        assert torch.isfinite(x.grad).all()
    expected = naive_rel_pos_attention_1d(half.double(), x.detach().double())
    torch.testing.assert_close(out.double(), expected, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "kwargs",
    [{"method": m, "value_rel": v} for m in ("gather", "skew") for v in (False, True)] + [{"mode": "bias"}],
)
def test_empty_batch(kwargs, causal, grad):
    """B = 0 on every path (L = 100: the skew kernels in query blocks); the value term's skew path failed to reshape."""
    attn = RelPosSelfAttention1d(DIM, HEADS, 100, max_distance=5, **kwargs)
    x, mask = torch.randn(0, 100, DIM, requires_grad=grad), torch.zeros(0, 100, dtype=torch.bool)
    with torch.set_grad_enabled(grad):
        out = attn(x, mask, causal)
    assert out.shape == (0, 100, DIM)
    if grad:
        out.sum().backward()
        assert x.grad.shape == x.shape


def test_shapes_and_parameters():
    attn = RelPosSelfAttention1d(16, 4, max_len=10, max_distance=3, value_rel=True)
    assert attn.rel_k.weight.shape == (7, 4) and attn.rel_v.weight.shape == (7, 4)
    assert RelPosSelfAttention1d(16, 4, max_len=10).rel_v is None
    assert RelPosSelfAttention1d(16, 4, max_len=10).rel_k.weight.shape == (19, 4)
    assert RelPosSelfAttention1d(16, 4, max_len=10, mode="bias").rel_bias.table.shape == (19, 4)
    # a D beyond max_len - 1 kept as given: its saved state dicts (101 rows) load into a layer built alike
    assert RelPosSelfAttention1d(16, 4, max_len=10, max_distance=50).rel_k.weight.shape == (101, 4)
    assert attn(torch.randn(3, 10, 16)).shape == (3, 10, 16)


def test_bad_input_raises():
    attn = RelPosSelfAttention1d(16, 4, max_len=10)
    with pytest.raises(ValueError, match="max_len"):
        attn(torch.randn(1, 11, 16))
    with pytest.raises(ValueError, match=r"shape \(B, L\)"):
        attn(torch.randn(2, 6, 16), torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        attn(torch.randn(2, 6, 16), torch.zeros(2, 6))
    with pytest.raises(ValueError, match=r"bool tensor of shape \(B, L\) = \(1, 2\), got list"):  # AttributeError
        attn(torch.randn(1, 2, 16), [[False, True]])
    with pytest.raises(ValueError, match=r"\(B, L, 16\)"):
        attn(torch.randn(2, 6, 15))
    with pytest.raises(ValueError, match="causal must be a bool, got 'no'"):  # ran causal
        attn(torch.randn(2, 6, 16), None, "no")
    with pytest.raises(ValueError, match="divisible"):
        RelPosSelfAttention1d(18, 4, max_len=10)
    with pytest.raises(ValueError, match="mode"):
        RelPosSelfAttention1d(16, 4, max_len=10, mode="rope")
    with pytest.raises(ValueError, match="value_rel"):
        RelPosSelfAttention1d(16, 4, max_len=10, mode="bias", value_rel=True)


@pytest.mark.parametrize(
    ("dtype", "message"),
    [
        (torch.float64, "input dtype torch.float64 differs from the layer's torch.float32"),
        (torch.bfloat16, "input dtype torch.bfloat16 differs from the layer's torch.float32"),
        (torch.long, "expected a floating-point input of the layer's dtype torch.float32, got dtype torch.int64"),
    ],
)
def test_wrong_input_dtype_names_both(dtype, message):
    """torch's 'mat1 and mat2 must have the same dtype' came from inside the layer; under autocast a dtype it casts is
    legitimate."""
    attn = RelPosSelfAttention1d(DIM, HEADS, MAX_LEN)
    x = torch.ones(2, 5, DIM, dtype=dtype)
    with pytest.raises(ValueError, match=message):
        attn(x)
    with torch.autocast("cpu", dtype=torch.float16):  # casts bf16 to fp16, leaves float64 and long as they are
        if dtype == torch.bfloat16:
            assert attn(x).dtype == torch.float16
        else:
            with pytest.raises(ValueError, match=message):
                attn(x)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_distance": 2.5}, r"max_distance must be an int >= 0 or None, got 2\.5"),
        ({"max_distance": -1}, r"max_distance must be an int >= 0 or None, got -1"),
        ({"num_heads": 0}, r"num_heads must be an int >= 1, got 0"),
        ({"max_len": 10.0}, r"max_len must be an int >= 1, got 10\.0"),
        ({"dim": True}, r"dim must be an int >= 1, got True"),
        ({"mode": "bias", "method": "skew"}, r"method='skew' applies to mode='shaw'"),
        ({"mode": "bias", "method": "gather"}, r"method='gather' applies to mode='shaw'"),
    ],
)
def test_bad_config_names_the_argument(kwargs, message):
    """max_distance=2.5 failed in torch.empty, num_heads=0 read 'divisible by num_heads (0)', and bias mode took
    method='skew' and ignored it."""
    config = {"dim": 8, "num_heads": 2, "max_len": 10} | kwargs
    with pytest.raises(ValueError, match=message):
        RelPosSelfAttention1d(**config)


@pytest.mark.parametrize(
    ("kwargs", "tables"),
    [({"value_rel": True}, {"rel_k.weight", "rel_v.weight"}), ({"mode": "bias"}, {"rel_bias.table"})],
)
def test_timm_optimizer_leaves_the_position_tables_undecayed(kwargs, tables):
    """timm's optimizer factory reads ``no_weight_decay()``: without it the (2D + 1, d) tables, 2-D, were decayed."""
    attn = RelPosSelfAttention1d(DIM, HEADS, MAX_LEN, **kwargs)
    assert attn.no_weight_decay() == tables
    optimizer = timm.optim.create_optimizer_v2(attn, "adamw", weight_decay=0.05)
    undecayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    names = {n for n, p in attn.named_parameters() if id(p) in undecayed}
    assert names == tables | {n for n, p in attn.named_parameters() if p.ndim == 1}  # timm's own: biases


def test_numpy_integers_are_taken_as_ints():
    """np.int64 sizes (a config read by numpy, np.arange) were refused as non-integers; floats and bools still are."""
    attn = RelPosSelfAttention1d(np.int64(8), np.int32(2), np.arange(11)[10], max_distance=np.uint8(3))
    sizes = (attn.num_heads, attn.head_dim, attn.max_len, attn.max_distance)
    assert sizes == (2, 4, 10, 3) and all(type(v) is int for v in sizes)
    with pytest.raises(ValueError, match=r"max_len must be an int >= 1, got np\.float64\(10\.0\)"):
        RelPosSelfAttention1d(8, 2, np.float64(10))
    with pytest.raises(ValueError, match=r"max_len must be an int >= 1, got np\.True_"):
        RelPosSelfAttention1d(8, 2, np.True_)


def test_bias_mode_takes_the_default_method():
    assert RelPosSelfAttention1d(8, 2, 10, mode="bias", method="auto").method == "auto"
