"""CPU inference in row blocks (swinlite.fast.row_blocks) against the reference block (fast=False),
and when a block takes it (swinlite.fast.blocks.row_blocks_for)."""

import copy

import pytest
import torch

from swinlite.fast import accelerate, blocks, row_blocks
from swinlite.fast.blocks import row_blocks_for
from swinlite.fast.row_blocks import RowBlocks
from swinlite.models.swin import BlockOptions, SwinBlock


def block_pair(qkv_bias: bool, shift: bool, mask_padding: bool = True) -> tuple[SwinBlock, SwinBlock]:
    torch.manual_seed(0)
    options = BlockOptions(qkv_bias=qkv_bias, mask_padding=mask_padding)
    reference = SwinBlock(16, 2, (4, 4), shift=shift, options=options).eval()
    return accelerate(copy.deepcopy(reference)), reference


@pytest.fixture
def calls(monkeypatch):
    """Counts the row-block kernels' calls, so a test knows they ran."""
    counts = {"attention": 0, "mlp": 0}

    def spy(name, fn):
        def wrapped(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)

        return wrapped

    attention = spy("attention", row_blocks.window_attention_rows)
    monkeypatch.setattr("swinlite.fast.blocks.window_attention_rows", attention)
    monkeypatch.setattr("swinlite.fast.blocks.mlp_rows", spy("mlp", row_blocks.mlp_rows))
    return counts


@pytest.mark.parametrize("rows", [20, 100, 2048])  # parts of an image; 2-3 images, ragged; all 5 (per thread: 2)
@pytest.mark.parametrize("size", [(5, 9), (8, 8)])  # padded to 8 x 12; unpadded
@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("mask_padding", [True, False])
@pytest.mark.parametrize("onednn", [False, True] if row_blocks.ONEDNN_LINEAR else [False])  # linears: addmm, oneDNN
def test_row_blocks_equal_the_reference_path(monkeypatch, calls, rows, size, shift, mask_padding, onednn):
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", onednn)
    monkeypatch.setattr(blocks, "ROWS_PER_THREAD", rows)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    fast, reference = block_pair(qkv_bias=True, shift=shift, mask_padding=mask_padding)
    x = torch.randn(5, *size, 16)
    with torch.inference_mode():
        assert row_blocks_for(False, x, 64).onednn == onednn
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-5, atol=1e-5)
    assert calls == {"attention": 1, "mlp": 1}


