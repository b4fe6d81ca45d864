"""Argument and input handling around the Swin model, apart from its math (:mod:`swinlite.models.swin`).

Build-time checks raise a ValueError naming the argument and its allowed values; input checks do the same for
images; the empty-batch and patch-remainder rules say what the model runs on.
"""

import numbers
import operator
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from timm.layers import register_notrace_function


def autocast_available(device_type: str) -> bool:
    """Whether ``device_type`` has autocast (the meta device has none, and asking it for autocast's state fails).

    Under ``torch.compile`` the answer is True without asking: the devices compiled for have autocast, and dynamo
    before torch 2.14 cannot trace ``torch.amp.is_autocast_available`` (a graph break)."""
    return torch.compiler.is_compiling() or torch.amp.is_autocast_available(device_type)


FX_TRACING_HINT = (
    "torch.fx traces a swinlite model (the SwinTransformer itself: timm's functions are kept whole only in the traced "
    "module's own forward, not in a features_only wrapper's) with timm's leaf modules and functions, which keep the "
    "input checks and the blocks (their padding and shifts depend on the input's size) as single nodes: use timm's "
    "timm.models.create_feature_extractor, or features_only=True (feature_cls='fx' for a traced graph), or pass "
    "torchvision's create_feature_extractor tracer_kwargs={'leaf_modules': timm.layers.get_notrace_modules(), "
    "'autowrap_functions': timm.layers.get_notrace_functions()} with the SwinTransformer as the model"
)
# what FX_TRACING_HINT adds for torchvision's tracer: its create_feature_extractor and get_graph_node_names call
# train() on the model they are given before tracing and restore the mode only when the trace succeeds. swinlite
# cannot restore it for them: it does not know the mode before that train(), nor the modules around it.
FX_TRACING_TORCHVISION_MODE_HINT = (
    ". torchvision's create_feature_extractor / get_graph_node_names switched the model (and any module wrapping "
    "it) to training mode before tracing and did not switch it back: call .eval() on it again before using it"
)


