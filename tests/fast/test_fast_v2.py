"""The accelerated Swin-V2 block (swinlite/fast/v2.py) against the reference block it was built from, values and
gradients, and a V2 model's fast and reference paths."""

import contextlib
import copy

import pytest
import timm
import torch
from blockkit import assert_same_drops, values_and_gradients
from torch.profiler import ProfilerActivity, profile

import swinlite  # noqa: F401  (registers the models)
from swinlite.fast import FastSwinV2Block, FastWindowAttentionV2, accelerate, blocks, row_blocks, v2
from swinlite.models.swin import BlockOptions, ContinuousPositionBias, SwinV2Block


def block_pair(shift: bool, mask_padding: bool, drop_path: float = 0.0) -> tuple[SwinV2Block, SwinV2Block]:
    """(fast, reference) V2 blocks with every weight random (the post-norms start at zero otherwise)."""
    torch.manual_seed(0)
    options = BlockOptions(mask_padding=mask_padding)
    reference = SwinV2Block(8, 2, (4, 4), shift=shift, drop_path=drop_path, pretrained_window=(3, 3), options=options)
    with torch.no_grad():
        for name, p in reference.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3 + ("norm" in name and name.endswith("weight")))
        reference.attn.logit_scale.copy_(torch.tensor([5.0, 1.0]).view(2, 1, 1))  # head 0 clamped: τ = 100
    fast = accelerate(copy.deepcopy(reference))
    assert type(fast) is FastSwinV2Block and type(fast.attn) is FastWindowAttentionV2
    return fast, reference


