"""Export a swinlite classifier, feature extractor or FPN backbone with ``torch.export`` and to ONNX: one file for
every input size of a declared range.

The graph is taken with a symbolic batch, height and width. The window padding, the per-dimension "no shift where
one window covers the padded map" rule, the partition order and the shift/padding masks are computed inside the
graph from the input's size (:mod:`swinlite.models.swin` builds its geometry from symbolic sizes while
:func:`~swinlite.models.swin.exporting`), so one file serves every H x W in ``[min, max]`` (default: one patch to
2048, :func:`default_size_range`) and computes there what eager PyTorch computes.

Why the graph holds at every size of the range: ``torch.export`` records each assumption its trace makes about a
symbolic size as a runtime assertion (ONNX drops those). :func:`check_assumptions` evaluates every one of them at
every size of the range and refuses the export if one fails anywhere, so no size of the range runs a branch traced
for another size. Outside the range the file promises nothing: its metadata (``input_sizes``) names the range, and
the ONNX predictor (:mod:`swinlite.onnx_predict`) refuses such an image with an error naming it.
"""

from __future__ import annotations

import fcntl
import glob
import importlib
import itertools
import json
import logging
import math
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import sympy
import timm
import torch
import torch.fx.experimental._config as fx_config
from timm.data import resolve_model_data_config
from timm.models._builder import pretrained_cfg_for_features
from timm.models._features import feature_take_indices
from torch import nn
from torch.nn.modules.utils import _pair

from .convert import recorded_swin
from .files import fsync_folder
from .fpn import SwinFPNBackbone
from .inference import class_names
from .io import atomic_write_bytes, read_metadata, read_state_dict, weights_kind
from .metadata import recorded_preprocessing
from .models.checks import check_feature_indices
from .models.swin import SwinTransformer
from .optimize import check_eval_mode
from .script import extra_error
from .weights import check_model_name, create_to_load, load_model, load_strict, read_info

if TYPE_CHECKING:  # onnx comes with the export extra, imported where a file is written or read
    import onnx
    import onnx_ir

MAX_SIZE = 2048  # default largest height and width of an exported graph
MAX_BATCH = 65536
IMAGE_DIMS = ("batch", "channels", "height", "width")  # an image input's dims, the last three of one image
QUANTIZATIONS = ("dynamic",)
TOLERANCE = 1e-4  # the largest |ONNX Runtime - PyTorch| an export's check allows by default (--tolerance)
RUN_SETTINGS = {"detection": "detector", "segmentation": "segmenter"}  # a run file's task -> its model's settings key
RUN_READERS = {"detection": "its FPN", "segmentation": "its UperNet head"}  # what reads a run's backbone levels
# the [export] extra's packages that writing an ONNX file imports (torch.onnx's exporter, simplify), and running one
WRITES_ONNX = ("onnx", "onnxscript", "onnx_ir")
RUNS_ONNX = ("onnxruntime",)


class FeatureExtractor(nn.Module):
    """A Swin's NCHW feature levels as a tuple (export-friendly ``features_only``). Its ``pretrained_cfg`` is the
    Swin's, as timm's features_only wrapper keeps it (its classifier's keys left out), so
    ``timm.data.resolve_model_data_config(extractor)`` gives the Swin's data config (a run's file's, through
    :func:`swinlite.load_model`), not timm's defaults.

    Args:
        model: the Swin.
        out_indices: levels to return, as ``timm.create_model(..., features_only=True)`` takes them: an int n, the
            last n levels; or levels strictly increasing once negative ones (counted from the last) are resolved
            (integers of any kind: numpy's, 0-d tensors); kept resolved, as Python ints. None: every level of the
            model (all its stages, ``features_only``'s default).

    Raises:
        ValueError: ``out_indices`` that ``features_only`` refuses, naming the allowed levels.
    """

    def __init__(self, model: SwinTransformer, out_indices: int | Sequence[int] | None = None) -> None:
        super().__init__()
        num_stages = len(model.layers)
        levels = check_feature_indices(out_indices, num_stages, ordered=True)  # Python ints: a count, or a list
        self.model = model
        self.out_indices, _ = feature_take_indices(num_stages, levels)  # timm's rule: None all, n the last n
        self._set_cfg: dict[str, object] | None = None  # one given to the extractor itself

    @property
    def pretrained_cfg(self) -> dict[str, object]:
        """The Swin's, read when asked: a change of the Swin's (a run's preprocessing set after) shows; less its
        classifier's entries (timm's ``pretrained_cfg_for_features``) and class names: the levels have no classifier,
        as timm's features_only wrapper of a file's model has none. One set on the extractor is kept instead."""
        if self._set_cfg is not None:
            return self._set_cfg
        cfg = pretrained_cfg_for_features(self.model.pretrained_cfg)
        cfg.pop("label_names", None)
        return cfg

    @pretrained_cfg.setter
    def pretrained_cfg(self, cfg: dict[str, object]) -> None:
        self._set_cfg = dict(cfg)

    @property
    def default_cfg(self) -> dict[str, object]:
        """timm's alias of :attr:`pretrained_cfg`."""
        return self.pretrained_cfg

    @default_cfg.setter
    def default_cfg(self, cfg: dict[str, object]) -> None:
        self.pretrained_cfg = cfg

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """images [B, 3, H, W] -> (level maps [B, C_i, H/s_i, W/s_i], ...)."""
        levels = self.model.forward_intermediates(x, self.out_indices, stop_early=True, intermediates_only=True)
        return tuple(levels)


