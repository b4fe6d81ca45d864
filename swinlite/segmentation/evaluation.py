"""mIoU, mAcc, aAcc and per-class IoU as mmsegmentation computes them: from the confusion counts of every labelled
pixel of the whole split (not per image), ``ignore_index`` pixels left out.

For class ``c`` over the split: intersection ``I_c`` (pixels of ``c`` predicted ``c``), ``L_c`` (pixels labelled
``c``), ``P_c`` (labelled pixels predicted ``c``); IoU ``I_c / (L_c + P_c - I_c)``, accuracy ``I_c / L_c``. A class
with no labelled and no predicted pixel has no IoU (NaN), one with no labelled pixel no accuracy; mIoU and mAcc are
the means over the classes that have one (``nanmean``); aAcc is ``sum I / sum L``. All in percent.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..files import EVALUATIONS_BY_TASK

# what scripts/evaluate_segmentation.py writes, beside the checkpoint unless --output-dir
EVALUATION_FILES = EVALUATIONS_BY_TASK["segmentation"]


def confusion(pred: torch.Tensor, target: torch.Tensor, num_classes: int, ignore_index: int) -> torch.Tensor:
    """Counts [K, K] (row: label, column: prediction) of the pixels whose label is not ``ignore_index``.

    Args:
        pred: predicted classes, any shape, values in 0..K-1.
        target: labels, the same shape, values in 0..K-1 or ``ignore_index``.
    """
    valid = target != ignore_index
    index = target[valid].long() * num_classes + pred[valid].long()
    return torch.bincount(index, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


@dataclass
class SegScores:
    """Split-level scores in percent; ``iou`` and ``acc`` per class (NaN: undefined, see the module docstring)."""

    miou: float
    macc: float
    aacc: float
    iou: list[float]
    acc: list[float]


def _nanmean(values: torch.Tensor) -> float:
    kept = values[~values.isnan()]
    return float(kept.mean()) if len(kept) else math.nan


def scores(counts: torch.Tensor) -> SegScores:
    """The split's scores from its summed :func:`confusion` counts."""
    counts = counts.double()
    intersection, labelled, predicted = counts.diag(), counts.sum(1), counts.sum(0)
    iou = 100 * intersection / (labelled + predicted - intersection)  # 0 / 0 = NaN: class never seen
    acc = 100 * intersection / labelled
    aacc = float(100 * intersection.sum() / labelled.sum()) if labelled.sum() > 0 else math.nan
    return SegScores(_nanmean(iou), _nanmean(acc), aacc, iou.tolist(), acc.tolist())


def per_class_table(result: SegScores, classes: Sequence[str]) -> str:
    """The per-class IoU and accuracy as a text table, for the log."""
    width = max(len("class"), *(len(c) for c in classes))
    lines = [f"{'class':<{width}}  {'IoU':>6}  {'Acc':>6}", f"{'-' * width}  {'-' * 6}  {'-' * 6}"]
    lines += [f"{name:<{width}}  {iou:6.2f}  {acc:6.2f}" for name, iou, acc in zip(classes, result.iou, result.acc,
                                                                                     strict=True)]  # fmt: skip
    lines.append(f"{'mean':<{width}}  {result.miou:6.2f}  {result.macc:6.2f}   (aAcc {result.aacc:.2f})")
    return "\n".join(lines)


def per_class_csv(result: SegScores, classes: Sequence[str]) -> bytes:
    """``class,iou,acc`` rows (percent; empty where undefined), UTF-8."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["class", "iou", "acc"])
    for name, iou, acc in zip(classes, result.iou, result.acc, strict=True):
        writer.writerow([name, *("" if math.isnan(v) else f"{v:.4f}" for v in (iou, acc))])
    return text.getvalue().encode()
