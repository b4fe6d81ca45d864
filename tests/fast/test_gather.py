"""Shift + window partition as one gather, against a naive loop over windows and tokens (tests/reference.py)."""

import pytest
import torch
from reference import naive_shifted_windows

from swinlite.fast.blocks import exported_window_index, gather_tokens, shifted_window_index, window_index

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    "size,window,shift", [((8, 12), (4, 4), (2, 2)), ((14, 7), (7, 7), (3, 0)), ((6, 9), (3, 3), (0, 0))]
)
def test_gather_matches_roll_and_partition_and_inverts(size, window, shift):
    x = torch.randn(2, *size, 3)
    index, inverse = window_index(size, window, shift, CPU, batch=2)  # rows of the (2 * H * W, 3) view
    windows = gather_tokens(x.flatten(1, 2), index, inverse)
    torch.testing.assert_close(windows, naive_shifted_windows(x, window, shift), rtol=0, atol=0)
    back = gather_tokens(windows, inverse, index).view_as(x)
    torch.testing.assert_close(back, x, rtol=0, atol=0)


def test_gather_backward_is_the_inverse_gather():
    x = torch.randn(2, 8 * 12, 3, requires_grad=True)
    index, inverse = shifted_window_index((8, 12), (4, 4), (2, 2), CPU)
    grad = torch.randn(2, 8 * 12, 3)
    gather_tokens(x, *window_index((8, 12), (4, 4), (2, 2), CPU, batch=2)).backward(grad)
    expected = torch.zeros_like(x).index_add_(1, index, grad)  # autograd's rule for a gather, written out
    torch.testing.assert_close(x.grad, expected, rtol=0, atol=0)


def test_window_index_is_built_once_per_batch_and_is_a_permutation_of_each_image():
    index, inverse = window_index((8, 12), (4, 4), (2, 2), CPU)
    assert window_index((8, 12), (4, 4), (2, 2), CPU)[0] is index
    torch.testing.assert_close(inverse[index], torch.arange(8 * 12), rtol=0, atol=0)
    rows, inverse_rows = window_index((8, 12), (4, 4), (2, 2), CPU, batch=3)
    assert window_index((8, 12), (4, 4), (2, 2), CPU, batch=3)[0] is rows
    for b in range(3):  # image b's tokens are rows b*L ... (b+1)*L - 1, each image permuted alike
        torch.testing.assert_close(rows[b * 96 : (b + 1) * 96], index + b * 96, rtol=0, atol=0)
    torch.testing.assert_close(inverse_rows[rows], torch.arange(3 * 96), rtol=0, atol=0)


@pytest.mark.parametrize(
    "size,window,shift",
    [((5, 10), (4, 4), (2, 2)), ((14, 7), (7, 7), (3, 0)), ((6, 9), (3, 3), (0, 0)), ((3, 2), (3, 2), (1, 1))],
)
def test_exported_index_pads_gathers_and_comes_back_to_the_unpadded_map(size, window, shift):
    """The index an exported graph computes from its sizes: windows of the padded, rolled map (naive loop), and
    from the windows back to the un-padded map, un-rolled."""
    padded = tuple(-(-s // w) * w for s, w in zip(size, window, strict=True))
    x = torch.randn(2, *size, 3)
    x_padded = torch.zeros(2, *padded, 3)
    x_padded[:, : size[0], : size[1]] = x
    index, back = exported_window_index(size, padded, window, shift, CPU)
    windows = x_padded.flatten(1, 2)[:, index]
    torch.testing.assert_close(windows, naive_shifted_windows(x_padded, window, shift), rtol=0, atol=0)
    torch.testing.assert_close(windows[:, back.flatten()].view_as(x), x, rtol=0, atol=0)