class FPNFeatures(nn.Module):
    """The maps of a :class:`~swinlite.fpn.SwinFPNBackbone` as a tuple, in its order ("0", "1", ..., extra levels)."""

    def __init__(self, backbone: SwinFPNBackbone) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """images [B, 3, H, W] -> (FPN maps [B, F, H/s_i, W/s_i], ...)."""
        return tuple(self.backbone(x).values())


def swin_of(model: nn.Module) -> SwinTransformer:
    """The Swin inside an exportable module (the model itself, a :class:`FeatureExtractor`, an :class:`FPNFeatures`)."""
    if isinstance(model, FPNFeatures):
        return model.backbone.body.model
    return model.model if isinstance(model, FeatureExtractor) else model


def build_exportable(
    model_name: str | None,
    features: bool = False,
    checkpoint: str | os.PathLike | None = None,
    out_indices: int | Sequence[int] | None = None,
    **model_kwargs: object,
) -> nn.Module:
    """The classifier (``features=False``) or a :class:`FeatureExtractor` of ``out_indices`` (None: every level of the
    model, however many stages it has), in eval mode.

    With a checkpoint the model is rebuilt by :func:`swinlite.load_model` (strict; a self-describing file
    needs no ``model_name``); without one it has timm's initial weights.

    Raises:
        ValueError: ``model_name`` is not a swinlite model; neither a name nor a checkpoint; the checkpoint
            does not load; ``features`` with ``out_indices`` that ``features_only`` refuses (:class:`FeatureExtractor`).
    """
    if model_name is not None:
        check_model_name(model_name, "swinlite_*")
    if checkpoint is not None:
        model = load_model(checkpoint, model_name, **model_kwargs)
    elif model_name is not None:
        model = timm.create_model(model_name, **model_kwargs)
    else:
        raise ValueError("give a model name, a checkpoint, or both")
    if features:
        model = FeatureExtractor(model, out_indices)
    return model.eval()


def run_backbone(checkpoint: str | os.PathLike, out_norm: bool | None = None) -> SwinTransformer:
    """The Swin of a detection or segmentation run's weights file (its FPN and heads left out), in eval mode: built
    with the run's ``model.kwargs``, no classifier, and the per-level norms the run trained (``out_norm`` None: as
    the run's own backbone, :func:`run_out_norm`; False: the raw levels, which its FPN or head never sees), and loaded
    strictly from the file as ``scripts/convert_checkpoint.py`` converts it (:func:`swinlite.convert_state_dict`,
    through :func:`~swinlite.weights.load_strict`).

    Raises:
        ValueError: the file is no such run's, or does not load (``out_norm`` where the run has none).
    """
    metadata = read_metadata(checkpoint)
    key = RUN_SETTINGS.get(metadata.get("task"))
    if key is None:
        raise ValueError(f"{checkpoint} is not a detection or segmentation run's weights file")
    out_norm = run_out_norm(metadata) if out_norm is None else out_norm
    kwargs = {**metadata[key].get("kwargs", {}), "num_classes": 0, "out_norm": out_norm}
    net = create_to_load(checkpoint, recorded_swin(metadata), **kwargs)
    if not run_out_norm(metadata):  # nor a final norm: the run's features-only Swin has none (its last level is raw)
        net.norm = nn.Identity()
    with warnings.catch_warnings():
        if not out_norm:  # the raw levels asked for: the run's norms are left out by choice, not lost
            warnings.filterwarnings("ignore", message="dropping per-level output norms")
        load_strict(net, read_state_dict(checkpoint), checkpoint)
    return net.eval()


def run_features(
    checkpoint: str | os.PathLike, out_norm: bool | None = None, out_indices: int | Sequence[int] | None = None
) -> FeatureExtractor:
    """A :class:`FeatureExtractor` of a detection or segmentation run's Swin (:func:`run_backbone`'s, ``out_norm``
    as it takes it), in eval mode: through the run's norms, the levels its FPN or head reads (:func:`read_levels`)
    unless ``out_indices`` names some of them; raw, every level unless ``out_indices`` names others.

    Raises:
        ValueError: as :func:`run_backbone`; ``out_indices`` that ``features_only`` refuses, or through the run's
            norms a level its FPN or head never reads (:func:`check_read_levels`).
    """
    metadata = read_metadata(checkpoint)
    model = run_backbone(checkpoint, out_norm)
    if not (run_out_norm(metadata) if out_norm is None else out_norm):
        return FeatureExtractor(model, out_indices).eval()
    read = read_levels(metadata, len(model.layers))
    extractor = FeatureExtractor(model, read if out_indices is None else out_indices)
    check_read_levels(metadata, extractor.out_indices, read)
    return extractor.eval()


def read_levels(metadata: Mapping[str, object], num_stages: int) -> list[int]:
    """The Swin levels a detection or segmentation run's FPN or head reads, through its per-level norms (the others'
    norms were never trained): ``min_level``..last where its settings record ``min_level`` (a detection run's, its
    default resolved; files of earlier versions record it only where the run set it), else every level (UperNet reads
    all four; an earlier detection file that left it unset does not say which its FPN reads)."""
    first = metadata[RUN_SETTINGS[str(metadata["task"])]].get("min_level")
    return list(range(first or 0, num_stages))


def check_read_levels(metadata: Mapping[str, object], levels: Sequence[int], read: Sequence[int]) -> None:
    """ValueError for a level of ``levels`` (resolved) that the run's FPN or head does not read (``read``): its
    per-level norm was never trained (the run froze it at weight 1, bias 0)."""
    unread = [level for level in levels if level not in read]
    if unread:
        reader = RUN_READERS[str(metadata["task"])]
        raise ValueError(
            f"level {unread[0]} of a {metadata['task']} run's backbone through its per-level norms: {reader} reads "
            f"levels {', '.join(map(str, read))}, and level {unread[0]}'s norm was never trained; ask for those "
            "levels, or --no-out-norm for the raw levels (any of them)"
        )


