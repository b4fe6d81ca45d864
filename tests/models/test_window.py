"""Window geometry against the naive references of tests/reference.py (the reference's slice-built region map)."""

import pytest
import torch
from reference import naive_windows, reference_shift_mask

from swinlite.models.swin import (
    effective_shift,
    pad_to_window,
    window_attention_mask,
    window_geometry,
    window_partition,
    window_reverse,
)


@pytest.mark.parametrize("size,window", [((8, 12), (4, 4)), ((14, 7), (7, 7)), ((6, 9), (3, 3)), ((4, 8), (2, 4))])
def test_partition_matches_slicing_and_reverses(size, window):
    x = torch.randn(2, *size, 5)
    windows = window_partition(x, window)
    expected = torch.stack(naive_windows(x, window), dim=1)
    torch.testing.assert_close(windows, expected, rtol=0, atol=0)
    torch.testing.assert_close(window_reverse(windows, window, *size), x, rtol=0, atol=0)


def test_pad_and_effective_shift():
    assert pad_to_window((7, 10), (7, 7)) == (0, 4)
    assert pad_to_window((1, 1), (4, 4)) == (3, 3)
    # one window covers the padded map in a dimension -> no shift there (per dimension)
    assert effective_shift((7, 14), (7, 7), (3, 3)) == (0, 3)
    assert effective_shift((14, 14), (7, 7), (3, 3)) == (3, 3)
    assert effective_shift((4, 4), (7, 7), (3, 3)) == (0, 0)


@pytest.mark.parametrize("padded,window", [((14, 14), (7, 7)), ((8, 12), (4, 4)), ((12, 8), (4, 2))])
def test_shift_mask_equals_reference(padded, window):
    shift = (window[0] // 2, window[1] // 2)
    mask = window_attention_mask(padded, window, shift, True, torch.device("cpu"), torch.float32)
    torch.testing.assert_close(mask, reference_shift_mask(padded, window, shift), rtol=0, atol=0)


def test_no_shift_no_padding_gives_no_mask():
    assert window_attention_mask((14, 14), (7, 7), (0, 0), True, torch.device("cpu"), torch.float32) is None
    # padding present but not masked (torchvision's behaviour)
    assert window_attention_mask((10, 10), (7, 7), (0, 0), False, torch.device("cpu"), torch.float32) is None


@pytest.mark.parametrize(
    "size,window,shift", [((10, 13), (4, 4), (2, 2)), ((5, 9), (4, 4), (0, 2)), ((3, 3), (4, 4), (0, 0))]
)
def test_padding_mask_marks_exactly_the_padded_keys(size, window, shift):
    """Track each token's original coordinates through pad + roll + partition, naively."""
    H, W = size
    pad_h, pad_w = pad_to_window(size, window)
    Hp, Wp = H + pad_h, W + pad_w
    rows = torch.arange(Hp)[:, None].expand(Hp, Wp)
    cols = torch.arange(Wp)[None, :].expand(Hp, Wp)
    real = ((rows < H) & (cols < W)).float()[None, :, :, None]
    real = torch.roll(real, shifts=(-shift[0], -shift[1]), dims=(1, 2))
    real_keys = torch.stack(naive_windows(real, window), 1)[0, :, :, 0].bool()  # (nW, N)
    mask = window_attention_mask(size, window, shift, True, torch.device("cpu"), torch.float32)
    is_inf = torch.isinf(mask)
    assert torch.equal(is_inf, (~real_keys)[:, None, :].expand_as(mask))
    assert not is_inf.all(dim=-1).any(), "every query must keep at least one key"


def test_geometry_is_built_once_per_size_and_shift():
    cpu = torch.device("cpu")
    a = window_geometry((7, 9), (4, 4), (2, 2), True, cpu)
    assert window_geometry((7, 9), (4, 4), (2, 2), True, cpu) is a
    assert window_geometry((7, 9), (4, 4), (0, 0), True, cpu) is not a
    assert a.padded == (8, 12) and a.shift == (2, 2)
    torch.testing.assert_close(a.mask, window_attention_mask((7, 9), (4, 4), (2, 2), True, cpu, torch.float32))
    assert window_geometry((4, 4), (4, 4), (2, 2), True, cpu).shift == (0, 0)  # one window: no shift
