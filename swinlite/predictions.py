"""What the prediction scripts write, with or without torch: the top-k CSV of a classifier and the result entries of
a detector (``detections.json``). ``scripts/predict.py`` and ``scripts/detect.py`` write through these on both their
PyTorch and their ONNX Runtime path (:mod:`swinlite.onnx_predict`), so the two write the same files.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import atomic_write_bytes, printable_path, remove_interrupted_writes


@dataclass(frozen=True)
class Prediction:
    """Top-k of one image: class indices and probabilities, best first."""

    path: Path
    indices: list[int]
    probs: list[float]


def write_csv(predictions: list[Prediction], classes: list[str], topk: int, path: str | os.PathLike) -> None:
    """Columns ``path, class, prob`` then ``class_2, prob_2, ...`` up to ``topk``; UTF-8, written atomically.

    A file name that is not valid UTF-8 is written with its odd bytes as ``\\xNN`` escapes, and a backslash as
    ``\\x5c`` (:func:`swinlite.files.printable_path`): the CSV stays valid UTF-8 for every reader, one path per file.
    The temporary files of its writes a kill broke off are removed first
    (:func:`swinlite.files.remove_interrupted_writes`): a killed predict.py left them beside it.
    """
    header = ["path", "class", "prob"]
    for k in range(2, topk + 1):
        header += [f"class_{k}", f"prob_{k}"]
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(header)
    for p in predictions:
        row: list[object] = [printable_path(p.path)]
        for index, prob in zip(p.indices, p.probs, strict=True):
            row += [classes[index], f"{prob:.6f}"]
        writer.writerow(row)
    remove_interrupted_writes(path)
    atomic_write_bytes(path, text.getvalue().encode())


def kept_scores(scores: Iterable[float], score_thresh: float) -> list[bool]:
    """Whether each score reaches ``score_thresh`` as written (rounded to 4 decimals): the one rule for what
    ``detections.json`` lists and what the drawings show."""
    return [round(float(score), 4) >= score_thresh for score in scores]


def detection_entries(
    path: str | os.PathLike,
    boxes: np.ndarray,
    labels: list[int],
    scores: list[float],
    category_ids: list[int],
    names: list[str],
    score_thresh: float,
) -> list[dict[str, object]]:
    """One image's detections scoring at least ``score_thresh`` as ``detections.json`` entries: the image path,
    COCO ``category_id`` and its name, ``bbox`` [x, y, width, height] (2 decimals), ``score`` (4 decimals).

    Args:
        path: the image.
        boxes: float32 [N, 4], (x1, y1, x2, y2) per detection in the image's pixels.
        labels: 1-based class index per detection (``category_ids[label - 1]``).
        scores: score per detection.
        category_ids: COCO category id per class.
        names: class name per class.
        score_thresh: lowest score written (:func:`kept_scores`).
    """
    xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1).tolist()  # in float32, as torch
    entries = []
    for box, label, score, kept in zip(xywh, labels, scores, kept_scores(scores, score_thresh), strict=True):
        if kept:
            entry = {"image": str(path), "category_id": category_ids[label - 1], "category": names[label - 1]}
            entries.append(entry | {"bbox": [round(v, 2) for v in box], "score": round(score, 4)})
    return entries