def run_out_norm(metadata: Mapping[str, object]) -> bool:
    """Whether a detection or segmentation run's backbone passes its levels through per-level norms: on unless the
    run set ``model.kwargs.out_norm=false`` (as ``swinlite.detection.models`` and ``swinlite.segmentation.models``
    build it)."""
    return bool(metadata[RUN_SETTINGS[metadata["task"]]].get("kwargs", {}).get("out_norm", True))


def input_size(model: nn.Module, checkpoint: str | os.PathLike | None) -> tuple[int, int]:
    """The height and width the exported ``model`` is traced and checked at, and its metadata asks for (brought into
    the sizes served): a detection run's backbone's (``--fpn``, ``--features``) the detector's ``test_size`` (the
    shorter side of the images it sees), a segmentation run's (``--features``) its crop (``crop_size``, the windows
    of its slide mode); else its Swin's (a run's Swin's own size is a classifier's, 32 for a pico)."""
    recorded = read_metadata(checkpoint) if checkpoint is not None else {}
    if recorded.get("task") == "detection":
        return (recorded["data"]["test_size"],) * 2
    if recorded.get("task") == "segmentation":
        return tuple(recorded["preprocessing"]["crop_size"])
    return tuple(swin_of(model).pretrained_cfg["input_size"][1:])


def run_norms_note(recorded: Mapping[str, object], subject: str) -> str:
    """The note for stderr that ``subject``, the levels of a detection or segmentation run's file
    (:func:`run_backbone`'s default), go through the run's trained per-level norms: what its FPN or head reads, not
    timm's raw ``features_only`` levels."""
    reader = RUN_READERS[str(recorded["task"])]
    return (
        f"note: {subject}: its backbone's levels through the run's trained per-level norms, as {reader} reads them "
        "(--no-out-norm: the raw levels, which it never sees)"
    )


def default_size_range(model: nn.Module) -> tuple[int, int]:
    """(smallest, largest) height and width of an export by default, up to :data:`MAX_SIZE`: from one patch for a
    classifier; for feature maps, one more pixel than the coarsest output's stride, so that no output map is a single
    cell (a trace would choose another memory layout for a 1 x n map; :func:`check_assumptions` would refuse it)."""
    if isinstance(model, FPNFeatures):
        return model.backbone.strides[-1] + 1, MAX_SIZE
    if isinstance(model, FeatureExtractor):
        return model.model.feature_info[max(model.out_indices)]["reduction"] + 1, MAX_SIZE
    return smallest_input(model), MAX_SIZE


def served_range(default: tuple[int, int], min_size: int | None, max_size: int | None, maps: bool) -> tuple[int, int]:
    """(smallest, largest) height and width an export serves: ``min_size`` and ``max_size`` (``--min-size``,
    ``--max-size``) where given, else ``default``'s (:func:`default_size_range`; a segmenter's
    :func:`~swinlite.segmentation.export.served_sizes`, whose largest may pass :data:`MAX_SIZE`).

    Args:
        maps: whether the export's smallest size is one pixel more than its coarsest map's stride (feature maps, an
            FPN's, a segmenter's head's), else one patch (a classifier).

    Raises:
        ValueError: a ``min_size`` below ``default``'s smallest, naming it (before the trace: a map of one cell made
            :func:`check_assumptions` refuse the traced graph in a line of symbolic sizes); a ``min_size`` not below
            ``default``'s largest without a ``max_size``, naming that default.
    """
    low, high = default
    if min_size is not None and min_size < low:
        why = f"a map of more than one cell at its coarsest level, stride {low - 1}" if maps else "one patch"
        raise ValueError(
            f"--min-size {min_size} is below the smallest size this export serves, {low} ({why}): use --min-size {low}"
        )
    if min_size is not None and max_size is None and min_size >= high:
        raise ValueError(
            f"--min-size {min_size} is not below the largest size this export serves by default ({high}, "
            "--max-size's default): pass a --max-size above it"
        )
    return (low if min_size is None else min_size), (high if max_size is None else max_size)


def smallest_input(model: nn.Module) -> int:
    """The smallest height and width ``model`` takes: one patch of its Swin (1 without one). The eager model refuses
    a smaller image, but the trace records no assertion for that check (:func:`symbolic_sizes` takes every size as
    at least 2), so :func:`check_assumptions` cannot refuse such a range: :func:`export_program` does."""
    return max((max(m.patch_size) for m in model.modules() if isinstance(m, SwinTransformer)), default=1)


