"""RelativePositionBias gathers its table per offset; resize_rel_pos_bias_table is timm's resize (its Swin's)."""

import itertools
import warnings

import pytest
import torch
from timm.layers import resize_rel_pos_bias_table as timm_resize
from timm.layers import to_2tuple

from swinlite.convert import (
    crop_rel_pos_bias_table,
    embed_rel_pos_bias_table,
    offset_grid,
    resize_rel_pos_bias_table,
)
from swinlite.models.swin import RelativePositionBias, relative_position_index


@pytest.mark.parametrize("window", [(5,), (3, 4), (2, 2, 3)])
def test_bias_reads_the_table_row_of_each_offset(window):
    torch.manual_seed(0)
    heads = 3
    rpb = RelativePositionBias(window, heads)
    bias = rpb()
    coords = list(itertools.product(*(range(w) for w in window)))
    assert bias.shape == (heads, len(coords), len(coords))
    assert bias.is_contiguous(), "heads outermost: compiled bias + softmax kernels read it vectorised"
    for (i, ci), (j, cj) in itertools.product(enumerate(coords), repeat=2):
        row = 0
        for a, b, w in zip(ci, cj, window, strict=True):  # written out independently of relative_position_index
            row = row * (2 * w - 1) + (a - b + w - 1)
        assert torch.equal(bias[:, i, j], rpb.table[row])


def test_init_and_gradients():
    torch.manual_seed(0)
    rpb = RelativePositionBias((12, 12), 16)
    assert rpb.table.shape == (23 * 23, 16)
    assert 0.018 < rpb.table.std().item() < 0.022 and abs(rpb.table.mean().item()) < 0.002
    weights = torch.randn(16, 144, 144)
    (rpb() * weights).sum().backward()
    assert rpb.table.grad.abs().min() > 0, "every offset receives a gradient"


@pytest.mark.parametrize("heads", [1, 3])
def test_the_tables_gradient_has_the_tables_strides(heads):
    """With one head the gradient came back as the transposed view's, strides (1, rows) against the table's (1, 1):
    DistributedDataParallel compares them exactly and warned "Grad strides do not match bucket view strides" in
    every run of the demo's pico model (its first stage has one head)."""
    rpb = RelativePositionBias((4, 4), heads)
    (rpb() * torch.randn(heads, 16, 16)).sum().backward()
    assert rpb.table.grad.stride() == rpb.table.stride()


def test_meta_device_then_init_buffers():
    rpb = RelativePositionBias((3, 5), 2, device="meta").to_empty(device="cpu")
    rpb.init_non_persistent_buffers()
    assert torch.equal(rpb.index, RelativePositionBias((3, 5), 2).index)


def test_a_sub_window_must_fit_in_the_window():
    """A larger sub-window read out of the table's bounds ('INDICES element is out of DATA bounds')."""
    rpb = RelativePositionBias((7, 7), 2)
    assert rpb((7, 3)).shape == (2, 21, 21)
    with pytest.raises(ValueError, match=r"sub-window \(8, 3\) must fit in the bias's 2-D window \(7, 7\)"):
        rpb((8, 3))


def test_set_window_checks_the_tables_shape():
    """A (7, 7) window's table (169 rows) for a (12, 12) window was taken, and failed at the next forward."""
    rpb = RelativePositionBias((7, 7), 2)
    with pytest.raises(ValueError, match=r"window \(12, 12\) needs a table of shape \(529, 2\).*got \(169, 2\)"):
        rpb.set_window((12, 12), rpb.table)
    assert rpb.window == (7, 7) and rpb().shape == (2, 49, 49)
    rpb.set_window((12, 12), torch.zeros(529, 2))
    assert rpb().shape == (2, 144, 144)


