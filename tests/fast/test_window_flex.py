"""FlexAttention window attention (swinlite.fast.window_flex, a CUDA candidate) against the per-window loop of
tests/reference.py and, inside a fast block, against the reference block: values and gradients, on CPU.

Flex's public entry refuses a backward on CPU; its uncompiled path (scores materialised, the score modifier applied
and differentiated by autograd, flex's own dense backward) runs on CPU once that device check is lifted, which these
tests do. The compiled kernel the GPU runs differentiates the same modifier."""

from functools import partial

import pytest
import torch
from blockkit import assert_fast_block_matches_reference
from reference import assert_attention_matches_loop, hand_written_mask

from swinlite.fast import blocks, window_flex

flex_module = pytest.importorskip("torch.nn.attention.flex_attention")
B, NW, H, N, HD = 2, 3, 2, 6, 4


@pytest.fixture
def flex_on_cpu(monkeypatch):
    """Flex uncompiled, with gradients, on CPU."""
    if not hasattr(flex_module, "_validate_device"):
        pytest.skip("this torch checks flex's device elsewhere")
    monkeypatch.setattr(flex_module, "_validate_device", lambda *tensors: None)
    monkeypatch.setattr(window_flex, "_compiled_flex", lambda: flex_module.flex_attention)


@pytest.mark.parametrize("with_mask", [False, True])
def test_flex_matches_loop_in_values_and_gradients(flex_on_cpu, with_mask):
    torch.manual_seed(0)
    qkv = torch.randn(B * NW, N, 3, H, HD, requires_grad=True)
    bias = torch.randn(H, N, N, requires_grad=True)
    mask = hand_written_mask(NW, N) if with_mask else None  # -100 between shift regions, -inf on a padded key
    kernel = partial(window_flex.flex_window_attention, batch=B, scale=HD**-0.5)
    assert_attention_matches_loop(kernel, qkv, bias, mask)


@pytest.mark.parametrize("shift", [False, True])
def test_block_through_flex_equals_the_reference_block(monkeypatch, flex_on_cpu, shift):
    """The flex kernel as the table's choice for a block (shifted, padded 5x9 -> 8x12), values and gradients."""
    monkeypatch.setattr(blocks, "select_attention_kernel", lambda *args: "flex")
    assert_fast_block_matches_reference(shift)