def export_metadata(
    model: nn.Module, checkpoint: str | os.PathLike | None, sizes: tuple[tuple[int, int], tuple[int, int]]
) -> dict[str, str]:
    """What a deployment needs besides the graph, as JSON strings: task (``classification``, ``features``,
    ``fpn``), model, preprocessing, the input sizes the graph serves and the smallest any export of the model serves
    (``smallest_size``: :func:`default_size_range`'s, below which ``--min-size`` is refused), weights kind, swinlite
    versions (:func:`versions`), the class names of a classifier, and of a feature extractor its levels
    (``out_indices``, resolved: output ``stage<i>`` is level i) and whether they pass through per-level norms
    (``out_norm``: a run's trained ones by default, none with ``--no-out-norm``).

    Args:
        model: the exported module.
        checkpoint: the weights file it was loaded from, or None.
        sizes: ((min height, max height), (min width, max width)) the graph serves.
    """
    base = swin_of(model)
    task = "fpn" if isinstance(model, FPNFeatures) else "features" if isinstance(model, FeatureExtractor) else None
    preprocessing = resolve_model_data_config(base)
    recorded = read_metadata(checkpoint) if checkpoint is not None else {}
    if recorded.get("task") in RUN_SETTINGS:  # a run's file (read_info refuses it): its backbone, fed as the run does
        name, weights = recorded_swin(recorded), recorded.get("weights", "raw")
        # its normalization alone: the run resizes as its task does, not as timm's transform would (bicubic, crop_pct)
        preprocessing = {"input_size": preprocessing["input_size"], **recorded_preprocessing(recorded, checkpoint)}
    else:
        info = read_info(checkpoint) if checkpoint is not None else None
        name = info.model if info else base.pretrained_cfg.get("architecture", type(base).__name__)
        # a file without swinlite's record: its EMA weights where it holds them (a timm training checkpoint's, which
        # every reader takes, as timm's loader does)
        weights = info.weights if info else ("none" if checkpoint is None else weights_kind(checkpoint))
    # the size to feed it (input_size), brought within the sizes served (a fixed size, a range that does not hold it)
    size = input_size(model, checkpoint)
    served = [min(max(side, low), high) for side, (low, high) in zip(size, sizes, strict=True)]
    preprocessing["input_size"] = (preprocessing["input_size"][0], *served)
    meta = {
        "task": task or "classification",
        "model": name,
        "preprocessing": preprocessing,
        "input_sizes": {"height": list(sizes[0]), "width": list(sizes[1])},
        "smallest_size": default_size_range(model)[0],
        "weights": weights,
        **versions(recorded),
    }
    if task is None:
        meta["classes"] = class_names(base)
    elif task == "features":
        meta["out_indices"] = model.out_indices
        meta["out_norm"] = not all(isinstance(norm, nn.Identity) for norm in base.out_norms)
    return {k: json.dumps(v) for k, v in meta.items()}


def versions(recorded: Mapping[str, object]) -> dict[str, object]:
    """The swinlite versions every export records: ``swinlite``, the one that exported the file; and
    ``checkpoint_swinlite``, the one that wrote its checkpoint (``recorded``, the checkpoint's metadata: the version
    that trained it, or converted it), where the checkpoint records one."""
    from . import __version__

    written = recorded.get("swinlite")
    return {"swinlite": __version__} | ({} if written is None else {"checkpoint_swinlite": written})


def check_traced_in_eval_mode(program: torch.export.ExportedProgram, user: str) -> None:
    """ValueError where ``program`` draws random numbers (its ops tagged ``nondeterministic_seeded``, but dropout
    traced with ``train=False``, which draws none): dropout or stochastic depth of a model traced in training mode
    (:func:`~swinlite.optimize.check_eval_mode`), which an ONNX file would run at every call; in any graph of the
    program (a higher-order op's too). ``user``: the caller."""
    graphs = [module.graph for module in program.graph_module.modules() if isinstance(module, torch.fx.GraphModule)]
    drawn = sorted({str(node.target) for graph in graphs for node in graph.nodes if _draws_random(node)})
    if drawn:
        raise ValueError(
            f"{user} expects a program traced in eval mode; this one draws random numbers ({', '.join(drawn)}: "
            "dropout or stochastic depth in training mode): export the model after model.eval() (export_program "
            "refuses one in training mode)"
        )


def _draws_random(node: torch.fx.Node) -> bool:
    """Whether the graph node ``node`` draws random numbers: an op tagged ``nondeterministic_seeded`` that takes no
    ``train`` nor ``dropout_p`` argument, or a ``train`` not False (``aten.dropout(x, p, train)``), or a ``dropout_p``
    not 0 (``aten.scaled_dot_product_attention``, which an eval-mode model traces with 0)."""
    if torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
        return False
    names = [argument.name for argument in node.target._schema.arguments]

    def argument(name: str, default: object) -> object:
        index = names.index(name)
        return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)

    if "train" in names:
        return argument("train", True) is not False
    if "dropout_p" in names:
        return argument("dropout_p", 0.0) != 0
    return True


def require_extra(user: str, *packages: str) -> None:
    """Import ``packages``, optional dependencies (the ``[export]`` extra's), before ``user``, a function of this
    module, starts its work: one not installed is a ModuleNotFoundError naming the extra to install
    (:func:`swinlite.script.extra_error`, the scripts' words)."""
    for package in packages:
        try:
            importlib.import_module(package)
        except ModuleNotFoundError as e:
            raise extra_error(e, f"swinlite.export.{user}") from None