@register_notrace_function  # value checks on the input's shape, not traceable
def check_image_input(x: torch.Tensor, in_chans: int, patch_size: tuple[int, int], dtype: torch.dtype) -> None:
    """Raise a ValueError naming the expected input unless ``x`` is a (B, in_chans, H, W) batch of ``dtype``.

    Under autocast the input may be of another floating dtype that autocast casts: any but float64, which it leaves
    as is (torch's own dtype error, deep inside a layer). TorchScript compiles this check too.
    """
    expected = f"a floating-point tensor of shape (B, {in_chans}, H, W) with H >= {patch_size[0]}, W >= {patch_size[1]}"
    if not torch.jit.is_scripting() and not isinstance(x, torch.Tensor):
        if isinstance(x, torch.fx.Proxy):  # a tracer without timm's leaves: it would trace into shape branches
            torchvision = type(x.tracer).__module__.startswith("torchvision.")
            raise TypeError(FX_TRACING_HINT + (FX_TRACING_TORCHVISION_MODE_HINT if torchvision else ""))
        raise ValueError(f"expected {expected}, got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"expected {expected}, got a {x.dim()}-D tensor of shape {list(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"expected {expected}, got dtype {x.dtype}")
    if x.shape[1] != in_chans:
        raise ValueError(f"expected {expected}, got {x.shape[1]} channels (shape {list(x.shape)})")
    if x.shape[2] < patch_size[0] or x.shape[3] < patch_size[1]:
        raise ValueError(f"expected {expected}, got an image of {x.shape[2]}x{x.shape[3]}, smaller than one patch")
    if x.dtype == dtype:
        return
    if torch.jit.is_scripting():
        autocast = torch.is_autocast_enabled()  # TorchScript's takes no device type
    else:
        device = x.device.type
        autocast = autocast_available(device) and torch.is_autocast_enabled(device)
    if not autocast:
        raise ValueError(
            f"input dtype {x.dtype} differs from the model's {dtype}: convert one of them (or use autocast)"
        )
    if x.dtype == torch.float64:
        raise ValueError(
            f"input dtype {x.dtype} differs from the model's {dtype} and autocast does not cast float64: convert the "
            f"input (x.float(), or x.to({dtype}))"
        )


@register_notrace_function  # a branch on the batch size, not traceable
def at_least_one_image(x: torch.Tensor) -> torch.Tensor:
    """``x``, or one blank image for an empty batch: the fast path's window kernels cannot reshape a batch of 0.

    Only a stage's blocks run on it (:class:`~swinlite.models.swin.SwinStage`), which then keeps the first ``B``
    results (:func:`first_images`): every other module, the stage itself and the user's hooks on them, sees the
    empty batch. The blank image is appended to ``x``, so that ``x`` gets its (empty) gradient.
    """
    return x if x.shape[0] > 0 else torch.cat([x, x.new_zeros([1] + list(x.shape[1:]))])


@register_notrace_function  # a branch on the batch size, not traceable
def first_images(x: torch.Tensor, batch: int) -> torch.Tensor:
    """x [B', ...] -> its first ``batch`` images [batch, ...]: an empty batch without the blank image of
    :func:`at_least_one_image`. ``x`` itself where there is nothing to cut: a slice of the whole batch would still
    cost a zero fill and a copy in backward."""
    return x if x.shape[0] == batch else x[:batch]


def crop_to_patches(x: torch.Tensor, patch_size: tuple[int, int]) -> torch.Tensor:
    """images [B, C, H, W] -> [B, C, H - H % ph, W - W % pw], the remainder dropped as torchvision's patch conv does."""
    return x[..., : x.shape[-2] - x.shape[-2] % patch_size[0], : x.shape[-1] - x.shape[-1] % patch_size[1]]


def pad_to_patches(x: torch.Tensor, patch_size: tuple[int, int]) -> torch.Tensor:
    """images [B, C, H, W] -> [B, C, ph * ceil(H / ph), pw * ceil(W / pw)], zero-padded bottom/right as the patch
    embedding's own padding (``dynamic_img_pad``) does, in a form whose size stays a simple expression in an exported
    graph with symbolic H and W."""
    height = (x.shape[-2] + patch_size[0] - 1) // patch_size[0] * patch_size[0]
    width = (x.shape[-1] + patch_size[1] - 1) // patch_size[1] * patch_size[1]
    if isinstance(height, int) and height == x.shape[-2] and width == x.shape[-1]:  # not symbolic, whole patches
        return x  # F.pad by nothing copies the images
    return F.pad(x, (0, width - x.shape[-1], 0, height - x.shape[-2]))


def is_int(value: object) -> bool:
    """An int (numpy's too, or a symbolic one under ``torch.compile``), not a bool."""
    return isinstance(value, (numbers.Integral, torch.SymInt)) and not isinstance(value, bool)


def check_build_args(
    dims: Sequence[int],
    depths: Sequence[int],
    num_heads: Sequence[int],
    sizes: dict[str, int],
    rates: dict[str, float],
) -> None:
    """ValueError naming the argument and its allowed values, at build time instead of at the first step.

    Args:
        dims: channels per stage.
        depths: blocks per stage.
        num_heads: attention heads per stage.
        sizes: integer arguments that must be positive, by name.
        rates: probabilities in [0, 1), by name.
    """
    for name, values in (("depths", depths), ("num_heads", num_heads)):
        if not all(is_int(v) for v in values):
            raise ValueError(f"{name} must be ints (a float is not truncated, a bool is no count), got {tuple(values)}")
    for name, value in sizes.items():
        if not is_int(value):
            raise ValueError(f"{name} must be an int (a float is not truncated, a bool is no size), got {value!r}")
    if len(depths) != len(num_heads) or len(depths) == 0:
        raise ValueError(f"depths {tuple(depths)} and num_heads {tuple(num_heads)} must have the same, non-zero length")
    if any(d < 1 for d in depths):
        raise ValueError(f"depths must be at least 1 block per stage, got {tuple(depths)}")
    for i, (dim, heads) in enumerate(zip(dims, num_heads, strict=True)):
        if heads < 1 or dim % heads:
            raise ValueError(f"stage {i}: {dim} channels cannot be split into num_heads={heads} heads")
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be positive, got {value}")
    for name, rate in rates.items():
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {rate}")


def check_num_classes(num_classes: object) -> None:
    """ValueError unless ``num_classes`` is an int >= 0 (0: no classifier), as the model is built and in
    ``reset_classifier`` (timm's takes -1 there, for a head that is an ``Identity``, as 0 gives)."""
    if not is_int(num_classes) or num_classes < 0:
        raise ValueError(f"num_classes must be an int >= 0 (0: no classifier), got {num_classes!r}")


def check_feature_indices(
    indices: int | Sequence[int] | None, num_stages: int, ordered: bool = False
) -> int | list[int] | None:
    """``indices`` as Python ints (a count or a sequence of integers of any kind, numpy's or 0-d tensors', as timm's
    Swin takes them, becomes an int or a list of ints); a ValueError naming the allowed values unless they select
    feature levels (a float, a bool: timm's Swin fails on a lone one with a TypeError).

    Args:
        indices: None (all levels), an int n (the last n levels) or a sequence of level indices, negative ones
            counted from the last (timm's rule: -1 is the last level).
        num_stages: number of feature levels.
        ordered: the levels must be strictly increasing (``features_only``'s ``out_indices``, whose maps come
            finest first while ``feature_info`` follows the order given); ``forward_intermediates`` takes any
            order, as timm's does, and returns the maps finest first.
    """
    if indices is None:
        return None
    try:
        given = list(indices)
    except TypeError:  # one value (a 0-d tensor too): the count n, an integer of any kind
        count = as_int(indices)
        if count is None or not 1 <= count <= num_stages:
            raise ValueError(
                f"an int selects the last n of {num_stages} levels, n in 1..{num_stages}; got {indices!r}"
            ) from None
        return count
    levels = [as_int(i) for i in given]
    bad = [i for i, level in zip(given, levels, strict=True) if level is None or not -num_stages <= level < num_stages]
    if bad or not levels or (ordered and [i % num_stages for i in levels] != sorted({i % num_stages for i in levels})):
        order = ", strictly increasing (each level once, finest first)" if ordered else ""
        raise ValueError(
            f"feature indices must be a non-empty sequence of levels in 0..{num_stages - 1} (or -{num_stages}..-1 "
            f"from the last){order}, got {tuple(given)}"
        )
    return levels


def as_int(value: object) -> int | None:
    """``value`` as a Python int where it is an integer of any kind ``operator.index`` takes (numpy's too: a config
    read by numpy, ``np.arange``), else None (a bool, a float)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None
