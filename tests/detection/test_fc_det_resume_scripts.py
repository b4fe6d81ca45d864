"""A detection run's resume.pt given to export_onnx.py, predict.py or evaluate.py (tests/fc_resumekit.py)."""

from pathlib import Path

import pytest
from fc_resumekit import CASES, check_resume_refused


@pytest.mark.parametrize("script, options", CASES)
def test_resume_state_refused(trained, tmp_path: Path, capsys, script: str, options: list[str]):
    coco, run = trained
    check_resume_refused(run, coco / "val2017" / "01.png", "detection", tmp_path, capsys, script, options)