@contextmanager
def _inference_graph(model: nn.Module) -> Iterator[None]:
    """Trace an inference graph: eval mode is the caller's; no gradients, parameters need no grad."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    model.requires_grad_(False)
    try:
        with torch.no_grad():
            yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


class BinAverage2d(nn.Module):
    """``nn.AdaptiveAvgPool2d(output_size)`` as products with two averaging matrices built from the input's size,
    which a trace keeps symbolic (the ONNX exporter writes adaptive pooling for the traced size only). Bin ``i`` of
    ``k`` along a side of ``n`` averages positions ``floor(i n / k)`` to ``ceil((i + 1) n / k) - 1``, as PyTorch's."""

    def __init__(self, output_size: int | tuple[int, int]) -> None:
        super().__init__()
        self.output_size = _pair(output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., H, W] -> [..., bins_h, bins_w]."""
        rows = _bin_means(x.shape[-2], self.output_size[0], x)  # [bins_h, H]
        cols = _bin_means(x.shape[-1], self.output_size[1], x)  # [bins_w, W]
        return rows @ x @ cols.T


def _bin_means(size: int | torch.SymInt, bins: int, like: torch.Tensor) -> torch.Tensor:
    """[bins, size]: row i holds 1 / (its bin's length) over bin i's positions, 0 elsewhere."""
    index = torch.arange(bins, device=like.device)
    start, end = index * size // bins, ((index + 1) * size + bins - 1) // bins  # [bins]
    position = torch.arange(size, device=like.device)
    inside = (position >= start[:, None]) & (position < end[:, None])  # [bins, size]
    return inside.to(like.dtype) / (end - start)[:, None].to(like.dtype)


@contextmanager
def traceable_pooling(model: nn.Module) -> Iterator[None]:
    """Trace every ``nn.AdaptiveAvgPool2d`` of ``model`` to more than one bin (not the model itself) as a
    :class:`BinAverage2d`, so a graph of symbolic sizes computes its bins at every size (UperNet's pyramid pooling);
    the modules are put back on exit."""
    swapped = []
    for parent in model.modules():
        for child_name, child in parent.named_children():
            bins = _pair(child.output_size) if isinstance(child, nn.AdaptiveAvgPool2d) else (1, 1)
            if None not in bins and bins != (1, 1):  # None keeps that side's size: left to the refusal
                swapped.append((parent, child_name, child))
    try:
        for parent, child_name, child in swapped:
            setattr(parent, child_name, BinAverage2d(child.output_size))
        yield
    finally:
        for parent, child_name, child in swapped:
            setattr(parent, child_name, child)


@contextmanager
def symbolic_sizes() -> Iterator[None]:
    """Trace with sizes that may be 1 treated like any other size (``backed_size_oblivious``): without it, a layout
    decision for a map of one window (contiguity, strides) would pin the trace to the example's sizes. Both the
    export and the ONNX conversion (which traces the program again) run under it."""
    with fx_config.patch(backed_size_oblivious=True):
        yield


def export_program(
    model: nn.Module,
    example: torch.Tensor,
    size_range: tuple[int, int] | None = None,
    fixed_size: bool = False,
) -> torch.export.ExportedProgram:
    """``torch.export.export`` with a symbolic batch and, unless ``fixed_size``, symbolic height and width.

    Args:
        model: in eval mode, every module of it (:func:`~swinlite.optimize.check_eval_mode`); fast blocks export their
            windows as one gather each way and the reference attention (same function).
        example: images [B >= 2, C, H, W] to trace with (B = 1 would fix the batch); H and W in the range.
        size_range: (min, max) of the height and of the width; default :func:`default_size_range`.
        fixed_size: fix H and W to the example's (one file per size; the batch stays dynamic).

    Raises:
        ValueError: a model (or a module in it) in training mode; an example of the wrong shape or outside the range;
            an empty range, or one that starts below one patch (:func:`smallest_input`); a graph that assumes
            something that does not hold at some size of the range (:func:`check_assumptions`).
    """
    check_eval_mode(model, "export_program")
    if example.ndim != 4 or example.shape[0] < 2:
        raise ValueError(
            f"example must be an image batch [B >= 2, C, H, W] (B=1 would fix the batch), got {tuple(example.shape)}"
        )
    dims = {0: torch.export.Dim("batch", min=1, max=MAX_BATCH)}
    if not fixed_size:
        low, high = size_range or default_size_range(model)
        if not 1 <= low <= high:
            raise ValueError(f"the size range must be 1 <= min <= max, got {low}..{high}")
        if low < smallest_input(model):
            raise ValueError(
                f"the size range starts at {low}, below one patch: the model takes images from {smallest_input(model)} "
                "pixels a side (--min-size)"
            )
        if not all(low <= s <= high for s in example.shape[2:]):
            raise ValueError(f"the example's size {tuple(example.shape[2:])} must lie in the range {low}..{high}")
        dims |= {2: torch.export.Dim("height", min=low, max=high), 3: torch.export.Dim("width", min=low, max=high)}
    with _inference_graph(model), symbolic_sizes(), traceable_pooling(model):
        program = torch.export.export(
            model, (example,), dynamic_shapes=(dims,), strict=False, prefer_deferred_runtime_asserts_over_guards=True
        )
    check_assumptions(program)
    return program


def check_assumptions(program: torch.export.ExportedProgram, max_checks: int = 20_000_000) -> None:
    """Evaluate every runtime assertion of ``program`` on its input sizes at every point of their ranges.

    An assertion is an assumption the trace made about the sizes (e.g. that the cropped map keeps its size); ONNX
    drops them. One that fails at some size would mean a graph traced for other sizes: refused. Assertions on
    data-dependent counts (boxes kept by a detector's NMS, ...) hold no size assumption and are left to the tests.
    Adaptive pooling of a map whose size varies, to more than one bin, is refused too: the ONNX exporter writes the
    traced size's bins, which fail or compute other values at other sizes. (:func:`export_program` traces
    ``nn.AdaptiveAvgPool2d`` modules as :class:`BinAverage2d`, which holds at every size: UperNet's pyramid pooling;
    what is left to refuse is max pooling, 1-D and 3-D pooling and functional calls.)

    Raises:
        ValueError: an assertion fails at some size of the range, or spans too many sizes to check; such a pooling.
    """
    from torch.utils._sympy.printers import PythonPrinter
    from torch.utils._sympy.symbol import SymT, symbol_is_type

    _check_adaptive_pools(program)
    ranges = program.range_constraints
    for node in program.graph.nodes:
        if node.target is not torch.ops.aten._assert_scalar.default:
            continue
        condition = node.args[0].meta["val"]
        expr = condition.node.expr if isinstance(condition, torch.SymBool) else condition
        symbols = sorted(getattr(expr, "free_symbols", ()), key=str)
        if any(symbol_is_type(s, (SymT.UNBACKED_INT, SymT.UNBACKED_FLOAT)) for s in symbols):
            continue
        values = [_points_to_check(expr, s, range(int(ranges[s].lower), int(ranges[s].upper) + 1)) for s in symbols]
        if math.prod(len(v) for v in values) > max_checks:
            raise ValueError(f"the exported graph assumes {expr} over too many sizes to check; narrow the range")
        holds = eval(f"lambda {', '.join(map(str, symbols)) or '_=0'}: {PythonPrinter().doprint(expr)}")
        for point in itertools.product(*values):
            if not holds(*point):
                sizes = ", ".join(f"{s}={v}" for s, v in zip(symbols, point, strict=True))
                raise ValueError(
                    f"the exported graph assumes {expr}, which fails at {sizes}: it would compute another function "
                    "there; narrow the size range"
                )


def _points_to_check(expr: sympy.Basic, symbol: sympy.Symbol, values: range) -> range:
    """The values of ``symbol`` at which to check the assumption ``expr``: all of them; for an equation polynomial in
    it, of degree d, its first d + 1 (a polynomial in one variable that vanishes at d + 1 points is zero, and at
    each value of the other symbols the equation is one). The assumption that the tokens keep their count,
    ``batch * windows == batch``, is checked over the sizes at two batch sizes, not 65536 (Swin-T's 100..224 range
    was refused as too many sizes to check)."""
    if not isinstance(expr, sympy.Equality):
        return values
    difference = expr.lhs - expr.rhs
    if not difference.is_polynomial(symbol):
        return values
    return values[: int(sympy.degree(difference, symbol)) + 1]


def _check_adaptive_pools(program: torch.export.ExportedProgram) -> None:
    """Refuse adaptive pooling to more than one bin along a dimension whose size is symbolic (see
    :func:`check_assumptions`)."""
    pools = [getattr(torch.ops.aten, f"adaptive_{kind}_pool{d}d").default for kind in ("avg", "max") for d in (1, 2, 3)]
    for node in program.graph.nodes:
        if node.target not in pools:
            continue
        bins = tuple(node.args[1])
        pooled = node.args[0].meta["val"].shape[-len(bins) :]
        if any(b != 1 and isinstance(size, torch.SymInt) for b, size in zip(bins, pooled, strict=True)):
            shape = "x".join(map(str, bins))
            raise ValueError(
                f"the graph pools a map of varying size to {shape} bins ({node.target}), which ONNX computes for the "
                "traced size only: pool to 1 bin, or export one size (fixed_size=True, --fixed-size)"
            )


def export_onnx(
    program: torch.export.ExportedProgram,
    path: Path,
    output_names: Sequence[str],
    metadata: Mapping[str, str] | None = None,
    input_names: Sequence[str] = ("images",),
) -> Path:
    """Convert an exported program (:func:`export_program`) to ONNX at ``path``, written atomically as one file.

    Symbolic sizes stay symbolic, named after what they are (:func:`name_dims`). ``metadata`` goes into the model's
    ``metadata_props`` (ONNX Runtime: ``session.get_modelmeta().custom_metadata_map``).

    Raises:
        ModuleNotFoundError: the ``[export]`` extra is not installed (:func:`require_extra`).
        ValueError: a program traced in training mode (:func:`check_traced_in_eval_mode`).
    """
    require_extra("export_onnx", *WRITES_ONNX)
    check_traced_in_eval_mode(program, "export_onnx")
    with symbolic_sizes():
        onnx_program = torch.onnx.export(
            program, input_names=list(input_names), output_names=list(output_names), verbose=False, optimize=False
        )
    simplify(onnx_program.model)
    proto = onnx_program.model_proto
    name_dims(proto.graph)
    for key, value in (metadata or {}).items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    atomic_write_bytes(path, proto.SerializeToString())  # one file: no external data
    return path


def simplify(model: onnx_ir.Model) -> None:
    """Fold the graph's constants and drop what no output needs, in place: ``torch.onnx.export(optimize=True)``'s
    passes less onnxscript's pattern rewriter, which took a third to a half of the conversion for a few percent of
    nodes that ONNX Runtime's own graph optimizations remove as well: same outputs, same speed
    (docs/deployment.md)."""
    import onnx_ir
    import onnxscript.optimizer

    common = onnx_ir.passes.common
    common.InlinePass()(model)
    for _ in range(2):  # a fold can make more of the graph constant: twice, as onnxscript's optimizer does
        if not onnxscript.optimizer.fold_constants(model, onnx_shape_inference=True).modified:
            break
        common.RemoveUnusedNodesPass()(model)
    onnx_ir.passes.Sequential(
        common.RemoveUnusedNodesPass(),
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(model)


def name_dims(graph: onnx.GraphProto) -> None:
    """Name the symbolic dims of the graph's first input, an image batch [B, C, H, W] or one image [C, H, W], after
    what they are: ``batch``, ``height``, ``width``, in place. The exporter names them after torch.export's symbols
    (``s77``, ``s53``, ``s0``), which tell a reader of the file nothing.

    Each symbol is renamed as a whole word in every shape of the graph and its subgraphs (inputs, outputs, value_info):
    an output's ``((s53 + 1)//2)`` becomes ``((height + 1)//2)``, and dims that shared a symbol still share a name.
    Where a name would be ambiguous nothing is renamed: an input of another rank, two of its dims of one symbol, a
    name the graph already uses.
    """
    dims = graph.input[0].type.tensor_type.shape.dim
    if len(dims) not in (3, 4):
        return
    symbols = [(dim.dim_param, name) for dim, name in zip(dims, IMAGE_DIMS[-len(dims) :], strict=True) if dim.dim_param]
    renames = dict(symbols)
    shapes = list(_shapes(graph))
    words = {word for shape in shapes for dim in shape.dim for word in re.findall(r"\w+", dim.dim_param)}
    if not renames or len(renames) < len(symbols) or words & set(renames.values()):
        return
    if not all(symbol.isidentifier() for symbol in renames):
        return
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, renames)) + r")\b")
    for shape in shapes:
        for dim in shape.dim:
            if dim.dim_param:  # setting it on a dim of a static size would clear that size (one of the two)
                dim.dim_param = pattern.sub(lambda match: renames[match.group()], dim.dim_param)


def _shapes(graph: onnx.GraphProto) -> Iterator[onnx.TensorShapeProto]:
    """The tensor shapes ``graph`` declares (inputs, outputs, value_info), and those of its nodes' subgraphs."""
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.HasField("tensor_type"):
            yield value.type.tensor_type.shape
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                yield from _shapes(subgraph)


def quantize_dynamic(source: Path, target: Path) -> Path:
    """ONNX Runtime's dynamic INT8 quantization of every MatMul of ``source`` (the linear layers: int8 weights; and
    the attention products q·kᵀ and attention·v: both operands int8; activations quantized per call), written
    atomically to ``target`` with the same metadata plus ``"quantization": "dynamic"``.

    ONNX Runtime's default leaves the products of two activations in fp32; quantizing them too is what makes the
    file 1.7x faster than fp32 at batch 1 instead of 1.4-1.5x (docs/deployment.md). ONNX Runtime's own output goes
    to a :func:`scratch_folder` beside ``target`` (a visible ``tmp*/int8.onnx`` a kill left there before).

    Raises:
        ModuleNotFoundError: the ``[export]`` extra is not installed (:func:`require_extra`).
    """
    require_extra("quantize_dynamic", "onnx", *RUNS_ONNX)
    import onnx
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization import quantize_dynamic as ort_quantize_dynamic

    with scratch_folder(target) as folder, _without_preprocessing_advice():
        tmp = folder / "int8.onnx"
        ort_quantize_dynamic(
            source,
            tmp,
            op_types_to_quantize=["MatMul"],
            weight_type=QuantType.QInt8,
            extra_options={"MatMulConstBOnly": False},
        )
        proto = onnx.load(tmp)
    metadata = {p.key: p.value for p in onnx.load(source, load_external_data=False).metadata_props}
    metadata["quantization"] = json.dumps("dynamic")
    del proto.metadata_props[:]
    for key, value in metadata.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    atomic_write_bytes(target, proto.SerializeToString())
    return target


class _DropPreprocessingAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider to run pre-processing before quantization")


@contextmanager
def _without_preprocessing_advice() -> Iterator[None]:
    """ONNX Runtime's quantizer logs "Please consider to run pre-processing before quantization" (on the root logger,
    printed as a bare ``WARNING:root:`` line) for every file that did not go through its ``quant_pre_process``, which
    :func:`quantize_dynamic` does not run (the INT8 figures of docs/deployment.md are without it): that line is
    dropped while quantizing, the quantizer's other messages kept."""
    root, advice = logging.getLogger(), _DropPreprocessingAdvice()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


def onnx_max_abs_error(path: Path, model: nn.Module, images: torch.Tensor) -> float:
    """Largest |ONNX Runtime - PyTorch| over all outputs for ``images``.

    Raises:
        ModuleNotFoundError: the ``[export]`` extra is not installed (:func:`require_extra`).
        ValueError: an output of either holds NaN or inf (a comparison with NaN would pass any tolerance).
    """
    require_extra("onnx_max_abs_error", *RUNS_ONNX)
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: images.numpy()})
    with torch.no_grad():
        want = model(images)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    if len(got) != len(want):
        raise ValueError(f"the ONNX model has {len(got)} outputs, PyTorch {len(want)}")
    for name, outputs in (("ONNX Runtime", got), ("PyTorch", [w.numpy() for w in want])):
        if not all(np.isfinite(o).all() for o in outputs):
            raise ValueError(f"the {name} outputs hold NaN or inf: the model (or its weights) is broken")
    return max(float(np.abs(g - w.numpy()).max()) for g, w in zip(got, want, strict=True))


