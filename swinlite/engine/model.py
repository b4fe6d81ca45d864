"""The ``model`` section, checked before any data is read, and the timm model it describes.

``model.name`` is a timm model (with a pretrained tag if wanted); ``model.pretrained`` is ``true`` (the tag's
weights), ``false`` or a weights file in any layout ``swinlite.convert_state_dict`` reads; ``model.kwargs``
passes keywords to the model's constructor through ``timm.create_model`` (``window_size``, ``img_size``,
``drop_path_rate``, ...). Pretrained weights go through timm's loader and ``convert_state_dict``, so relative
position bias tables are resized to the configured window; a file is read by its content, whatever its suffix, as
every task reads it (:func:`swinlite.io.read_state_dict`).
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import timm
import torch
from timm.models import clean_state_dict, get_arch_pretrained_cfgs, split_model_name_tag
from torch import nn

from ..convert import (
    FIRST_CONV,
    convert_pretrained,
    convert_state_dict,
    misfit_note,
    recorded_swin,
    recorded_swin_kwargs,
    shape_mismatch,
)
from ..hub import cached_weights, pretrained_kwargs
from ..io import check_weights_file, is_safetensors, mapped_state_dict, read_metadata, read_state_dict
from ..weights import (
    ignored_settings,
    in_checked_run,
    load_strict,
    model_source,
    timm_config,
    warn_if_resume_with_ema,
)
from .config import flow_yaml
from .sections import ModelConfig, pretrained_problem

# timm's keywords that say where pretrained weights come from: in model.kwargs they bypassed model.pretrained's
# checks and loading (a file given so raised "got multiple values", its weights checked against another head)
WEIGHTS_KWARGS = {
    key: "model.pretrained (model.pretrained=PATH loads a local weights file of any layout)"
    for key in ("pretrained_cfg", "pretrained_cfg_overlay", "checkpoint_path", "cache_dir")
}
_OFFLINE_HINT = (
    "or pass model.pretrained=PATH for a local weights file (any layout), model.pretrained=false to train from scratch"
)


def pretrained_file(cfg: ModelConfig) -> str | None:
    """The weights file ``model.pretrained`` names, or None (``true``: the tag's weights; ``false``: none)."""
    return cfg.pretrained if isinstance(cfg.pretrained, str) else None


def check_model(cfg: ModelConfig, reserved: Mapping[str, str], name: str | None = None) -> None:
    """ValueError, before any data is read, for a model section that cannot work: an unknown model name (one of timm's
    sources too, ``hf-hub:`` / ``local-dir:``, said with what to set instead), or a
    ``model.kwargs`` key its constructor does not take (naming the closest one) or a value it refuses. Whether the
    pretrained weights can be had is :func:`check_pretrained`'s.

    Args:
        cfg: the model section.
        reserved: the keys set otherwise, refused in ``model.kwargs``, each with who sets it, the error's reason
            (:attr:`swinlite.engine.task.Task.reserved_kwargs`); ``pretrained`` and timm's other weights keywords
            (:data:`WEIGHTS_KWARGS`) are ``model.pretrained``'s in every task.
        name: the model that takes ``model.kwargs`` (default ``cfg.name``).
    """
    name = name or cfg.name
    source = model_source(name)
    if source is not None:  # timm.create_model's names of a model save_for_hf saved: no registered model to check
        raise ValueError(
            f"model.name {name!r}: a run takes timm's registered model names, not {source}: ones; for the weights of a "
            "folder that timm.models.save_for_hf wrote, set model.name to the architecture its config.json records, "
            "model.kwargs to its model_args but num_classes, and model.pretrained to its weights file "
            "(model.safetensors or pytorch_model.bin; docs/models.md)"
        )
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else "e.g. swinlite_pico_patch2_window4_32"
        raise ValueError(f"model.name {name!r} is not a timm model; {hint}")
    _check_tag(name)
    check_reserved(cfg.kwargs, {"pretrained": "model.pretrained", **WEIGHTS_KWARGS, **reserved})
    _check_kwargs(name, cfg.kwargs)


def check_reserved(kwargs: Mapping[str, Any], set_by: Mapping[str, str], given: str = "model.kwargs") -> None:
    """ValueError for the first keyword of ``kwargs`` that ``set_by`` holds, naming who sets it instead (its value):
    ``{given}.{key}: set by {who}, not by {given}``, where ``given`` names what the keywords came in
    (``model.kwargs``; ``model_kwargs``, a builder's ``**model_kwargs``)."""
    key = next((k for k in kwargs if k in set_by), None)
    if key is not None:
        raise ValueError(f"{given}.{key}: set by {set_by[key]}, not by {given}")


def _check_tag(name: str) -> None:
    """ValueError naming ``name``'s tags when its tag is none of them (``timm.is_model`` takes any tag; the model's
    build then failed, blamed on ``model.kwargs``)."""
    arch, tag = split_model_name_tag(name)
    names = get_arch_pretrained_cfgs(arch)  # full names, arch.tag
    if tag and name not in names:
        tags = [n.partition(".")[2] for n in names if "." in n]
        known = f"its tags: {', '.join(tags)}" if tags else f"it has none: drop the tag ({arch})"
        raise ValueError(f"model.name {name!r}: {arch} has no pretrained tag {tag!r}; {known}")


def meta_model(name: str, kwargs: dict[str, Any]) -> nn.Module:
    """``timm.create_model(name, **kwargs)`` on the meta device: its structure and configs without memory or weights
    (0.03 s for Swin-T), for checks made before a run builds the real one. Within :func:`shared_meta_models`, built
    once per (name, kwargs) and the same model handed to every check, which reads it (or runs it in eval mode)."""
    shared, key = _SHARED_META_MODELS.get(), (name, repr(kwargs))
    if shared is not None and key in shared:
        return shared[key]
    with torch.device("meta"):
        model = timm.create_model(name, **kwargs)
    if shared is not None:
        shared[key] = model
    return model


# the meta models of the checks under way (shared_meta_models), by (name, repr(kwargs)); None outside them
_SHARED_META_MODELS: ContextVar[dict[tuple[str, str], nn.Module] | None] = ContextVar("meta_models", default=None)


@contextmanager
def shared_meta_models() -> Iterator[None]:
    """Within: :func:`meta_model` builds each (name, kwargs) once, for a run's checks, which would build the same
    model once each (its keywords, the input size, the model's data config)."""
    token = _SHARED_META_MODELS.set({})
    try:
        yield
    finally:
        _SHARED_META_MODELS.reset(token)


def _check_kwargs(name: str, kwargs: dict[str, Any]) -> None:
    """Build the model on the meta device with ``kwargs``: an unknown keyword is named with the closest one of the
    constructor's signature, a refused value with the constructor's reason."""
    try:
        meta_model(name, kwargs)
    except TypeError as e:
        if "unexpected keyword argument" not in str(e):
            raise ValueError(f"model.kwargs {kwargs} do not fit {name}: {e}") from None
        params = inspect.signature(type(meta_model(name, {})).__init__).parameters
        valid = [p for p, v in params.items() if p != "self" and v.kind in (v.KEYWORD_ONLY, v.POSITIONAL_OR_KEYWORD)]
        unknown = next(k for k in kwargs if f"'{k}'" in str(e))
        close = difflib.get_close_matches(unknown, valid, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'?" if close else f"valid keywords: {', '.join(valid)}"
        raise ValueError(f"model.kwargs.{unknown}: {name} takes no such keyword; {hint}") from None
    except (ValueError, RuntimeError, AssertionError) as e:
        raise ValueError(f"model.kwargs {kwargs} do not fit {name}: {e}") from None


def check_pretrained(cfg: ModelConfig) -> None:
    """ValueError for pretrained weights that cannot be had: no tag, no file, a cut download in the cache, or offline
    without them in the cache (the cache is looked in once; the hub asked, once and quickly, whether it answers only
    when they are not there). A file that is a run's resume.pt trained with EMA is warned of: its raw weights load
    (:func:`~swinlite.weights.warn_if_resume_with_ema`), in every task, as every script warns; so is a swinlite file
    whose recorded model settings ``model.kwargs`` leaves out (:func:`warn_unkept_settings`)."""
    if why := pretrained_problem(cfg.pretrained):  # a config built in Python, which no config check saw
        raise ValueError(f"model.pretrained {why}")
    path = pretrained_file(cfg)
    if path is not None:
        if not Path(path).is_file():
            raise ValueError(f"model.pretrained {path!r} is not a file (true loads the weights of model.name's tag)")
        check_weights_file(path)  # a cut download: timm's loader failed with a traceback after the data scan
        # every task's loader takes a resume.pt's raw weights, silently where it also holds their EMA: said here once
        # for all of them (a --resume builds without model.pretrained: no warning)
        warn_if_resume_with_ema(path, stacklevel=3)
        warn_unkept_settings(cfg, path)
        return
    if not cfg.pretrained:
        return
    if not timm.models.is_model_pretrained(cfg.name):
        tags = timm.list_pretrained(cfg.name.split(".")[0] + ".*")
        raise ValueError(
            f"model.pretrained=true but {cfg.name!r} has no pretrained weights; tags with weights: "
            + (", ".join(tags) or "none (give a weights file instead)")
        )
    cached = cached_weights(cfg.name)
    if cached is None:  # to download: the hub must answer (weights_kwargs asks it; cached weights load without it)
        weights_kwargs(cfg)
        return
    try:  # a cut download in the cache: timm's loader failed with a traceback after the data scan
        check_weights_file(cached)
    except ValueError as e:
        raise ValueError(f"model.pretrained=true: the cached weights of {cfg.name}: {e}; delete the file to "
                         "download it again") from None  # fmt: skip


def warn_unkept_in_build(cfg: ModelConfig) -> None:
    """:func:`warn_unkept_settings` of ``model.pretrained``'s file for a task's builder (``build_upernet``,
    ``build_detector``) called alone, the warning naming the line that called it; nothing within a run
    (:func:`~swinlite.weights.pretrained_checked`), whose checks (:func:`check_pretrained`) said it before the data
    was read."""
    path = pretrained_file(cfg)
    if path is not None and not in_checked_run():
        warn_unkept_settings(cfg, path, stacklevel=4)


def warn_unkept_settings(cfg: ModelConfig, path: str, stacklevel: int = 3) -> None:
    """UserWarning naming the model settings that the swinlite weights file ``path`` records (a classifier's or a
    converted backbone's ``model_args``, a detection or segmentation run's ``model.kwargs``:
    :func:`~swinlite.convert.recorded_swin_kwargs`; a plain file's, the ``model_args`` of timm's ``config.json`` beside
    it: :func:`~swinlite.weights.timm_config`) and ``model.kwargs`` leaves out, where the
    model then computes something else than the file's (``mask_padding=false``; not a training setting such as
    ``drop_path_rate``, nor one that changes the weights' shapes, which the load names:
    :func:`~swinlite.weights.ignored_settings`, as :func:`swinlite.load_checkpoint` warns), with the
    ``model.kwargs`` that keep them. Every weight loads into the model without them: said before the data is read.
    Nothing for a file of another model (the load names it) or that records none. ``stacklevel``: as
    :func:`warnings.warn` counts it here (3: the line calling the caller)."""
    metadata = read_metadata(path)
    name, recorded = recorded_swin(metadata), recorded_swin_kwargs(metadata)
    if name is None and (config := timm_config(path)) is not None:  # a folder timm.models.save_for_hf wrote
        name, recorded, _ = config
    if name is None or recorded is None or name.split(".")[0] != cfg.name.split(".")[0]:
        return
    model = meta_model(cfg.name, cfg.kwargs)
    try:
        ignored = ignored_settings(model, name, recorded, path)
    except ValueError:  # a record this swinlite cannot build (another version's argument): the load names what matters
        return
    unkept = {k: v for k, v in ignored.items() if k not in cfg.kwargs}
    if unkept:
        shown = [f"{key}={flow_yaml(value)}" for key, value in unkept.items()]
        warnings.warn(
            f"model.pretrained {path} records its {name} built with {', '.join(shown)}, which model.kwargs leaves "
            "out: its weights load into a model that computes something else than theirs; keep "
            f"{'it' if len(shown) == 1 else 'them'} with {' '.join(f'model.kwargs.{s}' for s in shown)}",
            stacklevel=stacklevel,
        )


def weights_kwargs(cfg: ModelConfig) -> dict[str, Any]:
    """Keywords of ``timm.create_model`` that load ``model.pretrained``'s weights: ``pretrained`` and, for a file or
    for hub weights read from the local cache while the hub does not answer, ``pretrained_cfg_overlay``. A file's
    weights are read here by their content (:func:`~swinlite.io.read_state_dict`: a timm training checkpoint's EMA
    weights, with its warning), as every task reads them: timm's loader decides the format by the file's suffix (a
    safetensors file named ``w.bin`` was read as a pickle).

    Raises:
        ValueError: ``true`` with weights neither cached nor downloadable (one quick check of the hub, no retries:
            :func:`swinlite.hub.pretrained_kwargs`), naming the hub repo and this config's ways around.
    """
    path = pretrained_file(cfg)
    if path is not None and is_safetensors(path) and path.endswith(".safetensors"):
        return {"pretrained": True, "pretrained_cfg_overlay": {"file": path}}  # timm's loader reads it as it is
    if path is not None:  # the module. and _orig_mod. of a wrapper dropped, as timm's loader drops them
        # timm's builder deep-copies a state dict it is given: a torch file's tensors are mapped, so that copy is the
        # one read of them (a misnamed safetensors file, or a legacy torch file, is read and copied once more)
        state = mapped_state_dict(path, stacklevel=4) or read_state_dict(path, stacklevel=4)  # EMA: warned of
        return {"pretrained": True, "pretrained_cfg_overlay": {"state_dict": clean_state_dict(state)}}
    if not cfg.pretrained:
        return {"pretrained": False}
    try:
        return {"pretrained": True, **pretrained_kwargs(cfg.name, hint=_OFFLINE_HINT)}
    except ValueError as e:
        raise ValueError(f"model.pretrained=true: {e}") from None


def first_conv_misfit(path: str, name: str, kwargs: dict[str, Any]) -> str | None:
    """What is wrong with the first conv (``patch_embed.proj.weight``) of the weights file ``path`` for the model
    ``name`` built with ``kwargs``, when their input channels differ and timm's loader cannot adapt them (it adapts
    3-channel weights to any ``in_chans``): ``"checkpoint does not fit SwinTransformer exactly; shape (file vs
    model): patch_embed.proj.weight (32, 1, 2, 2) vs (32, 3, 2, 2) (...)"``, as detection's and segmentation's loaders
    say it; else None (the file's first conv fits, or the file has none)."""
    model = meta_model(name, kwargs)
    theirs, ours = convert_state_dict(read_state_dict(path)).get(FIRST_CONV), model.state_dict().get(FIRST_CONV)
    if theirs is None or ours is None or theirs.shape[1] in (ours.shape[1], 3):
        return None
    return (
        f"checkpoint does not fit {type(model).__name__} exactly; shape (file vs model): "
        f"{shape_mismatch(FIRST_CONV, theirs.shape, ours.shape)} (weights for {theirs.shape[1]}-channel images; the "
        f"model takes {ours.shape[1]}: a task's loaders give RGB images)"
    )


def create_model(cfg: ModelConfig, **task_kwargs: Any) -> nn.Module:
    """``timm.create_model(cfg.name, **cfg.kwargs, **task_kwargs)`` starting from ``cfg.pretrained``'s weights.

    Both weight sources go through timm's loader and ``convert_state_dict``: bias tables are resized, a
    classifier of another size starts fresh (warned), a missing backbone weight is a ValueError (naming
    ``model.pretrained``'s file, and the model it records where another), and so is a first conv of input channels
    timm's loader cannot adapt to the model's (:func:`first_conv_misfit`).
    """
    path, weights = pretrained_file(cfg), weights_kwargs(cfg)
    try:
        model = timm.create_model(cfg.name, **cfg.kwargs, **task_kwargs, **weights)
    except ValueError as e:  # a file that does not fit: named, with the model it records (as detection's and
        if path is None:  # segmentation's loaders name it)
            raise
        raise ValueError(f"model.pretrained {path}: {e}{misfit_note(read_metadata(path), cfg.name)}") from None
    except RuntimeError:  # timm's loader refuses a first conv it cannot adapt with a RuntimeError traceback
        misfit = None if path is None else first_conv_misfit(path, cfg.name, {**cfg.kwargs, **task_kwargs})
        if misfit is None:
            raise
        raise ValueError(f"model.pretrained {path}: {misfit}") from None
    for module in model.modules():  # timm keeps a copy of the file's state dict in the pretrained_cfg it was given
        if isinstance(loaded := getattr(module, "pretrained_cfg", None), dict):  # (a feature wrapper's too)
            loaded.pop("state_dict", None)
    if cfg.grad_checkpointing:
        model.set_grad_checkpointing(True)
    return model


def load_leniently(swin: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """``model.kwargs.pretrained_strict=false`` for a ``model.pretrained`` file loaded into a detection or segmentation
    model's features-only Swin ``swin`` (a classifier's goes through timm's loader, which takes the keyword itself):
    ``state``, a Swin's weights in any layout swinlite reads, fitted as that loader fits them
    (:func:`~swinlite.convert.convert_pretrained` with ``strict=False``): weights the file lacks keep their initial
    values and keys the model lacks are dropped, each named in a warning; shapes and values are checked as strictly.

    Raises:
        ValueError: weights of another shape (naming the keys), or a layout swinlite does not read.
    """
    fitted = convert_pretrained(state, swin, strict=False)
    fresh = tuple(key for key in swin.state_dict() if key not in fitted)  # named in convert_pretrained's warning
    load_strict(swin, fitted, "checkpoint", may_start_fresh=fresh, values_checked=True)


def with_grad_checkpointing(model: nn.Module) -> None:
    """``model.grad_checkpointing=true`` on a task's ``model``: its ``set_grad_checkpointing(True)`` (again, where
    :func:`create_model` built it so), so that a model built with plain ``timm.create_model`` is checkpointed too (it
    trained without, silently). A model without the method passes where one of its modules checkpoints already (its
    backbone, built through ``create_model``), else is refused: a ValueError naming it (said first of the model built
    on the meta device, before any data is read: :func:`~swinlite.engine.preflight.check_model_structure`)."""
    if hasattr(model, "set_grad_checkpointing"):
        model.set_grad_checkpointing(True)
    elif not any(getattr(m, "grad_checkpointing", False) is True for m in model.modules()):
        raise ValueError(
            f"model.grad_checkpointing=true, but the task's model ({type(model).__name__}) has no "
            "set_grad_checkpointing and none of its modules checkpoints: build its Swin through "
            "swinlite.engine.model.create_model, or give the model a set_grad_checkpointing that forwards to it"
        )
