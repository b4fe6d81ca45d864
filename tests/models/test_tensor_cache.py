"""The caches of tensors shared between calls: bounded in entries and in bytes, least recently used dropped first,
emptied by ``clear_caches`` (the window masks of 22 detection sizes held 294 MB, after the model was gone)."""

import dataclasses

import pytest
import torch

import swinlite
from swinlite.fast import blocks
from swinlite.models import swin
from swinlite.models.tensor_cache import TensorCache, tensor_bytes, tensor_cache

CPU = torch.device("cpu")


def _bytes_cache(max_bytes: int, maxsize: int = 64) -> TensorCache:
    """A cache of ``torch.zeros(n, dtype=uint8)`` per (name, n): n bytes each."""
    return tensor_cache(max_bytes=max_bytes, maxsize=maxsize)(lambda name, n: torch.zeros(n, dtype=torch.uint8))


def test_the_least_recently_used_entry_goes_past_the_bytes():
    cache = _bytes_cache(max_bytes=100)
    a, b = cache("a", 40), cache("b", 40)
    assert cache("a", 40) is a  # a used after b: b goes first
    c = cache("c", 40)
    assert (len(cache), cache.nbytes) == (2, 80)
    assert cache("a", 40) is a and cache("c", 40) is c and cache("b", 40) is not b


def test_the_least_recently_used_entry_goes_past_maxsize():
    cache = _bytes_cache(max_bytes=100, maxsize=2)
    a = cache("a", 1)
    cache("b", 1), cache("a", 1), cache("c", 1)
    assert len(cache) == 2 and cache("a", 1) is a


def test_a_result_larger_than_the_budget_is_returned_not_kept():
    cache = _bytes_cache(max_bytes=100)
    kept = cache("a", 60)
    big = cache("big", 101)
    assert big.numel() == 101 and cache("big", 101) is not big
    assert (len(cache), cache.nbytes) == (1, 60) and cache("a", 60) is kept


def test_results_are_plain_tensors_inside_inference_mode():
    with torch.inference_mode():
        result = _bytes_cache(max_bytes=100)("a", 4)
    assert not result.is_inference() and not result.requires_grad


@dataclasses.dataclass
class _Held:
    tensors: list[torch.Tensor]
    name: str


def test_tensor_bytes_counts_tensors_in_named_tuples_and_dataclasses():
    geometry = swin.WindowGeometry((8, 12), (2, 2), torch.zeros(6, 16, 16))
    assert tensor_bytes(geometry) == 6 * 16 * 16 * 4
    assert tensor_bytes(swin.WindowGeometry((8, 8), (0, 0), None)) == 0
    assert tensor_bytes(_Held([torch.zeros(3, dtype=torch.int64), torch.zeros(2)], "x")) == 3 * 8 + 2 * 4


def test_clear_caches_empties_every_cache():
    swin.window_geometry((7, 9), (4, 4), (2, 2), True, CPU)
    blocks.window_index((8, 12), (4, 4), (2, 2), CPU, batch=2)
    swin.flat_sub_window_index((4, 4), (2, 3), CPU)
    swin._cpu_relative_position_index((4, 4))
    swin._cpu_log_spaced_relative_coords((4, 4), None)
    ours = _bytes_cache(max_bytes=100)
    ours("a", 4)
    every = [
        swin._cached_window_geometry,
        blocks._cached_shifted_window_index,
        blocks._cached_batch_window_index,
        swin._cached_sub_window_index,
        swin._cpu_relative_position_index,
        swin._cpu_log_spaced_relative_coords,
        ours,
    ]
    assert all(len(cache) > 0 for cache in every)
    swinlite.clear_caches()
    assert [(len(cache), cache.nbytes) for cache in every] == [(0, 0)] * len(every)


def test_a_cache_needs_room_for_an_entry():
    with pytest.raises(ValueError, match="maxsize >= 1"):
        tensor_cache(max_bytes=100, maxsize=0)(lambda: None)