def write_onnx(
    program: torch.export.ExportedProgram,
    path: Path,
    output_names: Sequence[str],
    metadata: Mapping[str, str],
    quantize: str | None = None,
    input_names: Sequence[str] = ("images",),
) -> Path:
    """:func:`export_onnx` to ``path``; with ``quantize="dynamic"`` its :func:`quantize_dynamic` there instead (the
    fp32 file goes to a :func:`scratch_folder` beside ``path``, removed whatever happens; a kill leaves it hidden
    there, never under a name a script would take for a model, and the next export to ``path`` removes it).

    ``path`` is written without a check: an export that checks its file writes it at :func:`checked_output`'s path.

    Raises:
        ModuleNotFoundError: the ``[export]`` extra is not installed (:func:`require_extra`): nothing written.
        ValueError: another ``quantize``; a program traced in training mode (:func:`export_onnx`'s check).
    """
    if quantize not in (None, *QUANTIZATIONS):
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZATIONS)} or None, got {quantize!r}")
    require_extra("write_onnx", *WRITES_ONNX, *(RUNS_ONNX if quantize else ()))
    if not quantize:
        return export_onnx(program, path, output_names, metadata, input_names)
    with scratch_folder(path) as folder:
        fp32 = export_onnx(program, folder / "fp32.onnx", output_names, metadata, input_names)
        return quantize_dynamic(fp32, path)


