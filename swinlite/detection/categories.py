"""The label <-> COCO category mapping of a detector, apart from the COCO data (pycocotools): the predictor and the
ONNX export read it from a checkpoint's metadata and need no [detection] extra."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Categories:
    """The label <-> COCO category mapping: label ``i + 1`` is category ``ids[i]`` named ``names[i]``."""

    ids: list[int]
    names: list[str]
    source: str = "the label mapping"  # where the mapping comes from, for messages

    def label_of(self, category_id: int) -> int:
        return self.ids.index(category_id) + 1
