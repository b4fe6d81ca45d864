"""The fast path: the reference modules of :mod:`swinlite.models.swin` swapped for subclasses that run kernels.

:func:`accelerate` walks a model and swaps every module whose class is a key of :data:`FAST_MODULES` for its fast
subclass, in place. The subclasses add no parameters or buffers, so the ``state_dict`` stays the same and
the function too; a module of any other class (a new block type, say) stays on the reference path.
``timm.create_model(name)`` applies it (``fast=True``, the default; ``swinlite/models/variants.py``);
``fast=False`` leaves the model as :mod:`swinlite.models.swin` wrote it.

Which kernel runs when is a table, in the docstring of :mod:`swinlite.fast.blocks`. Each kernel computes
exactly what the reference computes, and says in its docstring what it saves, which torch op it relies on,
its fallback, and the test that pins it to the reference (``tests/fast/``).
"""

from timm.layers import Mlp
from torch import nn

from ..models.swin import ContinuousPositionBias, SwinBlock, SwinV2Block, WindowAttention, WindowAttentionV2
from .blocks import FastLinear, FastMlp, FastSwinBlock, FastWindowAttention, row_blocks_for, select_attention_kernel
from .v2 import FastContinuousPositionBias, FastSwinV2Block, FastWindowAttentionV2

# reference class -> fast subclass; matched by exact class, so subclasses of these stay on the reference path
FAST_MODULES: dict[type[nn.Module], type[nn.Module]] = {
    SwinBlock: FastSwinBlock,
    WindowAttention: FastWindowAttention,
    Mlp: FastMlp,
    SwinV2Block: FastSwinV2Block,  # Swin-V2: swinlite/fast/v2.py
    WindowAttentionV2: FastWindowAttentionV2,
    nn.Linear: FastLinear,  # fp32 CPU inference through oneDNN where this CPU's BLAS is the slower
    ContinuousPositionBias: FastContinuousPositionBias,  # its MLP's table kept between inference calls
}


def accelerate(model: nn.Module) -> nn.Module:
    """Swap the modules of ``model`` (itself included) that have a fast subclass for it, in place.

    After the swap a fast class may make construction-time decisions in ``init_fast()``. Parameters, buffers,
    hooks and training mode are untouched.

    Returns:
        ``model``, for chaining.
    """
    for module in model.modules():
        fast = FAST_MODULES.get(type(module))
        if fast is not None:
            module.__class__ = fast
            init_fast = getattr(module, "init_fast", None)
            if init_fast is not None:
                init_fast()
    return model


__all__ = [
    "FAST_MODULES",
    "FastContinuousPositionBias",
    "FastLinear",
    "FastMlp",
    "FastSwinBlock",
    "FastSwinV2Block",
    "FastWindowAttention",
    "FastWindowAttentionV2",
    "accelerate",
    "row_blocks_for",
    "select_attention_kernel",
]
