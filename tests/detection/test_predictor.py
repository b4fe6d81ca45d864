"""What detect.py writes and what it draws follow one rule (predictions.kept_scores)."""

import numpy as np
import torch

from swinlite.detection.data import Categories
from swinlite.detection.predictor import draw_detections
from swinlite.predictions import detection_entries, kept_scores


def test_the_drawing_shows_exactly_the_boxes_the_json_lists():
    """A score of 0.49996 is written as 0.5: at --score-thresh 0.5 it is listed, so it is drawn (before, the JSON
    compared the rounded score and the drawing the raw one)."""
    scores = [0.49996, 0.49994, 0.7]
    assert kept_scores(scores, 0.5) == [True, False, True]
    boxes = np.array([[2.0, 2.0, 10.0, 10.0], [2.0, 30.0, 10.0, 38.0], [2.0, 50.0, 10.0, 58.0]], np.float32)
    categories = Categories([3], ["square"])
    entries = detection_entries("a.png", boxes, [1, 1, 1], scores, categories.ids, categories.names, 0.5)
    assert [e["score"] for e in entries] == [0.5, 0.7]
    image = torch.zeros(3, 64, 32, dtype=torch.uint8)
    prediction = {"boxes": torch.from_numpy(boxes), "labels": torch.ones(3, dtype=torch.int64),
                  "scores": torch.tensor(scores)}  # fmt: skip
    drawn = draw_detections(image, prediction, categories, 0.5).any(0)  # [H, W]: pixels drawn on
    assert drawn[2:11, 2].all() and drawn[20:49].sum() == 0 and drawn[50:59, 2].all()  # the left edges; not 0.49994