@pytest.mark.parametrize("flash", [True, False])
def test_attention_row_blocks_are_bounded_by_the_maps_bytes(monkeypatch, calls, flash):
    """Windows of 2 heads x 16 x 16 fp32 logits (2 KiB each): 2 threads x 2.5 KiB hold 2 windows per row block of
    the attention, fewer than the tokens per thread allow; the result is the reference block's."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(blocks, "ATTENTION_MAP_BYTES_PER_THREAD", 2560)
    monkeypatch.setattr(blocks, "CPU_FLASH_DTYPES", (torch.float32,) if flash else ())
    per_block = []

    def spy(batch: int, num_windows: int, windows: int) -> list[tuple[int, int, int]]:
        per_block.append(windows)
        return window_blocks(batch, num_windows, windows)

    window_blocks = row_blocks._window_blocks
    monkeypatch.setattr(row_blocks, "_window_blocks", spy)
    fast, reference = block_pair(qkv_bias=True, shift=True)
    x = torch.randn(2, 8, 12, 16)  # 6 windows per image
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-5, atol=1e-5)
    assert per_block == [2] and calls == {"attention": 1, "mlp": 1}


def test_row_blocks_without_biases_and_in_bf16(calls):
    fast, reference = block_pair(qkv_bias=False, shift=True)
    x = torch.randn(3, 7, 10, 16)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-5, atol=1e-5)
        fast, reference = fast.bfloat16(), reference.bfloat16()
        torch.testing.assert_close(fast(x.bfloat16()), reference(x.bfloat16()), rtol=2e-2, atol=2e-2)
    assert calls == {"attention": 2, "mlp": 2}


def test_row_blocks_in_float64_compute_in_float64(calls):
    """A float64 block's explicit softmax took the logits, bias + mask and softmax in fp32 (the bf16 recipe): 1e-9
    off the reference in a model, where float64 agrees to 1e-15."""
    fast, reference = (block.double() for block in block_pair(qkv_bias=True, shift=True))
    x = torch.randn(2, 7, 10, 16, dtype=torch.float64)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), reference(x), rtol=0, atol=1e-13)
    assert calls == {"attention": 1, "mlp": 1}


# linears: addmm, or oneDNN with packed weights (where this CPU computes bf16 in oneDNN)
BF16_LINEARS = [False, True] if blocks.ONEDNN_BF16 else [False]


@pytest.mark.parametrize("rows", [20, 2048])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # a block fed fp32; in a model, bf16
@pytest.mark.parametrize("onednn", BF16_LINEARS)
def test_row_blocks_under_bf16_autocast_equal_the_reference_path(monkeypatch, calls, rows, dtype, onednn):
    """Under CPU autocast the row blocks compute in bf16 as autocast would; the residual stream keeps its dtype."""
    monkeypatch.setattr(blocks, "ROWS_PER_THREAD", rows)
    monkeypatch.setattr(blocks, "ONEDNN_BF16", onednn)
    fast, reference = block_pair(qkv_bias=True, shift=True)
    x = torch.randn(3, 7, 10, 16, dtype=dtype)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert row_blocks_for(False, x, 64).onednn == onednn
        got, expected = fast(x), reference(x)
    assert got.dtype == expected.dtype == dtype
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
    assert calls == {"attention": 1, "mlp": 1}


@pytest.mark.parametrize("onednn", BF16_LINEARS)
def test_autocast_weight_copies_are_kept_while_the_weights_are_unchanged(monkeypatch, calls, onednn):
    """Each weight is converted to bf16 once, not per call (for oneDNN, in its packed layout); a weight changed in
    place, or replaced, is converted again: the next call uses the new weights (as the reference does)."""
    monkeypatch.setattr(blocks, "ONEDNN_BF16", onednn)
    fast, reference = block_pair(qkv_bias=True, shift=True)
    x = torch.randn(2, 8, 8, 16)

    def run() -> None:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            got, expected = fast(x), reference(x)
        torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)

    run()
    first = row_blocks._cast(fast.mlp.fc1.weight, torch.bfloat16, onednn)
    assert first.is_mkldnn == onednn and first.shape == fast.mlp.fc1.weight.shape
    run()
    assert row_blocks._cast(fast.mlp.fc1.weight, torch.bfloat16, onednn) is first  # kept across calls
    with torch.no_grad():
        for block in (fast, reference):
            block.mlp.fc1.weight.mul_(-3.0)  # in place: the version counter moves
            block.attn.qkv.weight.data = block.attn.qkv.weight.data.flip(0)  # another storage
    run()
    assert calls == {"attention": 3, "mlp": 3}


def test_only_cpu_inference_takes_row_blocks(monkeypatch):
    monkeypatch.setattr(blocks, "CPU_FLASH_DTYPES", blocks.cpu_flash_dtypes(amx=False))  # bf16: the explicit softmax
    monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", True)
    monkeypatch.setattr(blocks, "ONEDNN_BF16", False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    monkeypatch.setattr(blocks, "ROWS_PER_THREAD", 100)
    monkeypatch.setattr(blocks, "ROW_BLOCK_BYTES", 64000)
    monkeypatch.setattr(blocks, "ATTENTION_MAP_BYTES_PER_THREAD", 5000)
    x = torch.zeros(1, 4, 4, 8)
    with torch.no_grad():
        expected = RowBlocks(300, torch.float32, flash=True, map_bytes=15000, onednn=True)  # tokens, bytes per thread
        assert row_blocks_for(False, x, 32) == expected
        assert row_blocks_for(False, x, 64).rows == 250  # the widest buffer (64 channels) within 64000 bytes
        assert row_blocks_for(True, x, 32) is None  # training: dropout and stochastic depth may be on
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the matmuls in autocast's dtype
            assert row_blocks_for(False, x, 64) == expected._replace(dtype=torch.bfloat16, flash=False, onednn=False)
            assert row_blocks_for(False, x, 128).rows == 250
            plan = row_blocks_for(False, x.double(), 32)
            assert plan.dtype == torch.float64 and not plan.onednn  # autocast leaves float64 alone
            monkeypatch.setattr(blocks, "ONEDNN_BF16", True)  # this CPU computes bf16 in oneDNN
            assert row_blocks_for(False, x, 64).onednn and not row_blocks_for(False, x.double(), 32).onednn
        monkeypatch.setattr(blocks, "ONEDNN_FP32_ON_THIS_CPU", False)  # this CPU's BLAS is the faster
        assert row_blocks_for(False, x, 32) == expected._replace(onednn=False)
        assert row_blocks_for(False, torch.zeros(1, 4, 4, 8, device="meta"), 32) is None
    assert row_blocks_for(False, x, 32) is None  # autograd on


def test_training_and_autograd_keep_the_plain_path(calls):
    fast, _ = block_pair(qkv_bias=True, shift=True)
    x = torch.randn(2, 8, 8, 16)
    fast(x)  # eval with autograd
    with torch.no_grad():
        fast.train()(x)
    assert calls == {"attention": 0, "mlp": 0}


@pytest.mark.parametrize("batch,num_windows,per_block", [(5, 6, 2), (5, 7, 3), (3, 7, 16), (4, 64, 41), (2, 1, 1)])
def test_window_blocks_cover_every_window_once(batch, num_windows, per_block):
    blocks = row_blocks._window_blocks(batch, num_windows, per_block)
    covered = [w for first, count, _ in blocks for w in range(first, first + count)]
    assert covered == list(range(batch * num_windows))
    for first, count, offset in blocks:
        assert count <= max(per_block, num_windows) and offset == first % num_windows
        assert offset + count <= num_windows or (
            offset == 0 and count % num_windows == 0
        )  # part of one image, or whole ones


@pytest.mark.parametrize(("dtype", "amx"), [(torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True)])
def test_row_blocks_attend_through_flash_in_fp32_and_the_explicit_softmax_in_bf16(monkeypatch, dtype, amx):
    """benchmarks/kernels.md: SDPA's CPU flash kernel is the faster one in fp32 and the slower one in bf16, except on
    CPUs with AMX ("CPU bf16 inference on AMX"), where it serves bf16 too (the rule forced here; the kernel runs on any
    CPU). In bf16 either route is on average no farther from the fp32 block than the reference block under autocast."""
    monkeypatch.setattr(blocks, "CPU_FLASH_DTYPES", blocks.cpu_flash_dtypes(amx))
    used = []
    sdpa = row_blocks.F.scaled_dot_product_attention
    monkeypatch.setattr(
        row_blocks.F, "scaled_dot_product_attention", lambda *a, **k: used.append("flash") or sdpa(*a, **k)
    )
    explicit = row_blocks._explicit_attention
    monkeypatch.setattr(row_blocks, "_explicit_attention", lambda *a: used.append("explicit") or explicit(*a))
    fast, reference = block_pair(qkv_bias=True, shift=True)
    x = torch.randn(2, 8, 8, 16)
    with torch.inference_mode():
        truth = reference(x)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            got, expected = fast(x), reference(x)
    assert set(used) == {"flash" if dtype == torch.float32 or amx else "explicit"}
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
    error, reference_error = ((t - truth).abs().mean() for t in (got, expected))
    assert error <= 1.1 * reference_error + 1e-7  # on average as close to fp32 as the reference under autocast
    assert blocks.select_attention_kernel("cpu", dtype, False, False) == (
        "sdpa" if set(used) == {"flash"} else "explicit"
    )


def test_the_explicit_bf16_attention_adds_bias_and_mask_in_fp32():
    """The explicit softmax adds the fp32 bias and mask in fp32, as timm's Swin under autocast does; rounded to bf16
    first, a bias in [8, 16) moves by up to 1/32 (probabilities 4.5% off, half of them by more than a bf16 step).
    q = k = 0 and v = the token (one-hot), so the attention returns its probabilities, softmax(0 + bias + mask),
    rounded to bf16 once."""
    torch.manual_seed(0)
    B, nW, N = 2, 2, 16  # one head of 16 channels, 4x4 windows
    eye = torch.eye(N)
    windows = eye.expand(B, nW, N, N).contiguous()  # (B, nW, N, C): token i of each window is e_i
    qkv_weight = torch.cat((torch.zeros(2 * N, N), eye))  # (3C, C): q = k = 0, v = the token
    bias = 8 + 8 * torch.rand(1, N, N)  # (heads, N, N), off bf16's steps of 1/16 there
    mask = torch.zeros(nW, N, N)
    mask[1, :, N // 2 :] = -100.0  # the second window's last 8 keys: padding
    plan = RowBlocks(rows=4096, dtype=torch.bfloat16, flash=False, map_bytes=1 << 20, onednn=False)
    with torch.no_grad():
        out = row_blocks.window_attention_rows(windows, qkv_weight, None, eye, None, bias, mask, 0.25, plan)
    expected = (bias + mask).softmax(-1).bfloat16().expand(B, nW, N, N)  # (B, nW, N, N): timm's formula
    torch.testing.assert_close(out, expected, rtol=2**-7, atol=0)  # a bf16 step
