"""evaluate_detection.py / evaluate_segmentation.py given a --data-dir that is a file name the flag they have, not a
training setting (data.data_dir) they do not take."""

from pathlib import Path

import pytest
from scriptkit import run_script


@pytest.mark.parametrize("script", ["evaluate_detection", "evaluate_segmentation"])
def test_a_file_data_dir_is_named_by_the_flag(tmp_path: Path, capsys, script: str):
    archive, checkpoint = tmp_path / "data.zip", tmp_path / "model.safetensors"
    archive.write_bytes(b"PK")
    checkpoint.write_bytes(b"not read: the data is checked first")
    argv = ["--checkpoint", checkpoint, "--data-dir", archive, "--output-dir", tmp_path / "out"]
    assert run_script(script, argv) == 2
    error = capsys.readouterr().err
    assert f"error: --data-dir {archive} is a file; expected a folder" in error
    assert "data.data_dir" not in error
