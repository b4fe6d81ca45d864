"""Tensors built once per argument tuple and shared, in caches bounded by entries and by bytes.

The window masks and gather indices depend only on the map size (:func:`~swinlite.models.swin.window_geometry`,
:func:`~swinlite.fast.blocks.window_index`): a model run at many sizes (detection at each image's own size) would
otherwise keep one set per size, on its device, after the model is gone. Each cache drops its least recently used
entries past its bytes; :func:`clear_caches` empties every one (a user who frees a model frees their memory too).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, ParamSpec, TypeVar

import torch

P = ParamSpec("P")
R = TypeVar("R")

MiB = 2**20
_KEYWORDS = object()  # separates the positional arguments from the keyword ones in a key, as functools.lru_cache's
_caches: weakref.WeakSet[TensorCache] = weakref.WeakSet()  # every cache made, for clear_caches


def tensor_bytes(value: Any) -> int:
    """Bytes of the storages of the tensors in ``value``: a tensor, or tensors in tuples (named ones too), lists and
    dataclasses, nested; anything else holds none."""
    if isinstance(value, torch.Tensor):
        return value.untyped_storage().nbytes()
    if isinstance(value, (tuple, list)):
        return sum(tensor_bytes(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(tensor_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    return 0


class TensorCache(Generic[P, R]):
    """``fn`` with its results kept per argument tuple (keyed as ``functools.lru_cache`` keys them), built under
    ``torch.inference_mode(False), torch.no_grad()``: plain tensors without an autograd graph, usable inside and
    outside inference mode. Shared between callers: never modify a result.

    The least recently used entries are dropped past ``maxsize`` entries or ``max_bytes`` bytes of tensors
    (:func:`tensor_bytes`); a result larger than ``max_bytes`` is returned, not kept. Thread-safe (a lock): as with
    ``lru_cache``, two threads may both build a missing entry; both get the one kept.
    """

    def __init__(self, fn: Callable[P, R], maxsize: int, max_bytes: int) -> None:
        if maxsize < 1 or max_bytes < 0:
            raise ValueError(f"a tensor cache needs maxsize >= 1 and max_bytes >= 0, got {maxsize} and {max_bytes}")
        functools.update_wrapper(self, fn)
        self._fn, self.maxsize, self.max_bytes = fn, maxsize, max_bytes
        self._entries: OrderedDict[Hashable, tuple[R, int]] = OrderedDict()  # key -> (result, bytes), oldest first
        self.nbytes = 0  # of the entries kept
        self._lock = threading.Lock()
        _caches.add(self)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        key = (*args, _KEYWORDS, *kwargs.items()) if kwargs else args
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry[0]
        with torch.inference_mode(False), torch.no_grad():
            result = self._fn(*args, **kwargs)
        size = tensor_bytes(result)
        if size > self.max_bytes:
            return result
        with self._lock:
            if key in self._entries:  # another thread built it meanwhile
                return self._entries[key][0]
            self._entries[key] = (result, size)
            self.nbytes += size
            while len(self._entries) > self.maxsize or self.nbytes > self.max_bytes:
                self.nbytes -= self._entries.popitem(last=False)[1][1]
        return result

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0


def tensor_cache(max_bytes: int, maxsize: int = 64) -> Callable[[Callable[P, R]], TensorCache[P, R]]:
    """Decorator: ``fn`` as a :class:`TensorCache` of at most ``maxsize`` entries holding ``max_bytes`` of tensors."""
    return lambda fn: TensorCache(fn, maxsize, max_bytes)


def clear_caches() -> None:
    """Empty every cache of tensors swinlite keeps between calls: the window masks and gather indices per map size,
    and the position-index tables per window. Their tensors outlive the models that used them (the next call builds
    them again); call it after freeing a model, before ``torch.cuda.empty_cache()``, to give their memory back."""
    for cache in list(_caches):
        cache.clear()
