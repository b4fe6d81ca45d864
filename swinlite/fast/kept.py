"""Values the fast path computes from a model's tensors once, not in every inference call: weight copies in another
dtype (:func:`~swinlite.fast.row_blocks.autocast_weights`), Swin-V2's position-bias table and merged q, k, v bias
(:mod:`swinlite.fast.v2`). Each is made again when a tensor it comes from changes, or after any optimizer step.

- Saves: per call, the kernels that make them again (at batch 1 on a GPU, launches the step waits on; counts in
  docs/performance.md, GPU section).
- Pinned by: ``tests/fast/test_autocast_weights.py`` and ``tests/fast/test_fast_v2.py`` (kept values equal the
  ones made per call, and are made again after an in-place change or a fused optimizer step).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.weak import WeakIdKeyDictionary

from ..models.swin import recording_graph

_optimizer_steps = 0  # steps of any torch.optim.Optimizer in this process since this module was imported


def _count_optimizer_step(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
    global _optimizer_steps
    _optimizer_steps += 1


# fused AdamW / Adam / SGD (``fused=True``) update parameters in place without bumping their version counters
register_optimizer_step_post_hook(_count_optimizer_step)


class Kept:
    """Values computed from tensors, each kept for its owner while those tensors are unchanged (same version counter
    and storage: ``load_state_dict``, timm's EMA update or ``.to()`` makes it again), no optimizer has stepped and the
    caller's ``extra`` (a dtype, a layout) is the same; one value per owner, held no longer than the owner lives.
    Any ``torch.optim.Optimizer``'s step makes every value again, whichever parameters it updated (timm's optimizers
    included): the fused ones (``fused=True``) change parameters in place without bumping their version counters.
    The storage is known by a weak reference, not its address: ``model.half().float()`` gives each weight a new
    storage under the same version counter, often where the allocator freed the old one. A value of a tensor alone
    is kept for its storage (``t.untyped_storage()`` as the owner), not the tensor: a weak reference to a parameter
    makes ``torch.utils.swap_tensors`` refuse it (``load_state_dict`` or ``.to()`` with
    ``torch.__future__.set_swap_module_params_on_conversion(True)``); the key then holds each tensor's shape, strides
    and dtype too, as views of one storage share its owner.

    Not seen: a change made in place through ``.data`` (``p.data.copy_(w)``), or into another tensor the parameter's
    memory is a view of (``torch.nn.utils.vector_to_parameters``'s vector), which PyTorch does not count in the
    parameter's version, outside an optimizer's step; change weights through the parameter under ``torch.no_grad()``
    (or ``load_state_dict``).
    Tensors made in ``torch.inference_mode()`` (a model built there) have no version counter: their values are
    computed in every call, as without the keeper."""

    def __init__(self) -> None:
        self._entries: WeakIdKeyDictionary = WeakIdKeyDictionary()  # owner -> (key, value)

    def get(
        self,
        owner: object,
        tensors: Sequence[torch.Tensor],
        extra: Hashable,
        compute: Callable[[], torch.Tensor],
    ) -> torch.Tensor:
        if any(t.is_inference() for t in tensors):  # made in inference mode: no version counter, so computed per call
            return compute()
        key = (extra, _optimizer_steps, *((t._version, t.data_ptr(), t.shape, t.stride(), t.dtype) for t in tensors))
        entry = self._entries.get(owner)  # (key, the storages' weak references, value)
        if entry is None or entry[0] != key or any(ref.expired() for ref in entry[1]):
            # a live storage holds its address, so an unexpired one at the same address is the same storage; a plain
            # tensor without an autograd graph, usable in and out of inference mode (inference_mode(False) alone
            # turns gradients back on)
            storages = [StorageWeakRef(t.untyped_storage()) for t in tensors]
            with torch.inference_mode(False), torch.no_grad():
                entry = (key, storages, compute())
            self._entries[owner] = entry
        return entry[2]


def keeps_values(device: torch.device) -> bool:
    """Whether a call may use (and make) :class:`Kept` values: eager, without autograd, not exporting and not while a
    CUDA graph is captured (a value made then would be filled only on replay), nor while ``torch.jit.trace`` records
    (a kept value would become a constant of the trace)."""
    if torch.is_grad_enabled() or torch.compiler.is_compiling() or recording_graph():
        return False
    return not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())