@pytest.mark.parametrize(
    ("window", "rows"),
    [
        ((0, 0), 1),  # the rows prod(2w - 1) gives: the window and table were taken, then torch.arange failed
        ((0, 4), 7),  # named an impossible table shape, (-7, 2)
        ((4.5, 4), 49),  # (4, 4)'s rows: truncated to (4, 4), silently
    ],
)
def test_set_window_refuses_a_window_of_no_positive_ints_before_changing_anything(window, rows):
    torch.manual_seed(0)
    rpb = RelativePositionBias((4, 4), 2)
    before = rpb()
    with pytest.raises(ValueError, match=r"^window must be a non-empty sequence of positive ints, got \("):
        rpb.set_window(window, torch.zeros(rows, 2))
    assert rpb.window == (4, 4) and torch.equal(rpb(), before)


@pytest.mark.parametrize("window", [(-1, 3), (0, 4), (2.5, 2), (True, 2), ()])
def test_a_window_of_no_positive_ints_is_refused_at_construction(window):
    """(-1, 3) was torch's RuntimeError about a negative dimension; 2.5 and True were truncated to ints."""
    with pytest.raises(ValueError, match=r"^window must be a non-empty sequence of positive ints"):
        RelativePositionBias(window, 2)


def test_an_int_window_is_the_square_window_as_the_model_takes_it():
    """``RelativePositionBias(7, 2)`` was "TypeError: object of type 'int' has no len()" (timm's takes an int)."""
    torch.manual_seed(0)
    square = RelativePositionBias((3, 3), 2)
    torch.manual_seed(0)
    rpb = RelativePositionBias(3, 2)
    assert rpb.window == (3, 3) and torch.equal(rpb(), square())
    rpb.set_window(2, torch.zeros(9, 2))
    assert rpb.window == (2, 2) and rpb().shape == (2, 4, 4)
    assert torch.equal(relative_position_index(3), relative_position_index((3, 3)))


@pytest.mark.parametrize(("old", "new"), [((7, 7), (12, 12)), ((12, 12), (7, 7)), ((4, 4), (4, 4)), (7, 12)])
def test_resize_matches_timm(old, new):
    """An int window is the square one, as the model takes it (it was "'int' object is not subscriptable")."""
    torch.manual_seed(0)
    table = torch.randn((2 * to_2tuple(old)[0] - 1) * (2 * to_2tuple(old)[1] - 1), 4)
    new = to_2tuple(new)
    new_rows = (2 * new[0] - 1) * (2 * new[1] - 1)
    expected = timm_resize(table, new, (new_rows, 4))  # a square table's window, inferred as timm's Swin loader does
    with warnings.catch_warnings():  # timm's interpolation warns of its indexing and a copy: not the user's concern
        warnings.simplefilter("error")
        resized = resize_rel_pos_bias_table(table, old, new)
    torch.testing.assert_close(resized, expected, rtol=0, atol=0)


def test_resize_keeps_a_constant_table_and_rejects_bad_shapes():
    table = torch.full((13 * 13, 2), 0.5)
    torch.testing.assert_close(resize_rel_pos_bias_table(table, (7, 7), (4, 6)), torch.full((7 * 11, 2), 0.5))
    with pytest.raises(ValueError, match="does not fit window"):
        resize_rel_pos_bias_table(torch.zeros(10, 2), (7, 7), (12, 12))
    # int windows, as the model takes them: these refusals were a TypeError ('int' object is not iterable)
    with pytest.raises(ValueError, match=r"^table of shape \(10, 2\) does not fit window \(7, 7\)"):
        offset_grid(torch.zeros(10, 2), 7)
    with pytest.raises(ValueError, match=r"^window \(3, 3\) is smaller than the table's \(7, 7\): resize it"):
        embed_rel_pos_bias_table(table, 7, 3)
    with pytest.raises(ValueError, match=r"^window \(9, 9\) is larger than the table's \(7, 7\): embed it"):
        crop_rel_pos_bias_table(table, 7, 9)
    # a 1-D RelativePositionBias's table was an IndexError (tuple index out of range), a 3-D one's "does not fit"
    only_2d = r" ax[ie]s: bias tables are resized, cropped and embedded for 2-D windows only"
    for old, new in [((7,), (12,)), ((2, 3, 3), (2, 4, 4))]:
        with pytest.raises(ValueError, match=only_2d):
            resize_rel_pos_bias_table(RelativePositionBias(old, 2).table.detach(), old, new)