@pytest.mark.parametrize("size", [(5, 9), (8, 8)])  # odd sizes padded to 8 x 12; no padding
@pytest.mark.parametrize(("shift", "mask_padding"), [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("train", [True, False])
def test_fast_v2_block_equals_reference_block(monkeypatch, size, shift, mask_padding, train):
    """Gather and explicit or SDPA cosine attention against the plain math, forward and backward (input and every
    parameter); in eval also without autograd (the attention and the MLP in row blocks). The linears take the
    reference's library (the BLAS): τ = 100 would magnify the float rounding of another library's matmuls (oneDNN's,
    pinned by tests/fast/test_linear.py) past this test's 1e-5."""
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", False)
    fast, reference = (b.train(train) for b in block_pair(shift, mask_padding))
    x, grad = torch.randn(2, *size, 8), torch.randn(2, *size, 8)
    for a, b in zip(values_and_gradients(fast, x, grad), values_and_gradients(reference, x, grad), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    if not train:
        with torch.no_grad():
            torch.testing.assert_close(fast(x), reference(x), rtol=1e-5, atol=1e-5)


def test_fast_v2_block_drops_the_branches_the_reference_block_drops(monkeypatch):
    """Stochastic depth in training: from the same random state the fast V2 block drops the residual branches of the
    samples the reference block drops (values and gradients); from another state, others."""
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", False)  # as above: the reference's linears
    fast, reference = (b.train() for b in block_pair(shift=True, mask_padding=True, drop_path=0.5))
    assert_same_drops(fast, reference)


# linears of CPU inference: addmm, or oneDNN (fp32: where PyTorch has it; bf16: where this CPU computes bf16 in it)
FP32_LINEARS = [False, True] if row_blocks.ONEDNN_LINEAR else [False]
BF16_LINEARS = [False, True] if blocks.ONEDNN_BF16 else [False]


@pytest.mark.parametrize("rows", [20, 2048])  # ragged parts of the tokens; all of them
@pytest.mark.parametrize(
    ("dtype", "autocast", "onednn", "amx"),
    [(torch.float32, False, o, False) for o in FP32_LINEARS]
    + [(d, True, o, amx) for d in (torch.float32, torch.bfloat16) for o in BF16_LINEARS for amx in (False, True)],
)
def test_row_blocks_equal_the_reference_block(monkeypatch, rows, dtype, autocast, onednn, amx):
    """CPU inference runs the cosine attention (q·τ/|q| against k/|k|, τ = 100 in one head) and x + norm2(mlp(x))
    (the norm after fc2) in row blocks, fp32 with either library and under bf16 autocast, fed fp32 or bf16. In fp32
    the output is the reference's; under autocast its distance from the reference's fp32 output is the reference's
    own under autocast (bf16 logits of cos·τ up to ±100 round by up to 0.25 either way) by the explicit formula, and
    as large on average (its largest value's within 2x) by SDPA's flash kernel in bf16, as on CPUs with AMX (the rule
    forced either way)."""
    monkeypatch.setattr(blocks, "ROWS_PER_THREAD", rows)
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", onednn)
    monkeypatch.setattr(blocks, "ONEDNN_BF16", onednn)
    monkeypatch.setattr(blocks, "CPU_FLASH_DTYPES", blocks.cpu_flash_dtypes(amx))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    called = []

    def spy(name, function):
        def run(*args, **kwargs):
            called.append((name, kwargs))
            return function(*args, **kwargs)

        return run

    monkeypatch.setattr(blocks, "mlp_rows", spy("mlp", row_blocks.mlp_rows))
    monkeypatch.setattr(v2, "window_attention_rows", spy("attention", row_blocks.window_attention_rows))
    fast, reference = (b.eval() for b in block_pair(shift=True, mask_padding=True))
    x = torch.randn(3, 7, 10, 8, dtype=dtype)  # padded to 8 x 12
    with torch.inference_mode():
        truth = reference(x.float())
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            assert blocks.row_blocks_for(False, x, 32).onednn == onednn
            got, expected = fast(x), reference(x)
    assert got.dtype == expected.dtype == dtype
    assert [name for name, _ in called] == ["attention", "mlp"] and called[1][1] == {"post_norm": True}
    assert called[0][1]["tau"].flatten().tolist() == pytest.approx([100.0, 2.718282])  # τ = exp(min(scale, ln 100))
    if not autocast:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        return
    error, reference_error = (t.float().sub(truth).abs() for t in (got, expected))
    # the explicit formula rounds as the reference does; SDPA's flash kernel (AMX) at other points: over seeds 0-15 its
    # mean error was 0.84-1.06x the reference's, its largest (one of 1680 values) 0.62-1.61x
    largest = 2.0 if amx else 1.1
    assert error.max() <= largest * reference_error.max() and error.mean() <= 1.1 * reference_error.mean()
    assert 0.0 < reference_error.mean() < 0.05  # bf16 rounding, not another formula


def test_v2_model_fast_and_reference_paths_agree_in_training():
    torch.manual_seed(0)
    fast = timm.create_model("swinlite_v2_pico_patch2_window4_32").train()
    with torch.no_grad():  # away from the zero post-norms of the initialisation
        for p in fast.parameters():
            p.add_(0.1 * torch.randn_like(p))
    reference = timm.create_model("swinlite_v2_pico_patch2_window4_32", fast=False).train()
    reference.load_state_dict(fast.state_dict())
    assert FastSwinV2Block in {type(m) for m in fast.modules()} and SwinV2Block in {
        type(m) for m in reference.modules()
    }
    x = torch.randn(2, 3, 36, 44)
    for model in (fast, reference):
        torch.manual_seed(1)
        torch.nn.functional.cross_entropy(model(x), torch.tensor([1, 2])).backward()
    for (name, a), b in zip(fast.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def _mlp_runs(cpb: torch.nn.Module, **window) -> int:
    """How many times one call of ``cpb`` runs its MLP (its ``offset_table``; a hook on the MLP would make the fast
    one compute the table on every call)."""
    calls = []
    offset_table = cpb.offset_table
    cpb.offset_table = lambda: calls.append(1) or offset_table()
    try:
        cpb(**window)
    finally:
        del cpb.offset_table
    return len(calls)


def test_inference_keeps_the_continuous_bias_table_between_calls(monkeypatch):
    """Without autograd the MLP of every offset runs once, not in every block call (at batch 1 on a GPU, five kernels
    a block), for the layer's window and a cut one alike; a changed weight, autocast and autograd make it run again.
    The linears take the reference's library (on CPUs where oneDNN serves fp32 linears, it rounds otherwise)."""
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", False)
    torch.manual_seed(0)
    ref = ContinuousPositionBias((4, 4), 3, pretrained_window=(3, 3))
    fast = accelerate(copy.deepcopy(ref))
    assert type(fast) is not type(ref)
    with torch.no_grad():
        assert _mlp_runs(fast) == 1 and _mlp_runs(fast) == 0 and _mlp_runs(fast, window=(2, 3)) == 0
        assert not v2.kept_offset_table(fast).requires_grad  # kept without an autograd graph
        torch.testing.assert_close(fast(), ref(), rtol=0, atol=0)
        torch.testing.assert_close(fast(window=(2, 3)), ref(window=(2, 3)), rtol=0, atol=0)
        for module in (fast, ref):
            module.mlp[2].weight.mul_(2)  # an in-place change (an optimizer step, load_state_dict)
        assert _mlp_runs(fast) == 1
        torch.testing.assert_close(fast(), ref(), rtol=0, atol=0)
        with torch.autocast("cpu", torch.bfloat16):
            assert _mlp_runs(fast) == 1  # another dtype: another table
            torch.testing.assert_close(fast(), ref(), rtol=0, atol=0)
    assert _mlp_runs(fast) == 1 and fast().requires_grad  # autograd: computed, gradients reach the MLP


def test_a_weight_given_a_new_storage_at_the_old_address_makes_the_table_again(monkeypatch):
    """``.data =`` (as ``model.half().float()`` does) gives a weight a new storage under its version counter, often at
    the address the allocator freed: same version and address, other values. Here the new storage is laid where the
    old one was, one buffer's memory; the table kept for the old one was served (3.8 off)."""
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", False)
    torch.manual_seed(0)
    ref = ContinuousPositionBias((4, 4), 2)
    fast = accelerate(copy.deepcopy(ref))
    weight = ref.mlp[0].weight
    memory = bytearray(weight.numel() * weight.element_size())  # the address of every storage below
    with torch.no_grad():
        for sign in (1.0, -1.0):
            weight.mul_(sign)
            torch.frombuffer(memory, dtype=weight.dtype).copy_(weight.flatten())
            fast.mlp[0].weight.data = torch.frombuffer(memory, dtype=weight.dtype).view(weight.shape)  # a new storage
            torch.testing.assert_close(fast(), ref(), rtol=0, atol=0)


@pytest.mark.parametrize(
    "change",
    [
        lambda mlp: mlp[2].register_forward_hook(lambda module, args, out: out * 3),
        lambda mlp: mlp[0].register_forward_pre_hook(lambda module, args: (args[0] * 2,)),
        lambda mlp: mlp.__setitem__(1, torch.nn.GELU()),
    ],
    ids=["hooked", "pre-hooked", "replaced"],
)
def test_a_hooked_or_replaced_bias_mlp_is_not_served_its_kept_table(monkeypatch, change):
    """The kept table was keyed on the MLP's parameters alone: a module of the MLP hooked or replaced after the first
    inference call kept the table of the MLP as built (a model 1.3e-2 off for a hook, 3.1e-3 for a GELU)."""
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", False)
    torch.manual_seed(0)
    ref = ContinuousPositionBias((4, 4), 3, pretrained_window=(3, 3))
    fast = accelerate(copy.deepcopy(ref))
    with torch.no_grad():
        fast()  # the table kept
        for module in (fast, ref):
            change(module.mlp)
        torch.testing.assert_close(fast(), ref(), rtol=0, atol=0)
        assert _mlp_runs(fast) == 1 and _mlp_runs(fast) == 1


@pytest.mark.parametrize("rows", [False, True])  # the whole batch (a GPU's path), the CPU's row blocks
@pytest.mark.parametrize("autocast", [False, True])
def test_inference_keeps_the_merged_qkv_bias_between_calls(monkeypatch, rows, autocast):
    """Without autograd the q, zero and v biases are concatenated (and converted) once, not in every call; the
    block's output stays the reference's, and a changed q bias is taken, as is a changed v bias alone (a merged bias
    kept while q's alone was unchanged: 3.4 off). The linears take the reference's library and bf16 the reference's
    explicit formula (oneDNN's bf16 and the flash kernel of CPUs with AMX round otherwise:
    test_row_blocks_equal_the_reference_block bounds them)."""
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", False)
    monkeypatch.setattr(blocks, "ONEDNN_BF16", False)
    monkeypatch.setattr(blocks, "CPU_FLASH_DTYPES", blocks.cpu_flash_dtypes(amx=False))
    if not rows:
        monkeypatch.setattr(blocks, "row_blocks_for", lambda *args, **kwargs: None)
    fast, reference = block_pair(shift=True, mask_padding=True)
    fast.eval(), reference.eval()
    x = torch.randn(2, 5, 9, 8)
    context = (lambda: torch.autocast("cpu", torch.bfloat16)) if autocast else contextlib.nullcontext
    with torch.no_grad():
        for changed in ("", "q_bias", "v_bias"):
            for block in (fast, reference) if changed else ():
                getattr(block.attn, changed).add_(0.5)  # an in-place change: this step's bias is a new one
            with context():
                fast(x)
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    got = fast(x)
                expected = reference(x)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            assert not [e for e in prof.key_averages() if e.key == "aten::cat"]  # merged before the timed call
