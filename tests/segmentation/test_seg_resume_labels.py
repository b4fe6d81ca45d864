"""--resume refuses another reading of the masks' values, saying what the change does."""

from pathlib import Path

import pytest

from swinlite.segmentation.data import Labels
from swinlite.segmentation.task import SegmentationTask


@pytest.mark.parametrize(
    ("key", "saved", "effect"),
    [
        # said 'changes the class of every label value', true of reduce_zero_label only
        ("ignore_index", 255, "data.ignore_index=254, which changes the label value the loss and the scores leave out"),
        ("reduce_zero_label", True, "data.reduce_zero_label=False, which changes the class of every label value"),
    ],
)
def test_a_changed_reading_of_the_masks_is_refused_saying_what_it_changes(key: str, saved: object, effect: str):
    task = object.__new__(SegmentationTask)  # check_resumed reads only the labels
    task.labels = Labels(classes=("a", "b"), palette=((0, 0, 0), (9, 9, 9)), ignore_index=254)
    state = {"classes": ["a", "b"], "ignore_index": 254, "reduce_zero_label": False} | {key: saved}
    with pytest.raises(ValueError, match=effect):
        task.check_resumed(state, Path("resume.pt"))
