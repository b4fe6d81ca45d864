"""A detect.py run killed after its first drawing (Ctrl-C, kill -9) left drawings without its record of the run
(sources.json, detections.json were written at its end), which a rerun with --overwrite refused as the user's: the
user had to clean up by hand. sources.json is written before the first drawing, naming the drawings the run may
write: the killed run's drawings are its, replaced by --overwrite."""

import json
import shutil
from pathlib import Path

import pytest
from scriptkit import interrupt_second_png, run_script

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the data's quirks warn; test_data checks those


def test_overwrite_replaces_a_killed_runs_drawings(trained, tmp_path: Path, monkeypatch, capsys):
    coco, run = trained
    val, out = shutil.copytree(coco / "val2017", tmp_path / "val"), tmp_path / "out"
    detect = ["--checkpoint", run / "best.safetensors", "--input", val, "--output-dir", out]
    with monkeypatch.context() as patch:
        interrupt_second_png(patch)
        assert run_script("detect", detect) == 130
    first = sorted((out / "images").iterdir())
    assert len(first) == 1 and not (out / "detections.json").exists()
    assert first[0].name in json.loads((out / "sources.json").read_text())  # the record, before the drawing
    capsys.readouterr()

    assert run_script("detect", detect) == 2  # an earlier run's: refused without --overwrite, as any
    assert "holds an earlier run's images, sources.json: pass --overwrite" in capsys.readouterr().err
    assert run_script("detect", [*detect, "--overwrite"]) == 0
    sources = json.loads((out / "sources.json").read_text())
    assert sorted(sources) == sorted(p.name for p in (out / "images").iterdir()) and len(sources) > 1
    assert sorted(p.name for p in out.iterdir()) == ["detections.json", "images", "sources.json"]


def test_a_drawing_the_record_does_not_name_is_the_users(trained, tmp_path: Path, capsys):
    """The record names the run's drawings: one added beside them is the user's, refused even with --overwrite."""
    coco, run = trained
    val, out = shutil.copytree(coco / "val2017", tmp_path / "val"), tmp_path / "out"
    detect = ["--checkpoint", run / "best.safetensors", "--input", val, "--output-dir", out, "--overwrite"]
    assert run_script("detect", detect) == 0
    mine = out / "images" / "99999_mine.png"
    shutil.copy(next((out / "images").iterdir()), mine)
    capsys.readouterr()
    assert run_script("detect", detect) == 2
    assert "sources.json beside it names no 99999_mine.png" in capsys.readouterr().err
    assert mine.is_file()
