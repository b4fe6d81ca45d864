"""The accelerated SwinBlock (swinlite.fast) against the reference block it was built from, values and gradients."""

import copy

import pytest
import torch
from blockkit import assert_same_drops, values_and_gradients
from torch.utils._python_dispatch import TorchDispatchMode

from swinlite.fast import accelerate, blocks
from swinlite.models.swin import BlockOptions, SwinBlock, window_geometry


def block_pair(shift: bool, mask_padding: bool, rel_pos: str, drop_path: float = 0.0) -> tuple[SwinBlock, SwinBlock]:
    torch.manual_seed(0)
    options = BlockOptions(mask_padding=mask_padding)
    reference = SwinBlock(8, 2, (4, 4), shift=shift, drop_path=drop_path, rel_pos=rel_pos, options=options)
    return accelerate(copy.deepcopy(reference)), reference


@pytest.mark.parametrize("size", [(5, 9), (8, 8), (3, 9), (2, 3)])  # padded to 8 x 12; none; maps under the window
@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("mask_padding", [True, False])
@pytest.mark.parametrize("rel_pos", ["table", "cpb"])
@pytest.mark.parametrize("train", [True, False])
def test_fast_path_equals_reference_path(size, shift, mask_padding, rel_pos, train):
    """Fast kernels (gather, recomputed or SDPA attention, GELU recompute) against the plain math, forward and
    backward (input and every parameter); in eval also without autograd (SDPA's flash kernel)."""
    fast, reference = (b.train(train) for b in block_pair(shift, mask_padding, rel_pos))
    x, grad = torch.randn(2, *size, 8), torch.randn(2, *size, 8)
    for a, b in zip(values_and_gradients(fast, x, grad), values_and_gradients(reference, x, grad), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    if not train:
        with torch.no_grad():
            torch.testing.assert_close(fast(x), reference(x), rtol=1e-5, atol=1e-5)


def test_fast_path_drops_the_branches_the_reference_path_drops():
    """Stochastic depth in training: from the same random state the fast block drops the residual branches of the
    samples the reference block drops (values and gradients); from another state, others."""
    fast, reference = (b.train() for b in block_pair(shift=True, mask_padding=True, rel_pos="table", drop_path=0.5))
    assert_same_drops(fast, reference)


@pytest.mark.parametrize("shift", [False, True])
def test_fast_path_under_bf16_autocast_equals_reference_path(shift):
    """CPU bf16 training (explicit attention with the broadcast mask, GELU recompute) against the reference block
    under the same autocast, values and gradients, to bf16 rounding."""
    fast, reference = (b.train() for b in block_pair(shift, mask_padding=True, rel_pos="table"))
    x, grad = torch.randn(2, 5, 9, 8), torch.randn(2, 5, 9, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        results = [values_and_gradients(block, x, grad) for block in (fast, reference)]
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


class _Ops(TorchDispatchMode):
    """The aten ops that run, by name, views left out (on a GPU each is a kernel launch)."""

    VIEWS = {"view", "_unsafe_view", "expand", "t", "unsqueeze", "permute", "transpose", "unbind", "slice", "select"}

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in self.VIEWS:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("rel_pos", ["table", "cpb"])
def test_an_eager_block_launches_no_index_arithmetic_and_one_bias_gather(rel_pos):
    """What a GPU launches for a block at batch 2, counted on the meta device (no CPU row blocks there): after the first
    call of a size, each gather of the windows is one index_select (the batch's rows cached, no arange, mul and add per
    call), and the position bias one index_select of the table in (heads, N, N) order (no permute copy after it; the
    continuous bias's sigmoid and scale run on that layout)."""
    fast, _ = block_pair(shift=True, mask_padding=True, rel_pos=rel_pos)
    fast = fast.to("meta")
    x = torch.empty(2, 5, 9, 8, device="meta")
    fast(x)
    with _Ops() as counted:
        fast(x)
    assert "arange" not in counted.ops
    assert counted.ops.count("index_select") == 3  # the two gathers and the bias
    with _Ops() as bias:
        fast.attn.rel_pos()
    assert bias.ops.count("index_select") == 1 and not {"index", "clone", "contiguous"} & set(bias.ops)


def test_under_autocast_a_block_takes_its_mask_in_the_attention_dtype(monkeypatch):
    """Under autocast the projections are bf16 while the residual stream x is fp32: the block's cached mask is taken in
    bf16, not converted on every call."""
    fast, _ = block_pair(shift=True, mask_padding=True, rel_pos="table")
    asked = []

    def recording(*args):
        asked.append(args[-1])
        return window_geometry(*args)

    monkeypatch.setattr(blocks, "window_geometry", recording)
    with torch.autocast("cpu", torch.bfloat16):
        fast.train()(torch.randn(2, 5, 9, 8)).sum().backward()
    assert asked == [torch.bfloat16]


@pytest.mark.parametrize("mask_padding", [True, False])
def test_a_map_smaller_than_the_window_is_attended_in_a_window_cut_to_it(mask_padding):
    """With masked padding, a 2x3 map under a 4x4 window is one 2x3 window (6 tokens, not 16 with 10 of them padding:
    the same attention, the reference path's values above); with attended padding the window stays."""
    fast, _ = block_pair(shift=True, mask_padding=mask_padding, rel_pos="table")
    tokens, attend = [], fast.attn.forward  # not a hook: a hooked attention takes the reference path

    def counting(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        tokens.append(x.shape[2])
        return attend(x, *args, **kwargs)

    fast.attn.forward = counting
    fast.train()(torch.randn(2, 2, 3, 8)).sum().backward()
    assert tokens == [6 if mask_padding else 16]
