"""A segmentation run's resume.pt given to a script as its weights file (tests/fc_resumekit.py)."""

from pathlib import Path

import pytest
from fc_resumekit import CASES, check_resume_refused


@pytest.mark.parametrize("script, options", CASES)
def test_resume_state_refused(trained, tmp_path: Path, capsys, script: str, options: list[str]):
    data, run = trained
    image = data / "images" / "validation" / "00.png"
    check_resume_refused(run, image, "segmentation", tmp_path, capsys, script, options)


@pytest.mark.parametrize("script", ["segment", "evaluate_segmentation"])
def test_resume_state_refused_by_the_tasks_scripts(trained, tmp_path: Path, capsys, script: str):
    """segment.py and evaluate_segmentation.py said the file was "not a segmentation checkpoint (no segmentation
    metadata)"."""
    data, run = trained
    options = ["--input", "{image}", "--output-dir", "{out}"] if script == "segment" else [
        "--data-dir", str(data), "--output-dir", "{out}"]  # fmt: skip
    check_resume_refused(run, data / "images" / "validation" / "00.png", "segmentation", tmp_path, capsys, script,
                         options)  # fmt: skip
