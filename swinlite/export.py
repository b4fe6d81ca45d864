"""Export a swinlite classifier or feature extractor with ``torch.export`` and to ONNX.

The batch size is dynamic. Height and width are fixed at export time: the window padding, shift and
masks are computed from the map size in Python (and cached per size), so each input size needs its
own export.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import timm
import torch
from timm.data import resolve_model_data_config
from torch import nn

from .inference import class_names
from .io import atomic_write_bytes
from .models.swin import SwinTransformer
from .weights import check_model_name, load_model, read_info


class FeatureExtractor(nn.Module):
    """A Swin's NCHW feature levels as a tuple (export-friendly ``features_only``).

    Args:
        model: the Swin.
        out_indices: levels to return.
    """

    def __init__(self, model: SwinTransformer, out_indices: Sequence[int] = (0, 1, 2, 3)) -> None:
        super().__init__()
        self.model = model
        self.out_indices = list(out_indices)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """images [B, 3, H, W] -> (level maps [B, C_i, H/s_i, W/s_i], ...)."""
        levels = self.model.forward_intermediates(x, self.out_indices, stop_early=True, intermediates_only=True)
        return tuple(levels)


def build_exportable(
    model_name: str | None,
    features: bool = False,
    checkpoint: str | os.PathLike | None = None,
    out_indices: Sequence[int] = (0, 1, 2, 3),
    **model_kwargs: object,
) -> nn.Module:
    """The classifier (``features=False``) or a :class:`FeatureExtractor`, in eval mode.

    With a checkpoint the model is rebuilt by :func:`swinlite.load_model` (strict; a self-describing file
    needs no ``model_name``); without one it has timm's initial weights.

    Raises:
        ValueError: ``model_name`` is not a swinlite model; neither a name nor a checkpoint; the checkpoint
            does not load.
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


def export_metadata(model: nn.Module, checkpoint: str | os.PathLike | None) -> dict[str, str]:
    """What a deployment needs besides the graph, as JSON strings: model, preprocessing, weights kind, swinlite
    version, and the class names of a classifier (not of a :class:`FeatureExtractor`)."""
    from . import __version__

    base = model.model if isinstance(model, FeatureExtractor) else model
    info = read_info(checkpoint) if checkpoint is not None else None
    meta = {
        "model": info.model if info else base.pretrained_cfg.get("architecture", type(base).__name__),
        "preprocessing": resolve_model_data_config(base),
        "weights": info.weights if info else ("none" if checkpoint is None else "raw"),
        "swinlite": __version__,
    }
    if not isinstance(model, FeatureExtractor):
        meta["classes"] = class_names(base)
    return {k: json.dumps(v) for k, v in meta.items()}


@contextmanager
def _without_grad(model: nn.Module) -> Iterator[None]:
    """Trace an inference graph: parameters need no grad (fused attention kernels refuse a grad-requiring mask)."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    model.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def export_program(model: nn.Module, example: torch.Tensor) -> torch.export.ExportedProgram:
    """``torch.export.export`` with a dynamic batch; ``example`` [B >= 2, 3, H, W] fixes H and W."""
    if example.ndim != 4 or example.shape[0] < 2:
        raise ValueError(
            f"example must be an image batch [B >= 2, C, H, W] (B=1 would fix the batch), got {tuple(example.shape)}"
        )
    batch = torch.export.Dim("batch", min=1, max=65536)
    with _without_grad(model):
        return torch.export.export(model, (example,), dynamic_shapes={"x": {0: batch}}, strict=False)


def export_onnx(
    program: torch.export.ExportedProgram,
    path: Path,
    output_names: Sequence[str],
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """Convert an exported program (:func:`export_program`) to ONNX at ``path``, written atomically.

    The input is named ``images``; the batch stays dynamic. ``metadata`` goes into the model's
    ``metadata_props`` (ONNX Runtime: ``session.get_modelmeta().custom_metadata_map``).
    """
    onnx_program = torch.onnx.export(program, input_names=["images"], output_names=list(output_names), verbose=False)
    proto = onnx_program.model_proto
    for key, value in (metadata or {}).items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    atomic_write_bytes(path, proto.SerializeToString())  # one file: no external data
    return path


def onnx_max_abs_error(path: Path, model: nn.Module, images: torch.Tensor) -> float:
    """Largest |ONNX Runtime - PyTorch| over all outputs for ``images``.

    Raises:
        ValueError: an output of either holds NaN or inf (a comparison with NaN would pass any tolerance).
    """
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"images": images.numpy()})
    with torch.no_grad():
        want = model(images)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    if len(got) != len(want):
        raise ValueError(f"the ONNX model has {len(got)} outputs, PyTorch {len(want)}")
    for name, outputs in (("ONNX Runtime", got), ("PyTorch", [w.numpy() for w in want])):
        if not all(np.isfinite(o).all() for o in outputs):
            raise ValueError(f"the {name} outputs hold NaN or inf: the model (or its weights) is broken")
    return max(float(np.abs(g - w.numpy()).max()) for g, w in zip(got, want, strict=True))
