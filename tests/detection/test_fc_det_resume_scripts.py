"""A detection run's resume.pt given to a script as its weights file (tests/fc_resumekit.py)."""

from pathlib import Path

import pytest
from fc_resumekit import CASES, check_resume_refused


@pytest.mark.parametrize("script, options", CASES)
def test_resume_state_refused(trained, tmp_path: Path, capsys, script: str, options: list[str]):
    coco, run = trained
    check_resume_refused(run, coco / "val2017" / "01.png", "detection", tmp_path, capsys, script, options)


@pytest.mark.parametrize("script", ["detect", "evaluate_detection"])
def test_resume_state_refused_by_the_tasks_scripts(trained, tmp_path: Path, capsys, script: str):
    """detect.py and evaluate_detection.py said the file was "not a detection checkpoint (no detector metadata)"."""
    coco, run = trained
    options = ["--input", "{image}", "--output-dir", "{out}"] if script == "detect" else [
        "--data-dir", str(coco), "--output-dir", "{out}"]  # fmt: skip
    check_resume_refused(run, coco / "val2017" / "01.png", "detection", tmp_path, capsys, script, options)
