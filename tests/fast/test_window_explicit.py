"""The explicit window attention of the fast path (swinlite.fast.window_explicit) against the per-window loop of
tests/reference.py, values and gradients, and in TorchScript."""

from functools import partial

import pytest
import torch
from reference import assert_attention_matches_loop, hand_written_mask

from swinlite.fast.window_explicit import explicit_window_attention

B, NW, H, N, HD = 2, 3, 2, 6, 4


@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_explicit_attention_matches_loop_in_values_and_gradients(with_mask, dtype, tol):
    torch.manual_seed(0)
    qkv = torch.randn(B * NW, N, 3, H, HD, dtype=dtype, requires_grad=True)
    bias = torch.randn(H, N, N, dtype=dtype, requires_grad=True)
    mask = hand_written_mask(NW, N).to(dtype) if with_mask else None  # -100 between regions, -inf on a padded key
    kernel = partial(explicit_window_attention, batch=B, scale=HD**-0.5, dropout_p=0.0)
    assert_attention_matches_loop(kernel, qkv, bias, mask, tol)


def test_scripted_explicit_attention_matches_eager():
    torch.manual_seed(0)
    qkv, bias, mask = torch.randn(B * NW, N, 3, H, HD), torch.randn(H, N, N), hand_written_mask(NW, N)
    scripted = torch.jit.script(explicit_window_attention)
    torch.testing.assert_close(
        scripted(qkv, bias, mask, B, 0.5, 0.0), explicit_window_attention(qkv, bias, mask, B, 0.5, 0.0)
    )
