"""Weights into models: the strict rebuild of a model from its weights file, loading into a given model, and
timm's published weights.

A self-describing file (see :mod:`swinlite.metadata`) rebuilds exactly its model from the file alone;
files in other layouts (official Microsoft, timm, torchvision, ... see :mod:`swinlite.convert`) load the
same way when the model name is given. Loading is strict (:func:`load_strict`): every weight of the model
comes from the file, every tensor of the file goes into the model, every floating weight is finite, or it
is a ValueError naming the file and the keys.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import json
import os
import warnings
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import timm
import torch
from timm.models import adapt_input_conv, get_pretrained_cfg_value
from timm.models._hub import load_model_config_from_path
from torch import nn

from .convert import (
    FIRST_CONV,
    check_weight_values,
    convert_state_dict,
    embed_shrunk_tables,
    missing_final_norm,
    other_architecture,
    recorded_swin,
    recorded_swin_kwargs,
    state_dict_mismatch,
    warn_at_caller,
)
from .fast import FAST_MODULES
from .files import TIMM_FOLDER_WEIGHTS
from .hub import cached_weights, has_weights, pretrained_kwargs
from .io import (
    check_not_resume_state,
    holds_ema,
    holds_resume_ema,
    read_metadata,
    read_weights,
    resume_ema_in,
    resume_task,
    resume_task_in,
    state_dict_in,
)
from .metadata import KINDS, WeightsInfo, info_in, read_info, recorded_preprocessing, weights_metadata
from .models.pretrained import lite_name
from .models.swin import SwinTransformer

__all__ = [
    "KINDS",
    "WeightsInfo",
    "WeightsMismatchError",
    "check_model_name",
    "check_not_run_resume",
    "ema_counterpart",
    "load_checkpoint",
    "load_model",
    "load_strict",
    "pretrained_model",
    "read_info",
    "state_dict_mismatch",
    "warn_if_resume_with_ema",
    "weights_metadata",
]


def ema_counterpart(path: str | os.PathLike) -> Path:
    """The EMA weights of the same run as ``path``: the file itself when it holds EMA weights (a swinlite file
    recording them, a torch training checkpoint holding ``state_dict_ema`` / ``model_ema``, which reads as them), else
    ``<stem>_ema.safetensors`` beside it (``best_ema.safetensors``: the best EMA epoch, which may be another than
    best.safetensors'), or ``ema.safetensors`` for ``last.safetensors``: the EMA of the same epoch.

    Raises:
        ValueError: no such file; a swinlite run's resume state (:func:`check_not_run_resume`); raw weights without
            their EMA beside them; an ``ema.safetensors`` of another epoch than the
            ``last.safetensors`` it is the EMA of (a run resumed with ``train.ema_decay`` off went on without it).
    """
    path = Path(path)
    recorded = read_metadata(path).get("weights")
    check_not_run_resume(path)  # before the EMA files: it names the run's weights, which --ema then takes
    if recorded == "ema" or holds_ema(path):  # the engine's key, in every task's files
        return path
    names = [f"{path.stem}_ema.safetensors"] + (["ema.safetensors"] if path.stem == "last" else [])
    for name in names:
        candidate = path.with_name(name)
        if candidate.is_file():
            if name == "ema.safetensors":
                _check_same_epoch(path, candidate)
            return candidate
    others = sorted(p.name for p in path.parent.glob("*.safetensors") if _records(p, "ema"))
    hint = f"; EMA files there: {', '.join(others)}" if others else " (trained without train.ema_decay?)"
    raise ValueError(f"--ema: {path} holds raw weights and there is no {' or '.join(names)} beside it{hint}")


def _check_same_epoch(last: Path, ema: Path) -> None:
    """ValueError where ``ema`` (ema.safetensors) records another epoch than ``last`` (last.safetensors): the EMA of
    an earlier epoch, which ``--ema`` gave as the last one's."""
    epochs = [read_metadata(p).get("epoch") for p in (last, ema)]
    if None not in epochs and epochs[0] != epochs[1]:
        raise ValueError(
            f"--ema: {ema} holds the EMA weights of epoch {epochs[1]}, {last} those of epoch {epochs[0]} (the run went "
            f"on without train.ema_decay?): give {ema} itself for epoch {epochs[1]}'s EMA weights"
        )


def check_not_run_resume(path: str | os.PathLike, data: bytes | None = None) -> None:
    """ValueError for a classification, detection or segmentation run's resume state (its ``resume.pt``; ``data``: its
    bytes where given) given as weights, naming the run's weights files, which record its model, classes and
    preprocessing: read with a model name, a classification run's gave its classifier at the model's default size
    and without its class names, a detection or segmentation run's the raw levels of a classifier's Swin. A task of
    the user's own passes, whose model a script reads with ``--model`` as before (its weights files, which name their
    task, the scripts refuse). ``model.pretrained`` takes any run's resume state, with the run's ``config.yaml``: it
    does not check here."""
    check_not_resume_state(resume_task(path, data), str(path), Path(path).parent)


def warn_if_resume_with_ema(path: str | os.PathLike, data: bytes | None = None, stacklevel: int = 2) -> None:
    """Warn, once the weights of ``path`` (its bytes ``data`` where given) are loaded, that they are the raw ones when
    the file also holds their EMA: a swinlite run's ``resume.pt`` trained with ``train.ema_decay`` keeps the model
    (its ``model``, what :func:`~swinlite.io.read_state_dict` gives) beside the EMA of its weights (its ``ema``, a key
    no reader takes), and a user who trained with EMA and points a script at it may think they get those. No warning
    for another file, a ``resume.pt`` without EMA included. ``stacklevel``: as :func:`warnings.warn` counts it from
    the caller (2: the caller's line)."""
    if holds_resume_ema(path, data):
        _warn_resume_ema(path, stacklevel + 1)


def _warn_resume_ema(path: str | os.PathLike, stacklevel: int) -> None:
    """:func:`warn_if_resume_with_ema`'s warning, for a file known to hold its raw weights and their EMA."""
    warnings.warn(
        f"{path} is a run's resume state: its weights are the raw ones (its 'model'), though it also holds their "
        "EMA (its 'ema'); for the EMA weights load the run's ema.safetensors (a script's --ema with the run's "
        "last.safetensors)",
        stacklevel=stacklevel,
    )


def _records(path: Path, kind: str) -> bool:
    try:
        return read_metadata(path).get("weights") == kind
    except ValueError:
        return False


def check_model_name(name: str, pattern: str = "*") -> None:
    """ValueError with a "did you mean" when ``name`` is not a timm model matching ``pattern``.

    A name with a pretrained tag (``arch.tag``) must be one timm lists with weights. A name of timm's model sources
    (``hf-hub:``, ``local-dir:``: a model ``timm.models.save_for_hf`` saved) is refused, naming the folder's weights
    file to give instead (:func:`model_source`).
    """
    source = model_source(name)
    if source is not None:
        download = " (an hf-hub: repo's folder: huggingface_hub.snapshot_download)" if source == "hf-hub" else ""
        raise ValueError(
            f"{name!r}: swinlite's scripts take no {source}: model names (timm.create_model's); a folder that "
            f"timm.models.save_for_hf wrote{download} is read as weights: give its weights file, --checkpoint "
            f"{' or '.join(f'FOLDER/{n}' for n in TIMM_FOLDER_WEIGHTS)} (swinlite.load_model(FOLDER)), and no "
            "--model: its config.json gives the model, its settings, preprocessing and class names"
        )
    tagged = "." in name
    if fnmatch.fnmatch(name, pattern) and (
        name in timm.list_models(name, pretrained=True) if tagged else timm.is_model(name)
    ):
        return
    names = timm.list_models(pattern, pretrained=tagged)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else f" (see timm.list_models({pattern!r}))"
    what = "timm model" if pattern == "*" else f"model (expected {pattern})"
    raise ValueError(f"unknown {what} {name!r}{hint}")


def model_source(name: str) -> str | None:
    """The source of a timm model name that names one (``hf-hub:REPO``, ``local-dir:FOLDER``, as
    ``timm.create_model`` reads them: a model ``timm.models.save_for_hf`` saved), else None."""
    source, colon, _ = name.partition(":")
    source = source.lower().replace("_", "-")  # timm's alias hf_hub
    return source if colon and source in ("hf-hub", "local-dir") else None


def pretrained_model(name: str, hint: str = "") -> nn.Module:
    """timm's model ``name`` with its published pretrained weights (from the Hugging Face cache or the hub), in eval
    mode; whether the hub can be reached is asked once, quickly (:func:`swinlite.hub.pretrained_kwargs`). What a
    script's ``--model NAME`` without ``--checkpoint`` loads (``predict.py``, ``extract_features.py``,
    ``visualize.py``): never the random initial weights of a name timm publishes none for, which is an error.

    Args:
        name: a timm model name, with a pretrained tag or not.
        hint: how the caller's user gets weights otherwise (e.g. the script's options), appended to errors.

    Raises:
        ValueError: an unknown name; a name without published weights; weights that cannot be had or loaded.
    """
    check_model_name(name)
    if not has_weights(name):
        raise ValueError(
            f"timm publishes no pretrained weights for {name} (see timm.list_models(pretrained=True)), and its random "
            "initial weights would label, draw or extract nothing of use" + (f"; {hint}" if hint else "")
        )
    kwargs = pretrained_kwargs(name, hint)
    try:
        model = timm.create_model(name, pretrained=True, **kwargs)
    except Exception as e:  # hub, network and file errors come in many types
        cached = cached_weights(name)
        where = f" from {cached} (damaged or truncated? delete it to download it again)" if cached else ""
        raise ValueError(
            f"the pretrained weights of {name} could not be loaded{where}: {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else 'no detail'}" + (f"; {hint}" if hint else "")
        ) from None
    return model.eval()


def load_model(
    path: str | os.PathLike,
    model: str | None = None,
    num_classes: int | None = None,
    data: bytes | None = None,
    **model_kwargs: Any,
) -> nn.Module:
    """Rebuild the model a weights file holds and load every weight strictly; returns it in eval mode.

    For a self-describing file (see :mod:`swinlite.metadata`) the file alone decides the model: ``model``
    and ``num_classes`` may be given but must agree with it. A model record (:func:`~swinlite.metadata.is_model_record`:
    ``convert_checkpoint.py``'s output fitted to ``--model``, or of a detection or segmentation run) gives the model it
    records, built with the settings it records (a V2's windows) unless ``model_kwargs`` give others, and the file's
    classifier, its classes unnamed; ``model``, where given, must be that one. So does a folder that
    ``timm.models.save_for_hf`` wrote, or its weights file (``model.safetensors`` or ``pytorch_model.bin`` with timm's
    ``config.json`` beside it, :func:`timm_config`; not another file in that folder):
    the model its ``architecture`` names, built with its ``model_args``, its ``pretrained_cfg`` (preprocessing and
    class names) given to the model. For other files (any layout :func:`swinlite.convert_state_dict` reads, or a plain
    state dict of any timm model) ``model`` is required. ``num_classes`` defaults to the file's classifier (0, no
    classifier, when it has none).

    The model's ``pretrained_cfg`` carries the file's preprocessing (a model record's: the mean and std of the run it
    was converted from) and class names (``label_names``), so ``timm.data.resolve_model_data_config(model)`` gives its
    evaluation transform. A swinlite run's ``resume.pt``
    is refused, naming the run's weights (:func:`check_not_run_resume`); that of a task of the user's own gives its
    raw weights, with a warning where it also holds their EMA (:func:`warn_if_resume_with_ema`).

    Args:
        path: the weights file, or a folder ``timm.models.save_for_hf`` wrote (:func:`timm_folder_weights`).
        model: timm model name.
        num_classes: classifier outputs.
        data: the file's bytes, read before (:func:`swinlite.io.read_weights_bytes`): loaded instead of the file as it
            is now, for a caller that records their hash (``extract_features.py``'s ``settings.json``).
        **model_kwargs: further constructor arguments (e.g. ``out_norm=True``); they must not contradict the file,
            but for the training settings of :data:`TRAINING_ONLY` (``drop_path_rate=0.2`` to fine-tune a run's
            weights at another rate). Not ``features_only``: the file holds the whole model, whose levels
            ``FeatureExtractor(load_model(path), out_indices)`` returns (``swinlite.export``'s).

    Raises:
        ValueError: ``features_only``; unreadable file, a swinlite run's resume state (:func:`check_not_run_resume`),
            unknown or contradicting model, or a weight that does not load.
    """
    if model_kwargs.get("features_only"):
        raise ValueError(
            f"load_model rebuilds the model {path} holds, not a features_only wrapper of it: for its feature levels "
            "use FeatureExtractor(load_model(path), out_indices) (from swinlite.export import FeatureExtractor; "
            "out_indices as features_only takes them), or timm.create_model(name, features_only=True, pretrained=True, "
            "pretrained_cfg_overlay=dict(file=path), **the model_args the file records)"
        )
    path = timm_folder_weights(path)
    metadata, checkpoint = read_weights(path, data)  # the one read of the file
    info = info_in(metadata, path)
    check_not_resume_state(resume_task_in(checkpoint), str(path), path.parent)
    state = state_dict_in(path, checkpoint, stacklevel=3)  # an EMA warning names the line calling load_model
    checked = False  # whether a conversion checked the values of ``state`` already
    if info is None:
        model, settings, cfg = _recorded_model(path, metadata, model)
        if model is None:
            raise ValueError(
                f"{path} does not record its model; pass --model (load_model's model=), its timm name, or use weights "
                "that record it: a training run's (best.safetensors, last.safetensors), or the file converted once by "
                "scripts/convert_checkpoint.py --model NAME"
            )
        check_model_name(model)
        if num_classes is None:
            try:
                num_classes = classifier_size(model, state)
            except ValueError as e:
                raise _naming(path, e) from None
            checked = _is_swinlite(model)  # its conversion checked every value, more strictly than loading does
        net = create_to_load(path, model, num_classes=num_classes, **(settings | model_kwargs))
        set_preprocessing(net, cfg)  # a model record's: its run's mean and std; timm's config.json: its pretrained_cfg
    else:
        check_agrees(path, info, model, num_classes, model_kwargs)
        try:
            check_model_name(info.model)
        except ValueError as e:
            raise ValueError(f"{path} records {e}") from None
        net = create_to_load(path, info.model, **(info.model_args | model_kwargs))
        set_preprocessing(net, info.preprocessing, label_names=info.classes, num_classes=len(info.classes))
    converted_from = metadata.get("layout")  # scripts/convert_checkpoint.py records the layout it converted
    layout = converted_from if isinstance(converted_from, str) else "swinlite"
    load_strict(net, state, path, values_checked=checked, layout=layout)
    if resume_ema_in(checkpoint):
        _warn_resume_ema(path, stacklevel=3)  # names the line calling load_model
    return net.eval()


def set_preprocessing(net: nn.Module, preprocessing: Mapping[str, Any], **cfg: Any) -> None:
    """Give ``net`` (a model, or timm's features_only wrapper of one) the ``preprocessing`` a weights file records
    (:func:`~swinlite.metadata.recorded_preprocessing`: JSON's lists, held as tuples as timm's configs hold them) and
    ``cfg`` in its ``pretrained_cfg``, over the variant's, so that ``timm.data.resolve_model_data_config(net)`` gives
    the file's evaluation transform. Class names (``label_names``) stay a list, as timm and :func:`load_model` hold
    them."""
    values = {k: tuple(v) if isinstance(v, list) and k != "label_names" else v for k, v in preprocessing.items()}
    net.pretrained_cfg = net.default_cfg = {**net.pretrained_cfg, **values, **cfg}  # timm keeps default_cfg as an alias


def _recorded_model(
    path: str | os.PathLike, metadata: Mapping[str, Any], model: str | None
) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """(model name, constructor arguments but ``num_classes``, ``pretrained_cfg`` entries) of a file :func:`load_model`
    reads as plain weights: those a model record holds (:mod:`swinlite.metadata`: a V2's windows, which its weights do
    not hold; the mean and std of its run), else those of timm's ``config.json`` beside it (:func:`timm_config`), where
    ``model`` is None or the same; ``model`` and none for a file that records no model.

    Raises:
        ValueError: a ``model`` other than the one the file (or its ``config.json``) records.
    """
    recorded = recorded_swin(metadata)
    if recorded is not None:
        settings, cfg = recorded_swin_kwargs(metadata) or {}, recorded_preprocessing(metadata, path)
        where = f"{path}, which holds"
    elif (config := described_config(path, model)) is not None:
        recorded, settings, cfg = config
        where = f"{Path(path).with_name('config.json')}, which records"
        try:
            check_model_name(recorded)
        except ValueError as e:
            raise ValueError(f"{Path(path).with_name('config.json')} records {e}") from None
    else:  # no record; or timm's config.json of timm's own model (a hub snapshot of its Swin), converted into --model
        return model, {}, {}
    if model is not None and model.split(".")[0] != recorded.split(".")[0]:
        raise ValueError(f"--model {model} contradicts {where} a {recorded}; drop --model")
    return model or recorded, {k: v for k, v in settings.items() if k != "num_classes"}, cfg


def described_config(path: str | os.PathLike, model: str | None) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """:func:`timm_config` of ``path`` where it describes the model ``model`` names (:func:`describes`; any, without
    one): what :func:`load_model` builds the model from, and evaluate reads the class names of."""
    config = timm_config(path)
    return config if config is not None and (model is None or describes(config[0], model)) else None


def describes(recorded: str, model: str) -> bool:
    """Whether a folder's config.json recording the model ``recorded`` describes the one ``--model`` names: the same
    model, or another swinlite model (which ``--model`` contradicts); timm's own model (a hub snapshot of timm's Swin,
    say) does not describe a ``--model`` of another name, whose layout its weights are converted from, as any file's."""
    return recorded.split(".")[0] == model.split(".")[0] or recorded.startswith("swinlite_")


def timm_folder_weights(path: str | os.PathLike) -> Path:
    """The weights file of a folder that ``timm.models.save_for_hf`` wrote (a ``config.json`` of timm's,
    :func:`timm_config`): the first of :data:`TIMM_FOLDER_WEIGHTS` in it; ``path`` itself for anything else (a file;
    another folder, which the reader refuses as no file).

    Raises:
        ValueError: such a folder without its weights.
    """
    path = Path(path)
    if not path.is_dir() or timm_config(path) is None:
        return path
    found = next((path / name for name in TIMM_FOLDER_WEIGHTS if (path / name).is_file()), None)
    if found is None:
        raise ValueError(
            f"{path} holds timm's config.json but not its weights (expected {' or '.join(TIMM_FOLDER_WEIGHTS)}, "
            "as timm.models.save_for_hf writes them)"
        )
    return found


def timm_config(path: str | os.PathLike) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """(``architecture``, ``model_args``, ``pretrained_cfg``) that the ``config.json`` beside the weights file ``path``
    records where ``timm.models.save_for_hf`` wrote it (an ``architecture`` and a ``pretrained_cfg`` or
    ``model_args``), read as timm's ``local-dir:`` reads it (the class names and ``num_classes`` it keeps at its top
    level in the ``pretrained_cfg``; where timm found the folder, ``file`` and ``source``, left out). None without a
    ``config.json`` there, or with another tool's (transformers' names its ``architectures``; one that is no JSON).
    ``path``: the folder, or its weights file (one of :data:`TIMM_FOLDER_WEIGHTS`); None for any other file beside
    the ``config.json`` (``other.pth`` of another model: the config does not describe it).

    Raises:
        ValueError: timm's ``config.json`` that timm cannot read (one naming a model this timm does not know is read:
            :func:`load_model` refuses it where it describes the model it builds).
    """
    path = Path(path)
    if not path.is_dir() and path.name not in TIMM_FOLDER_WEIGHTS:
        return None
    config = path / "config.json" if path.is_dir() else path.with_name("config.json")
    if not config.is_file():
        return None
    try:
        recorded = json.loads(config.read_bytes())
    except (OSError, ValueError):  # another tool's file (timm writes JSON): the weights are read without it
        return None
    if not isinstance(recorded, dict) or not isinstance(recorded.get("architecture"), str):
        return None
    if "pretrained_cfg" not in recorded and "model_args" not in recorded:
        return None
    try:
        pretrained_cfg, architecture, model_args = load_model_config_from_path(config.parent)
        model_args = dict(model_args)
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # a malformed entry fails timm's reader anyhow
        raise ValueError(f"{config} is not timm's config as save_for_hf writes it: {type(e).__name__}: {e}") from None
    cfg = {k: v for k, v in pretrained_cfg.items() if k not in ("file", "source")}
    return architecture, model_args, cfg


def create_for_file(path: str | os.PathLike, name: str, **kwargs: Any) -> nn.Module:
    """``timm.create_model``; constructor arguments it rejects are a ValueError naming the file."""
    try:
        return timm.create_model(name, **kwargs)
    except (TypeError, ValueError, AssertionError, RuntimeError) as e:  # timm models reject arguments in many ways
        raise ValueError(f"{path}: {name} cannot be built with {kwargs}: {type(e).__name__}: {e}") from None


def create_to_load(path: str | os.PathLike, name: str, **kwargs: Any) -> nn.Module:
    """:func:`create_for_file` for a model whose every weight is then loaded strictly from ``path``: a swinlite model
    is built on the meta device and allocated on the CPU (or the ``device`` given), its parameters left uninitialised
    and its non-persistent buffers (the position-bias indices and coordinates) filled, so that the random
    initialisation a weights file replaces is skipped (most of the time of loading Swin-T's file). Other timm models
    are built as :func:`create_for_file` builds them.

    Only for a strict load (:func:`load_strict` without ``may_start_fresh``): a weight left out would keep what the
    memory held.
    """
    if not _is_swinlite(name):
        return create_for_file(path, name, **kwargs)
    with torch.device("meta"):
        net = create_for_file(path, name, **{**kwargs, "device": "meta"})
    net.to_empty(device=kwargs.get("device") or "cpu")  # where create_model would have built it
    for module in net.modules():
        if module._non_persistent_buffers_set:
            module.init_non_persistent_buffers()  # swinlite's modules holding such buffers define it (tested)
    return net


# constructor arguments that change neither the weights' shapes nor the eval-mode function (dropout, stochastic
# depth, which stages train): given to load_model, they may differ from a file's record (fine-tuning at another rate)
TRAINING_ONLY = ("drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate", "frozen_stages")
# how a file's weights load into the model (model.kwargs.pretrained_strict), not what the model computes
LOADING_ONLY = ("pretrained_strict",)


def check_agrees(
    path: str | os.PathLike, info: WeightsInfo, model: str | None, num_classes: int | None, kwargs: dict
) -> None:
    """A flag that contradicts the file is an error, never a silently different model."""
    if model is not None and model.split(".")[0] != info.model.split(".")[0]:
        raise ValueError(f"--model {model} contradicts {path}, which holds a {info.model}; drop --model")
    stored = info.model_args.get("num_classes", len(info.classes))
    if num_classes is not None and num_classes != stored:
        raise ValueError(f"--num-classes {num_classes} contradicts {path}, which has {stored} classes")
    recorded = info.model_args  # as JSON decodes it: a tuple given is a list there
    clash = [k for k in kwargs if k in recorded and _as_json(kwargs[k]) != recorded[k] and k not in TRAINING_ONLY]
    clash += _changed_by_unrecorded(path, info, kwargs)
    if clash:
        raise ValueError(
            f"{', '.join(clash)} contradict {path}: it records {info.model_args}, the rest the model's defaults "
            f"(only training settings, {', '.join(TRAINING_ONLY)}, may differ)"
        )


def _changed_by_unrecorded(path: str | os.PathLike, info: WeightsInfo, kwargs: dict) -> list[str]:
    """The arguments of ``kwargs`` the file does not record (its model was built with their defaults) that build
    another model than the file's (:func:`_difference`, on the meta device): ``mask_padding=False`` or a V2's
    ``img_size`` load every weight, yet compute something else. One that builds the same model passes (the
    default's own value; a V1's ``img_size``), and so does one that changes the weights the model holds
    (``out_norm=True``): the strict load names them."""
    unrecorded = {k: v for k, v in kwargs.items() if k not in info.model_args and k not in (*TRAINING_ONLY, *WHERE_RUN)}
    if not unrecorded:
        return []
    with torch.device("meta"):
        built = create_for_file(path, info.model, **info.model_args)
        return [
            key
            for key, value in unrecorded.items()
            if _difference(built, create_for_file(path, info.model, **info.model_args, **{key: value}))
        ]


# constructor arguments that choose where and how the model runs, not what it computes: the fast path (the same
# function), the device and dtype it is built on
WHERE_RUN = ("fast", "device", "dtype")
# attributes that do not change what a model computes: its mode, whether its position-bias buffers are filled yet
# (a model built on a device: not on the meta device), and the input size it was built for and the reference windows
# set_input_size scales, which an any-size model's forward does not read (a V1's img_size changes these alone; a
# V2's changes its windows too)
_NOT_COMPUTED = frozenset({"training", "filled", "img_size", "grid_size", "num_patches", "_ref_grid_size",
                           "_ref_window_sizes"})  # fmt: skip
_ABSENT = object()  # a fact one model has and another has not


def _settings(model: nn.Module) -> dict[tuple[str, ...], object]:
    """What a constructor argument changes in ``model``, one entry per fact: each module's class (module,
    ``"class"``), plain settings (module, ``"attr"``, name: its attributes that are numbers, strings, tuples or None,
    but :data:`_NOT_COMPUTED`) and tensors' shapes (module, ``"shape"``, name: its non-persistent buffers' too)."""
    plain = (bool, int, float, str, tuple, type(None))
    facts: dict[tuple[str, ...], object] = {}
    for name, module in model.named_modules():
        facts[(name, "class")] = type(module).__qualname__
        attrs = {k: v for k, v in vars(module).items() if isinstance(v, plain) and k not in _NOT_COMPUTED}
        facts |= {(name, "attr", k): v for k, v in (attrs | _exact_gelu(module)).items()}
        tensors = [*module._parameters.items(), *module._buffers.items()]
        facts |= {(name, "shape", k): tuple(t.shape) for k, t in tensors if t is not None}
    return facts


def _exact_gelu(module: nn.Module) -> dict[str, object]:
    """``approximate="none"`` for a GELU without the attribute (timm's, which ``act_layer="gelu"`` builds, computes
    torch's exact GELU, whose attribute it is): one entry for the same function."""
    return {"approximate": "none"} if type(module).__name__ == "GELU" and not hasattr(module, "approximate") else {}


def _difference(base: nn.Module, other: nn.Module) -> dict[tuple[str, ...], object] | None:
    """The facts (:func:`_settings`) in which ``other`` differs from ``base``, each to ``base``'s value (:data:`_ABSENT`
    where ``base`` has no such fact); None where the shapes of their weights differ (what the strict load names)."""
    if {k: v.shape for k, v in base.state_dict().items()} != {k: v.shape for k, v in other.state_dict().items()}:
        return None
    ours, theirs = _settings(base), _settings(other)
    return {
        f: ours.get(f, _ABSENT) for f in ours.keys() | theirs.keys() if ours.get(f, _ABSENT) != theirs.get(f, _ABSENT)
    }


def _ignored_settings(model: nn.Module, metadata: Mapping[str, Any], path: str | os.PathLike) -> list[str]:
    """:func:`ignored_settings` of the settings a swinlite file records for its Swin (``metadata``, the file's: a
    classifier's or a model record's ``model_args``, a detection or segmentation run's ``model.kwargs``), as
    ``key=value``. Nothing for a file that records none (plain weights), or settings this swinlite cannot build
    (another version's argument: the load names what matters).

    Raises:
        ValueError: a classifier's metadata that is wrong (:func:`~swinlite.metadata.info_in`).
    """
    if metadata.get("task") in (None, "classification"):
        info_in(metadata, path)  # a classifier's record refused where wrong, as every reader refuses it
    name, recorded = recorded_swin(metadata), recorded_swin_kwargs(metadata)
    if name is None or recorded is None:
        return []
    try:
        ignored = ignored_settings(model, name, recorded, path)
    except ValueError:
        return []
    return [f"{key}={value!r}" for key, value in ignored.items()]


# within a run (swinlite.engine.run), whose checks warned of the settings its model.pretrained file records and
# model.kwargs leaves out before the data was read: the loads of that file into its model do not say them again
_RUN_CHECKED: ContextVar[bool] = ContextVar("pretrained_checked", default=False)


@contextlib.contextmanager
def pretrained_checked() -> Iterator[None]:
    """Within: a run, whose checks warned of its ``model.pretrained`` file's unkept settings: the loads of that file
    into its model (:func:`warn_ignored_settings`, the task builders') do not say them again."""
    token = _RUN_CHECKED.set(True)
    try:
        yield
    finally:
        _RUN_CHECKED.reset(token)


def in_checked_run() -> bool:
    """Whether within :func:`pretrained_checked`."""
    return _RUN_CHECKED.get()


def warn_ignored_settings(model: nn.Module, path: str | os.PathLike) -> None:
    """:func:`load_checkpoint`'s warning, for a route that loaded the weights of the swinlite file ``path`` into
    ``model`` otherwise (``build_fpn_backbone(..., checkpoint=path)``, ``pretrained_cfg_overlay=dict(file=path)``):
    the settings the file records for its Swin that ``model`` was built without, where they change what it computes.
    Nothing within a run (:func:`pretrained_checked`)."""
    if not in_checked_run():
        metadata = read_metadata(path)
        _warn_ignored(path, metadata, _ignored_settings(model, metadata, path))


def _warn_ignored(path: str | os.PathLike, metadata: Mapping[str, Any], ignored: list[str]) -> None:
    """The warning of :func:`load_checkpoint` naming the settings ``ignored`` (:func:`_ignored_settings`), if any,
    at the user's line, with how to keep them: build the model with them, or where the file's own model is one
    :func:`load_model` rebuilds (a classifier's, a model record's), rebuild it."""
    if not ignored:
        return
    rebuilt = f", or rebuild the file's own with swinlite.load_model({str(path)!r})"
    warn_at_caller(
        f"{path} records its {recorded_swin(metadata)} built with {', '.join(ignored)}, the model without: the "
        "weights are loaded into the model as it is, which computes something else than the file's; build the "
        f"model with them{rebuilt if metadata.get('task') in (None, 'classification') else ''}"
    )


def ignored_settings(
    model: nn.Module, name: str, model_args: Mapping[str, Any], path: str | os.PathLike
) -> dict[str, Any]:
    """Each constructor argument that a swinlite file (``path``) records for its model ``name`` (``model_args``) and
    that ``model`` was built without, with its recorded value: one that makes the file's model compute something else
    (:func:`_difference`, on the meta device) where ``model`` holds what the argument's default builds. Not a training
    setting (:data:`TRAINING_ONLY`), ``fast`` (the reference is built as fast as ``model`` is), nor an argument that
    changes the weights' shapes (the classifier's ``num_classes``, ``out_norm``, ``in_chans``: the load's own rules).
    Only the facts that the argument changes are compared, so that what the user chose otherwise (another
    ``drop_path_rate``, gradient checkpointing, a ``features_only`` wrapper's pruned stages, a third value of the
    argument) passes. Nothing for a model ``name`` that is no swinlite one."""
    if not _is_swinlite(name):
        return {}
    recorded = [k for k in model_args if k not in (*TRAINING_ONLY, "num_classes", "fast")]
    if not recorded:
        return {}
    fast = any(type(module) in FAST_MODULES.values() for module in model.modules())
    args = {**model_args, "fast": fast}
    given, ignored = _settings(model), {}
    with torch.device("meta"):
        built = create_for_file(path, name, **args)
        for key in recorded:
            default = create_for_file(path, name, **{k: v for k, v in args.items() if k != key})
            changed = _difference(default, built) or {}  # the default's value of each fact the argument changes
            compared = {f: v for f, v in changed.items() if f in given}
            if compared and all(given[f] == v for f, v in compared.items()):
                ignored[key] = model_args[key]
    return ignored


def _as_json(value: object) -> object:
    """``value`` as a JSON round trip gives it back for the comparisons with a file's record: tuples as lists."""
    if isinstance(value, (tuple, list)):
        return [_as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    return value


def _is_swinlite(name: str) -> bool:
    return name.startswith("swinlite_")


def classifier_size(model: str, state: dict[str, torch.Tensor]) -> int:
    """Outputs of the file's classifier (0 when it has none), so a raw file never gets a random head."""
    if _is_swinlite(model):
        state = convert_state_dict(state)  # ValueError for a layout it does not know
    classifier = get_pretrained_cfg_value(model, "classifier") or "head.fc"
    weight = state.get(f"{classifier}.weight")
    return 0 if weight is None else int(weight.shape[0])


class WeightsMismatchError(ValueError):
    """:func:`load_strict`'s refusal of weights whose keys or shapes do not fit the model (its message names the file
    and the keys): what a caller that built the model from settings can add a hint about those settings to."""


def load_strict(
    net: nn.Module,
    state: Mapping[str, torch.Tensor],
    source: str | os.PathLike,
    may_start_fresh: tuple[str, ...] = (),
    *,
    values_checked: bool = False,
    layout: str = "swinlite",
) -> None:
    """Load ``state`` into ``net``: every model weight from it, every tensor of it into the model, floating weights
    floating and finite. A swinlite model takes any layout :func:`swinlite.convert_state_dict` reads.

    Args:
        net: the model.
        state: the weights.
        source: where they come from (the file), for the messages.
        may_start_fresh: prefixes of model weights that may be absent from ``state`` (kept as they are).
        values_checked: a conversion of ``state`` checked its values already (the check of
            :func:`~swinlite.convert.convert_state_dict`, which refuses more than this one's): not checked again.
        layout: the layout ``state`` was converted from (a converted file's metadata records it), which a refusal
            of weights without the final norm names as their source (:func:`~swinlite.convert.missing_final_norm`).

    Raises:
        ValueError: naming ``source`` and the keys that are missing, surplus, of another shape, not floating
            point or not finite; keys or shapes the model's state dict does not have: a :class:`WeightsMismatchError`.
    """
    target = net.state_dict()
    with _shown_if_it_loads():  # the conversion's notes (weights left fresh, ...) do not precede a refusal
        if isinstance(net, SwinTransformer) and not set(state) <= set(target):
            try:  # other layouts; bias tables resized to the model's window; the values checked there
                state = convert_state_dict(state, net)
            except ValueError as e:
                raise _naming(source, e) from None
            values_checked = True
        elif isinstance(net, SwinTransformer):  # a converted timm model of this img_size: its shrunk windows' tables
            state = embed_shrunk_tables(state, net)
        mismatch = state_dict_mismatch(target, state, may_start_fresh)
        if mismatch is not None:
            missing = {k for k in target.keys() - state.keys() if not k.startswith(may_start_fresh)}
            cause = (
                other_architecture(state, net, target) or missing_final_norm(missing, layout)
                if isinstance(net, SwinTransformer)
                else ""
            )
            raise WeightsMismatchError(f"{source} does not fit {type(net).__name__} exactly; {cause}{mismatch}")
        if not values_checked:
            check_weight_values(state, str(source), target)
    net.load_state_dict(state, strict=not may_start_fresh)


@contextlib.contextmanager
def _shown_if_it_loads() -> Iterator[None]:
    """Inside, Python's warnings are kept back; shown when the block ends normally, dropped when it raises (a note
    that a weight is left at its initial value, before the strict check refuses the file, contradicted the error)."""
    held: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    show = warnings.showwarning  # swapped, not by catch_warnings: that would show "once" warnings again
    warnings.showwarning = lambda *shown, **named: held.append((shown, named))
    try:
        yield
    finally:
        warnings.showwarning = show
    for shown, named in held:
        show(*shown, **named)


def _naming(source: str | os.PathLike, error: ValueError) -> ValueError:
    """A conversion error (whose subject is "checkpoint") with the file named instead."""
    text = str(error)
    return ValueError(f"{source}{text[len('checkpoint') :]}" if text.startswith("checkpoint ") else f"{source}: {text}")


def load_checkpoint(model: nn.Module, checkpoint: str | os.PathLike | Mapping[str, object]) -> None:
    """Load a Swin checkpoint of any supported layout into ``model``, strictly.

    Only the classifier, where the checkpoint's is of another size or absent (the model's is the one its caller
    built: unlike ``pretrained=True`` without ``num_classes``, which refuses a file without the tag's), and per-level
    output norms the checkpoint lacks (an ImageNet checkpoint for a detection backbone) may stay at their initial
    values; both warn. A swinlite file whose recorded
    settings of its Swin (a classifier's or a model record's ``model_args``, a detection or segmentation run's
    ``model.kwargs``) make it compute something else than ``model``, which was built without them
    (``mask_padding=False``, ``act_layer="relu"``, a V2's ``window_size``: every weight loads), is loaded too, with a
    warning naming them (:func:`_ignored_settings`); :func:`load_model` rebuilds a classifier's or a model record's own
    model.

    Args:
        model: a swinlite ``SwinTransformer`` (not a ``features_only`` wrapper); the Swin inside one (its ``model``),
            pruned of the final norm it does not use, takes a checkpoint without one (a swinlite detection or
            segmentation run's trained with ``model.kwargs.out_norm=false``).
        checkpoint: a file path or an already loaded (training) checkpoint / state dict.

    Raises:
        ValueError: ``model`` is no swinlite Swin (a features-only wrapper: its ``model`` is; timm's own Swin: its
            swinlite counterpart is), or the checkpoint is unreadable, of an unknown layout or does not fit the model
            (names the keys).
    """
    if not isinstance(model, SwinTransformer):
        raise ValueError(_not_swinlite(model))
    path = checkpoint if isinstance(checkpoint, (str, os.PathLike)) else None
    source = "checkpoint" if path is None else str(path)
    metadata, content = ({}, None) if path is None else read_weights(path)  # the one read of the file
    ignored = _ignored_settings(model, metadata, source)
    if content is not None:
        checkpoint = state_dict_in(path, content, stacklevel=3)  # an EMA warning names the caller's line
    try:
        state_dict = convert_state_dict(checkpoint, model)
    except ValueError as e:
        raise (e if source == "checkpoint" else _naming(source, e)) from None
    first_conv = model.get_parameter(FIRST_CONV)
    if state_dict[FIRST_CONV].shape != first_conv.shape:  # another in_chans: adapted as timm does
        state_dict[FIRST_CONV] = adapt_input_conv(first_conv.shape[1], state_dict[FIRST_CONV])
    load_strict(model, state_dict, source, may_start_fresh=("head.fc.", "out_norms."), values_checked=True)
    _warn_ignored(source, metadata, ignored)
    if content is not None and resume_ema_in(content):
        _warn_resume_ema(path, stacklevel=3)


def _not_swinlite(model: nn.Module) -> str:
    """:func:`load_checkpoint`'s refusal of ``model``, no swinlite Swin, its class named with its module (timm's Swin
    is a ``SwinTransformer`` too), and what to give instead: a wrapper's Swin, swinlite's counterpart of timm's Swin
    (:func:`~swinlite.models.pretrained.lite_name`), else a ``swinlite_*`` model."""
    cls = type(model)
    cfg = getattr(model, "pretrained_cfg", None)
    architecture = cfg.get("architecture") if isinstance(cfg, Mapping) else None
    try:
        counterpart = lite_name(architecture) if isinstance(architecture, str) else None
    except ValueError:  # not a timm Swin
        counterpart = None
    if isinstance(getattr(model, "model", None), SwinTransformer):
        hint = f"pass its Swin, {cls.__name__}.model"
    elif counterpart is not None and timm.is_model(counterpart):
        hint = f"build swinlite's counterpart of {architecture}, timm.create_model({counterpart!r})"
    else:
        hint = "build one with timm.create_model('swinlite_...') (timm.list_models('swinlite_*'))"
    return (
        f"load_checkpoint loads a swinlite SwinTransformer ({SwinTransformer.__module__}.SwinTransformer), got a "
        f"{cls.__module__}.{cls.__qualname__}: {hint}"
    )
