"""mIoU, mAcc and aAcc as mmsegmentation computes them: from confusion counts summed over the whole split."""

import math

import pytest
import torch

from swinlite.segmentation.evaluation import confusion, per_class_csv, per_class_table, scores

IGNORE = 255


def test_perfect_prediction_scores_100_and_classes_never_seen_are_left_out():
    target = torch.tensor([[0, 0, 1, 1], [2, 2, IGNORE, IGNORE]])
    result = scores(confusion(target.clamp(max=3), target, 5, IGNORE))  # 5 classes: 3 and 4 never seen
    assert (result.miou, result.macc, result.aacc) == (100.0, 100.0, 100.0)
    assert result.iou[:3] == [100.0] * 3 and all(math.isnan(v) for v in result.iou[3:])


def test_hand_computed_case_over_two_images():
    """Image 1: labels [0 0 1 1 | 2 IGNORE], predicted [0 1 1 1 | 0 2]; image 2: labels [1 1], predicted [2 2].

    Over both (the ignored pixel left out): class 0: I 1, L 2, P 2 -> IoU 1/3, Acc 1/2; class 1: I 2, L 4, P 3 ->
    IoU 2/5, Acc 2/4; class 2: I 0, L 1, P 2 -> IoU 0/3, Acc 0/1. aAcc = 3/7. A per-image mean would differ
    (image 2 alone has IoU 0 for both its classes)."""
    pred1, target1 = torch.tensor([0, 1, 1, 1, 0, 2]), torch.tensor([0, 0, 1, 1, 2, IGNORE])
    pred2, target2 = torch.tensor([2, 2]), torch.tensor([1, 1])
    counts = confusion(pred1, target1, 3, IGNORE) + confusion(pred2, target2, 3, IGNORE)
    assert counts.tolist() == [[1, 1, 0], [0, 2, 2], [1, 0, 0]]  # row: label, column: prediction
    result = scores(counts)
    assert result.iou == pytest.approx([100 / 3, 40.0, 0.0])
    assert result.acc == pytest.approx([50.0, 50.0, 0.0])
    assert result.miou == pytest.approx((100 / 3 + 40) / 3)
    assert result.macc == pytest.approx(100 / 3)
    assert result.aacc == pytest.approx(300 / 7)


def test_a_class_only_predicted_counts_zero_iou_but_no_accuracy():
    counts = confusion(torch.tensor([0, 1]), torch.tensor([0, 0]), 2, IGNORE)  # class 1 predicted, never labelled
    result = scores(counts)
    assert result.iou == [50.0, 0.0] and result.acc[0] == 50.0 and math.isnan(result.acc[1])
    assert (result.miou, result.macc) == (25.0, 50.0)


def test_table_and_csv_name_every_class():
    result = scores(confusion(torch.tensor([0, 1]), torch.tensor([0, 0]), 3, IGNORE))
    table = per_class_table(result, ["sky", "road", "car"])
    assert table.splitlines()[2].split() == ["sky", "50.00", "50.00"] and "nan" in table.splitlines()[4]
    assert per_class_csv(result, ["sky", "road", "car"]).decode().splitlines() == [
        "class,iou,acc", "sky,50.0000,50.0000", "road,0.0000,", "car,,"
    ]  # fmt: skip
