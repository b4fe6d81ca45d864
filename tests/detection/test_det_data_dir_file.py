"""--data-dir (data.data_dir) naming a file, say an archive not yet unpacked, is said to be a file where a folder is
expected, not that a path built from it (FILE/annotations/instances_train2017.json) does not exist; a missing one is
said to be missing."""

import re
from pathlib import Path

import pytest
from scriptkit import run_script

from swinlite.detection.config import DetDataConfig
from swinlite.detection.data import check_data_root, split_paths

SAID = "--data-dir (data.data_dir) {} is a file; expected a folder "  # (the demo's: for it to write into)


@pytest.mark.parametrize("split", ["train", "val"])
@pytest.mark.parametrize("said", ["is a file", "does not exist"])
def test_split_paths_of_a_file_data_dir_say_it_is_a_file(tmp_path: Path, split: str, said: str):
    """A missing --data-dir is named too, not as its missing annotation file; the digits demo's is written. With one
    of the split's two paths given, the other, taken from --data-dir, is named by its key (it said the layout before,
    asking for the file given)."""
    check = split_paths if said == "is a file" else check_data_root
    archive = tmp_path / "coco.zip"
    if said == "is a file":
        archive.write_bytes(b"PK")
    expected = (
        f"--data-dir (data.data_dir) {archive} {said}; expected a folder in COCO 2017's layout holding "
        f"annotations/instances_{split}2017.json and {split}2017/"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        check(DetDataConfig(data_dir=str(archive)), split)
    if said == "does not exist":
        check_data_root(DetDataConfig(data_dir=str(archive), dataset="digits"), split)  # the demo writes it
    given = {f"{split}_ann": str(tmp_path / "a.json"), f"{split}_images": str(tmp_path / "images")}
    for key, path in (("ann", f"annotations/instances_{split}2017.json"), ("images", f"{split}2017/")):
        one = {k: v for k, v in given.items() if k != f"{split}_{key}"}  # the other path forgotten: named
        forgot = f"data.{split}_{key} is not set, so it is read from data.data_dir/{path}; set data.{split}_{key}"
        expected = f"{archive} {said}; expected a folder holding {path}: {forgot}"
        with pytest.raises(ValueError, match=re.escape(expected)):
            check(DetDataConfig(data_dir=str(archive), **one), split)
    assert split_paths(DetDataConfig(data_dir=str(archive), **given), split)[0] == tmp_path / "a.json"  # unused


@pytest.mark.parametrize(
    "argv",
    [["--data-dir", "{archive}"], ["--config", "configs/det_demo.yaml", "data.data_dir={archive}"]],
    ids=["coco", "digits-demo"],
)
def test_train_detection_with_a_file_data_dir_says_it_is_a_file(tmp_path: Path, capsys, argv: list[str]):
    archive = tmp_path / "coco.zip"
    archive.write_bytes(b"PK")
    out = tmp_path / "run"
    code = run_script("train_detection", [a.format(archive=archive) for a in argv] + [f"train.output_dir={out}"])
    assert code != 0
    assert f"error: {SAID.format(archive)}" in capsys.readouterr().err
    assert not out.exists()
