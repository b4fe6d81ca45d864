"""What detect.py writes and what it draws follow one rule (predictions.kept_scores); its drawings are the same with
and without torch."""

import numpy as np
import torch
from PIL import Image

from swinlite import onnx_predict
from swinlite.colours import label_colour
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
    assert [e["bbox"] for e in entries] == [[2.0, 2.0, 8.0, 8.0], [2.0, 50.0, 8.0, 8.0]]  # COCO's [x, y, w, h]
    image = torch.zeros(3, 64, 32, dtype=torch.uint8)
    prediction = {"boxes": torch.from_numpy(boxes), "labels": torch.ones(3, dtype=torch.int64),
                  "scores": torch.tensor(scores)}  # fmt: skip
    drawn = draw_detections(image, prediction, categories, 0.5).any(0)  # [H, W]: pixels drawn on
    assert drawn[2:11, 2].all() and drawn[20:49].sum() == 0 and drawn[50:59, 2].all()  # the left edges; not 0.49994


def test_masks_are_painted_in_their_class_colour_alike_with_and_without_torch():
    """Mask R-CNN's drawings painted the highest-scoring mask black (torchvision's default colours begin with
    (0, 0, 0): it only darkened the image), with and without --onnx. Each mask is painted in its class's colour, the
    same by both paths."""
    boxes = torch.tensor([[2.0, 2.0, 8.0, 8.0], [12.0, 12.0, 18.0, 18.0], [20.0, 2.0, 28.0, 8.0]])
    masks = torch.zeros(3, 1, 20, 30)  # [N, 1, H, W] probabilities, as Mask R-CNN gives them
    for mask, (x1, y1, x2, y2) in zip(masks, boxes.int().tolist(), strict=True):
        mask[0, y1:y2, x1:x2] = 1
    labels, scores = torch.tensor([1, 1, 2]), torch.tensor([0.9, 0.8, 0.7])
    categories = Categories([3, 5], ["square", "bar"])
    image = torch.full((3, 20, 30), 200, dtype=torch.uint8)
    prediction = {"boxes": boxes, "labels": labels, "scores": scores, "masks": masks}
    drawn = draw_detections(image, prediction, categories, 0.5)  # [3, H, W]
    for (x, y), label in (((4, 4), 1), ((14, 14), 1), ((22, 4), 2)):  # in each mask, inside its box's 2 px edge
        assert drawn[:, y, x].tolist() == [int(200 * 0.6 + c * 0.4) for c in label_colour(label)] != [120] * 3
    texts = [
        f"{categories.names[i - 1]} {score:.2f}" for i, score in zip(labels.tolist(), scores.tolist(), strict=True)
    ]
    pixels = Image.fromarray(image.permute(1, 2, 0).numpy())  # [H, W, 3]
    onnx = onnx_predict.draw_detections(pixels, boxes.numpy(), labels.numpy(), texts, masks[:, 0].numpy() > 0.5)
    np.testing.assert_array_equal(np.asarray(onnx), drawn.permute(1, 2, 0).numpy())
