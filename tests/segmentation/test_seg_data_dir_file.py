"""--data-dir (data.data_dir) naming a file, say an archive not yet unpacked, is said to be a file where a folder is
expected, not that a folder built from it (FILE/images/training) does not exist; a missing one is said to be
missing."""

import re
from pathlib import Path

import pytest
from scriptkit import run_script

from swinlite.segmentation.config import SegDataConfig
from swinlite.segmentation.data import DEFAULT_FOLDERS, check_data_root, split_folders

SAID = "--data-dir (data.data_dir) {} is a file; expected a folder "  # (the demo's: for it to write into)


@pytest.mark.parametrize(("split", "folder"), [("train", "images/training"), ("val", "images/validation")])
@pytest.mark.parametrize("said", ["is a file", "does not exist"])
def test_split_folders_of_a_file_data_dir_say_it_is_a_file(tmp_path: Path, split: str, folder: str, said: str):
    """A missing --data-dir is named too, not as its missing image folder; the shapes demo's is written."""
    archive = tmp_path / "ade.zip"
    if said == "is a file":
        archive.write_bytes(b"PK")
    expected = f"--data-dir (data.data_dir) {archive} {said}; expected a folder in ADE20K's layout holding {folder}/"
    with pytest.raises(ValueError, match=re.escape(expected)):
        (split_folders if said == "is a file" else check_data_root)(SegDataConfig(data_dir=str(archive)), split)
    check = split_folders if said == "is a file" else check_data_root
    if said == "does not exist":
        check_data_root(SegDataConfig(data_dir=str(archive), dataset="shapes"), split)  # the demo writes it
    given = {f"{split}_images": str(tmp_path / "i"), f"{split}_masks": str(tmp_path / "m")}
    assert split_folders(SegDataConfig(data_dir=str(archive), **given), split) == (tmp_path / "i", tmp_path / "m")
    for key, default in zip(("images", "masks"), DEFAULT_FOLDERS[split], strict=True):  # the other set: this key named
        one = {k: v for k, v in given.items() if not k.endswith(key)}
        unset = f"data.{split}_{key} is not set, so it is read from data.data_dir/{default}/; set data.{split}_{key}"
        with pytest.raises(ValueError, match=re.escape(f"{said}; expected a folder holding {default}/: {unset}")):
            check(SegDataConfig(data_dir=str(archive), **one), split)


@pytest.mark.parametrize("argv", [["--data-dir", "{archive}"], ["data.data_dir={archive}"]], ids=["ade20k", "demo"])
def test_train_segmentation_with_a_file_data_dir_says_it_is_a_file(tmp_path: Path, capsys, argv: list[str]):
    archive = tmp_path / "ade.zip"
    archive.write_bytes(b"PK")
    out = tmp_path / "run"
    code = run_script("train_segmentation", [a.format(archive=archive) for a in argv] + [f"train.output_dir={out}"])
    assert code != 0
    assert f"error: {SAID.format(archive)}" in capsys.readouterr().err
    assert not out.exists()