def _scratch_prefix(path: Path) -> str:
    """The name every :func:`scratch_folder` of ``path`` starts with (hidden: ``list_files`` and ``ls`` skip it)."""
    return f".{path.name}.export-"


@contextmanager
def scratch_folder(path: str | os.PathLike) -> Iterator[Path]:
    """A new hidden folder beside ``path``, ``.<name>.export-<random>``, for the files an export writes before they
    are checked (the model itself: :func:`checked_output`; the fp32 model a quantization starts from); removed with
    what it holds on exit, whatever happens.

    The folder is locked while in use (``flock`` on its ``.lock``, which the system releases however the process
    ends), so that a folder a killed export left behind (a whole model, unchecked) is told apart from the folder
    of an export still running: the abandoned ones of ``path`` are removed before a new one is made, as the fixed
    ``<name>.fp32.tmp.onnx`` of earlier versions was overwritten by the next quantization (that file too is
    removed, for what a killed run of an earlier version left).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(path)
    folder = Path(tempfile.mkdtemp(prefix=_scratch_prefix(path), dir=path.parent))
    lock = None
    try:
        lock = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if lock is not None:
            os.close(lock)


def _remove_abandoned(path: Path) -> None:
    """Remove the :func:`scratch_folder` folders of ``path`` that no running process holds, and the fp32 file the
    quantization of earlier versions left at ``<stem>.fp32.tmp.onnx`` when killed."""
    path.with_name(path.stem + ".fp32.tmp.onnx").unlink(missing_ok=True)
    for folder in path.parent.glob(glob.escape(_scratch_prefix(path)) + "*"):
        if folder.is_symlink() or not folder.is_dir():
            continue
        try:  # no O_CREAT: a folder whose lock is not made yet belongs to an export starting now
            lock = os.open(folder / ".lock", os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a running export's
            continue
        else:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(lock)


@contextmanager
def checked_output(path: str | os.PathLike) -> Iterator[Path]:
    """The path at which to write an export and check it before it is ``path``: a file in a :func:`scratch_folder`
    beside ``path``. When the block (write, then check) ends without an error, the file is renamed over ``path``
    (``os.replace``: atomic; the file's bytes were fsynced by :func:`swinlite.io.atomic_write`, the folder is fsynced
    after the rename as that function does). When it raises, or the process is killed, ``path`` keeps what it had
    (an earlier export, or nothing): no file is ever under ``path`` that its check did not pass.

    Writing at ``path`` and checking it there (earlier versions) left a file that failed its check under ``path``
    until it was removed, the earlier good file already lost, and a kill during the check left it there for
    ``predict.py --onnx`` to use. A symlinked ``path`` keeps its link and its target gets the file, as
    :func:`swinlite.io.atomic_write` writes (the link was replaced by a file, the target kept its old one).

    Raises:
        ValueError: the block's, with a note that ``path`` was not written when the block had written its file
            (its check refused it).
    """
    path = Path(os.path.realpath(path))  # a symlinked output: its target gets the file, the link stays
    with scratch_folder(path) as folder:
        staged = folder / path.name
        try:
            yield staged
        except ValueError as e:
            if not staged.is_file():  # refused before anything was written
                raise
            kept = f"{path} keeps its earlier file" if path.exists() else f"nothing was written to {path}"
            raise ValueError(f"{e}; the export failed its check: {kept}") from e
        os.replace(staged, path)
        fsync_folder(path.parent)


def check_onnx(
    path: Path,
    model: nn.Module,
    sizes: Sequence[tuple[int, int]],
    quantized: bool = False,
    tolerance: float = TOLERANCE,
) -> float:
    """Compare ONNX Runtime with PyTorch on random images at each of ``sizes`` (batches 3, 2, 1), printing each
    difference; return the largest. An INT8 file (``quantized``) computes other values: its differences are printed,
    and only NaN or inf fails (``tolerance`` does not apply; ``scripts/export_onnx.py`` refuses ``--tolerance`` there).

    Raises:
        ValueError: NaN or inf in either; unless ``quantized``, a difference above ``tolerance``.
    """
    errors = []
    for batch, size in zip((3, 2, 1), sizes, strict=False):
        error = onnx_max_abs_error(path, model, torch.randn(batch, 3, *size))
        print(f"ONNX Runtime vs PyTorch at batch {batch}, {size[0]}x{size[1]}: max abs error {error:.3g}")
        errors.append(error)
    if not quantized and not max(errors) <= tolerance:
        raise ValueError(f"max abs error {max(errors):.3g} is above --tolerance {tolerance}")
    return max(errors)


def check_sizes(nominal: tuple[int, int], size_range: tuple[int, int]) -> list[tuple[int, int]]:
    """Three distinct sizes at which to compare a dynamic export with PyTorch (:func:`check_onnx` runs them at batches
    3, 2, 1): the nominal size; one of other remainders modulo every window and patch, shorter and wider (e.g.
    224x224 -> 197x339); and the smallest of the range, last; all inside it.

    The second is padded from the first stage on, at a batch above 1 (a padding mask broadcast wrongly over the
    batch passes at batch 1), and at the nominal size a Swin's last stage is about one window (7x7 for 224 in
    windows of 7), so 7/8 of it fits one window along H at a late stage while 3/2 of it spans two along W: the
    blocks shift along one side only (every registered variant: tests/test_export.py). The sizes before (253x339 at
    batch 1) met neither.

    Where one of the first two falls on another size of the list (a nominal size that is the range's smallest, the
    second cut to the range), the next size not listed yet takes its place: the second transposed, then the range's
    corners, smallest first (dropping it left two sizes). A range of one size gives that size alone.
    """
    low, high = size_range
    h, w = nominal
    other = (h * 7 // 8 + 1, w * 3 // 2 + 3)
    candidates = [(h, w), other, other[::-1], (low, high), (high, low), (high, high)]
    inside = dict.fromkeys((min(max(a, low), high), min(max(b, low), high)) for a, b in candidates)
    smallest = (low, low)
    return [size for size in inside if size != smallest][:2] + [smallest]
