"""``data.data_dir=FILE`` for classification's digits demo (no --data-dir) ended in ``[Errno 20] Not a directory``;
the detection and segmentation demos said a folder in COCO 2017's / ADE20K's layout was expected, though each demo
writes that folder itself. Each now says the path is a file where a folder for the demo to write into is expected; a
caller of split_paths / split_folders without data.data_dir names its own option."""

import re
from pathlib import Path

import pytest
from scriptkit import run_script

from swinlite.detection.config import DetDataConfig
from swinlite.detection.data import split_paths
from swinlite.segmentation.config import SegDataConfig
from swinlite.segmentation.data import split_folders

SAID = "error: --data-dir (data.data_dir) {} is a file; expected a folder for the {} demo to write its {} into"


@pytest.mark.parametrize(
    ("script", "config", "demo", "what"),
    [
        ("train", "configs/demo.yaml", "digits", "images"),
        ("train_detection", "configs/det_demo.yaml", "digits", "images and annotations"),
        ("train_segmentation", "configs/seg_demo.yaml", "shapes", "images and masks"),
    ],
)
def test_a_demo_s_data_dir_naming_a_file_says_it_is_one(
    tmp_path: Path, capsys, script: str, config: str, demo: str, what: str
):
    archive = tmp_path / "coco.zip"
    archive.write_bytes(b"PK")
    out = tmp_path / "run"
    code = run_script(script, ["--config", config, "--output-dir", out, f"data.data_dir={archive}"])
    assert code == 2
    assert SAID.format(archive, demo, what) in capsys.readouterr().err
    assert not out.exists()


def test_a_caller_names_its_own_option(tmp_path: Path):
    archive = tmp_path / "coco.zip"
    archive.write_bytes(b"PK")
    with pytest.raises(ValueError, match=re.escape(f"--data-dir {archive} is a file; expected a folder in COCO")):
        split_paths(DetDataConfig(data_dir=str(archive)), "val", option="--data-dir")
    with pytest.raises(ValueError, match=re.escape(f"--data-dir {archive} is a file; expected a folder in ADE20K")):
        split_folders(SegDataConfig(data_dir=str(archive)), "val", option="--data-dir")
