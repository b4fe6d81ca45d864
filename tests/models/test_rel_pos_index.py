"""relative_position_index: one index per offset, covering the table, and Swin's literal 2-D formula; the bias
modules' buffers of it are built on the CPU, never on the meta device."""

import itertools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from swinlite.models.swin import (
    ContinuousPositionBias,
    RelativePositionBias,
    log_spaced_relative_coords,
    relative_position_index,
    sub_window_index,
)


@pytest.mark.parametrize("window", [(1,), (7,), (1, 1), (3, 5), (7, 7), (2, 3, 4)])
def test_same_offset_iff_same_index_and_table_covered(window):
    index = relative_position_index(window)
    n = 1
    for w in window:
        n *= w
    assert index.shape == (n, n) and index.dtype == torch.long
    coords = list(itertools.product(*(range(w) for w in window)))  # row-major token order
    index_of_offset: dict[tuple[int, ...], int] = {}
    for (i, ci), (j, cj) in itertools.product(enumerate(coords), repeat=2):
        offset = tuple(a - b for a, b in zip(ci, cj, strict=True))  # coords_i - coords_j
        index_of_offset.setdefault(offset, int(index[i, j]))
        assert index_of_offset[offset] == index[i, j], f"offset {offset} has two indices"
    assert len(set(index_of_offset.values())) == len(index_of_offset), "two offsets share an index"
    num_rows = 1
    for w in window:
        num_rows *= 2 * w - 1
    assert sorted(index_of_offset.values()) == list(range(num_rows)), "the index must cover the whole table"


@pytest.mark.parametrize("window", [(7, 7), (3, 5), (4, 2)])
def test_2d_is_the_swin_formula(window):
    wh, ww = window
    index = relative_position_index(window)
    for i, j in itertools.product(range(wh * ww), repeat=2):
        dh, dw = i // ww - j // ww, i % ww - j % ww
        assert index[i, j] == (dh + wh - 1) * (2 * ww - 1) + (dw + ww - 1)


def test_bad_window_raises():
    with pytest.raises(ValueError, match="positive"):
        relative_position_index((0, 3))
    with pytest.raises(ValueError, match="non-empty"):
        relative_position_index(())


@pytest.mark.parametrize("window,sub", [((7, 7), (4, 4)), ((7, 7), (2, 7)), ((4, 6), (3, 1)), ((5, 5), (5, 5))])
def test_a_smaller_windows_index_is_the_larger_ones_restricted_to_its_tokens(window, sub):
    """Token (r, c) of the smaller window is token (r, c) of the larger one: their pairs have the same offsets, so the
    same rows of the larger table."""
    full = relative_position_index(window)
    tokens = torch.tensor([r * window[1] + c for r in range(sub[0]) for c in range(sub[1])])
    torch.testing.assert_close(sub_window_index(window, sub), full[tokens][:, tokens], rtol=0, atol=0)


class _MetaOps(TorchDispatchMode):
    """Records the name of every op that returns a meta tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(isinstance(t, torch.Tensor) and t.is_meta for t in tree_leaves(out)):
            self.names.add(str(func.overloadpacket))
        return out


@pytest.mark.parametrize("bias_class", [RelativePositionBias, ContinuousPositionBias])
def test_bias_buffers_are_built_on_the_cpu_and_owned(bias_class):
    """On the meta device (the engine's preflight) the index and coordinates are copied in, not computed there (meta
    ops are slow); on the CPU each module owns its buffers: writing to one leaves the next module's intact."""
    with _MetaOps() as ops:
        bias_class((4, 6), 2, device="meta")
    assert not ops.names & {"aten.arange", "aten.log2", "aten.sign"}, sorted(ops.names)
    first, second = bias_class((4, 6), 2), bias_class((4, 6), 2)
    first.index.zero_()
    torch.testing.assert_close(second.index, relative_position_index((4, 6)), rtol=0, atol=0)
    if bias_class is ContinuousPositionBias:
        first.coords.zero_()
        torch.testing.assert_close(second.coords, log_spaced_relative_coords((4, 6)), rtol=0, atol=0)
