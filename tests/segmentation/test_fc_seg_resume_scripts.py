"""A segmentation run's resume.pt given to export_onnx.py, predict.py or evaluate.py (tests/fc_resumekit.py)."""

from pathlib import Path

import pytest
from fc_resumekit import CASES, check_resume_refused


@pytest.mark.parametrize("script, options", CASES)
def test_resume_state_refused(trained, tmp_path: Path, capsys, script: str, options: list[str]):
    data, run = trained
    image = data / "images" / "validation" / "00.png"
    check_resume_refused(run, image, "segmentation", tmp_path, capsys, script, options)
