"""optim.layer_decay: classification's alone; the docs of detection and segmentation say they refuse it, as they do."""

from pathlib import Path

import pytest

from swinlite.detection.task import DetectionTask
from swinlite.engine.preflight import check_run
from swinlite.segmentation.task import SegmentationTask

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize(("task", "doc"), [(DetectionTask, "detection.md"), (SegmentationTask, "segmentation.md")])
def test_the_task_refuses_layer_decay_and_its_doc_says_so(task: type, doc: str):
    """training.md listed layer-wise decay among the keys every task shares, and neither dense doc named the refusal
    users met ("optim.layer_decay is not available for segmentation")."""
    cfg = task.load_config(None, ["optim.layer_decay=0.9"])
    with pytest.raises(ValueError, match="optim.layer_decay is not available"):
        check_run(task, cfg)
    lines = [line for line in (DOCS / doc).read_text().splitlines() if "`optim.layer_decay`" in line]
    assert any("refused" in line for line in lines), f"{doc} does not say optim.layer_decay is refused"


def test_training_md_says_layer_decay_is_classifications_alone():
    text = " ".join((DOCS / "training.md").read_text().split())
    assert "`optim.layer_decay` alone is classification's: detection and segmentation refuse it" in text
