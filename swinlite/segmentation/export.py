"""A trained UperNet of ``scripts/train_segmentation.py`` as one ONNX file for every image size of a range:
normalised images [B, 3, H, W] -> per-pixel class logits [B, K, H, W] at the same size.

The graph is the model's eval forward (backbone, UperNet head, the upsampling to the input's size), taken by
:func:`swinlite.export.export_program` with a symbolic batch, height and width; its pyramid pooling traces as
:class:`~swinlite.export.BinAverage2d`, whose bins follow the size. What the test settings do around the model
(rescale the image, sliding windows, flips, scales averaged, logits back to the image's size, the label choice)
stays outside the graph, as in :func:`swinlite.segmentation.inference.predict_scores`;
:func:`swinlite.onnx_predict.segment_scores` does the same in NumPy, reading the settings, classes and palette from
the file's metadata.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from .. import export
from .inference import InferenceSettings
from .models import UperNet
from .predictor import load_segmenter

OUTPUTS = ("logits",)


class SegmenterLogits(nn.Module):
    """The logits of a :class:`~swinlite.segmentation.models.UperNet` alone (its eval output's first field)."""

    def __init__(self, model: UperNet) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images [B, 3, H, W] (normalised) -> logits [B, K, H, W]."""
        return self.model(images).logits


def served_sizes(model: UperNet, test: InferenceSettings) -> tuple[int, int]:
    """(smallest, largest) height and width the export serves by default: from one pixel more than the coarsest
    level's stride (no map of a single cell, as :func:`swinlite.export.default_size_range`) to the larger of
    :data:`swinlite.export.MAX_SIZE` and the longest side the checkpoint's own test settings feed the model."""
    low = model.backbone.feature_info.reduction()[-1] + 1
    longest = max(int(max(test.img_scale) * ratio) for ratio in test.ratios)  # rescaled_size's long-side limit
    return low, max(export.MAX_SIZE, longest, *test.crop_size)


def export_segmenter(
    checkpoint: Path,
    output: Path,
    size_range: tuple[int | None, int | None] = (None, None),
    quantize: str | None = None,
    check: bool = True,
    tolerance: float = export.TOLERANCE,
) -> float | None:
    """Export a segmentation checkpoint to ``output`` (``scripts/export_onnx.py``) for heights and widths in
    ``size_range`` (None: :func:`served_sizes`); check it; return the largest |ONNX Runtime - PyTorch| logit at three
    sizes of the range on random images, or None without ``check``. The file is written and checked at a hidden path
    beside ``output`` and becomes ``output`` once it passes (:func:`swinlite.export.checked_output`): a refused file
    leaves ``output`` as it was.

    Raises:
        ValueError: a checkpoint that is not a segmenter's (:func:`load_segmenter`); before the trace, a minimum below
            :func:`served_sizes`' smallest, or not below the default maximum without a maximum given
            (:func:`swinlite.export.served_range`), an empty range; a check above ``tolerance`` (INT8: only finite
            logits).
    """
    model, info = load_segmenter(checkpoint)
    default = served_sizes(model, info.test)
    low, high = export.served_range(default, *size_range, maps=True)
    graph = SegmenterLogits(model).eval()
    nominal = tuple(info.test.crop_size)
    clamped = tuple(min(max(side, low), high) for side in nominal)
    program = export.export_program(graph, torch.randn(2, 3, *clamped), (low, high))
    metadata = {
        "task": "segmentation",
        "model": info.metadata["segmenter"].get("name"),
        "classes": list(info.labels.classes),
        "palette": [list(c) for c in info.labels.palette],
        "preprocessing": info.metadata["preprocessing"],
        "input_sizes": {"height": [low, high], "width": [low, high]},
        "smallest_size": default[0],  # what a --min-size goes down to: an image between it and low is no thin one
        "weights": info.metadata.get("weights", "raw"),
        **export.versions(info.metadata),
    }
    sizes = export.check_sizes(clamped, (low, high))
    with export.checked_output(output) as path:  # renamed to output once its check passes
        export.write_onnx(program, path, OUTPUTS, {k: json.dumps(v) for k, v in metadata.items()}, quantize)
        error = export.check_onnx(path, graph, sizes, quantize is not None, tolerance) if check else None
    print(f"wrote {output} (input images [batch, 3, H, W] normalised, H and W in {low}..{high}; output logits)")
    return error
