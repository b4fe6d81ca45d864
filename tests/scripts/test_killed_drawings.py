"""A detect.py / segment.py run killed after its first drawing leaves its record (sources.json, written before the
first drawing, naming them) and drawings, without detections.json / classes.csv (written at its end). check_output_dir
took that folder for the run's (9a6f8d8), but what train.py --overwrite and the cross-task checks count as a script's
outputs (files.script_outputs, files.held_outputs) still wanted those end files: train.py --overwrite left the killed
run's drawings of the replaced weights beside the new ones, and another task's script or extract_features.py wrote
into the folder beside them. A drawings folder is a run's where the sources.json beside it names every file in it."""

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from swinlite import files
from swinlite.classification import ClassificationTask
from swinlite.engine.distributed import DistInfo, SharedError
from swinlite.engine.run import remove_replaced_run

# a drawing script -> (its task, its drawings folders, the file it writes at its end)
KILLED = {
    "detect.py": ("detection", ("images",), "detections.json"),
    "segment.py": ("segmentation", ("labels", "overlays"), "classes.csv"),
}


def _killed_run(out: Path, script: str) -> list[str]:
    """``script``'s run into ``out`` of two images killed after its first drawing(s); the names it left there."""
    _, drawings, _ = KILLED[script]
    record = files.DrawingRecord(out, [], [Path("in/a.png"), Path("in/b.png")], script)
    name = files.numbered_name(0, Path("in/a.png"))
    record.add(name)
    for folder in drawings:
        files.atomic_write_png(out / folder / name, Image.fromarray(np.full((8, 8, 3), 90, np.uint8)))
    return sorted([*drawings, files.RECORD])


@pytest.mark.parametrize("script", KILLED)
def test_a_killed_runs_drawings_are_its_outputs(tmp_path, script):
    left = _killed_run(tmp_path, script)
    assert not (tmp_path / KILLED[script][2]).exists()
    assert set(left) <= set(files.script_outputs(tmp_path))
    other = next(task for task in files.OUTPUT_DIR_FILES if task != KILLED[script][0])
    assert sorted(files.held_outputs(tmp_path, other)[script]) == left


@pytest.mark.parametrize("script", KILLED)
def test_train_overwrite_removes_a_killed_runs_drawings_in_its_folder(tmp_path, capsys, script):
    out = tmp_path / "run"
    _killed_run(out, script)
    (out / "notes.txt").write_text("the user's own file")
    remove_replaced_run(out, DistInfo(), ClassificationTask)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert (
        f"note: removed what scripts wrote in {out}, which --overwrite clears with any old run: "
        in capsys.readouterr().out
    )


@pytest.mark.parametrize("script", KILLED)
def test_another_script_refuses_the_folder_of_a_killed_run(tmp_path, script):
    _killed_run(tmp_path, script)
    other = next(task for task in files.OUTPUT_DIR_FILES if task != KILLED[script][0])
    with pytest.raises(ValueError, match=f"holds {script}'s outputs"):
        files.check_output_dir(other, tmp_path, [], overwrite=True)
    with pytest.raises(ValueError, match="holds another script's outputs"):
        files.check_folder_alone(tmp_path, "extract_features.py", "features")


@pytest.mark.parametrize("script", KILLED)
def test_drawings_the_record_does_not_name_are_the_users(tmp_path, script):
    _killed_run(tmp_path, script)
    for folder in KILLED[script][1]:
        (tmp_path / folder / files.numbered_name(0, Path("in/a.png"))).rename(tmp_path / folder / "00007_mine.png")
    other = next(task for task in files.OUTPUT_DIR_FILES if task != KILLED[script][0])
    assert script not in files.held_outputs(tmp_path, other)
    assert not set(KILLED[script][1]) & set(files.script_outputs(tmp_path))


def test_a_users_drawing_in_one_folder_is_refused_not_removed(tmp_path):
    """segment.py's labels/ all named by its record, overlays/ also holding a numbered file of the user's that the
    record does not name: train.py --overwrite removed both folders, the user's file with them; it is refused,
    naming the file, and everything is kept."""
    out = tmp_path / "run"
    _killed_run(out, "segment.py")
    mine = out / "overlays" / "00007_mine.png"
    mine.write_bytes(b"the user's")
    said = r"overlays holds drawings no run wrote there \(sources.json beside it names no 00007_mine.png\)"
    with pytest.raises(SharedError, match=said):
        remove_replaced_run(out, DistInfo(), ClassificationTask)
    assert mine.read_bytes() == b"the user's" and any((out / "labels").iterdir())


@pytest.mark.parametrize("script", KILLED)
def test_writes_a_kill_broke_off_are_removed_before_the_next_runs_first(tmp_path, script):
    """A run killed while it wrote its first drawing left labels/ holding only atomic_write's hidden temporary file:
    not an earlier run's output (hidden), so --overwrite kept it and the next run wrote beside it. Such files go with
    the earlier outputs, before the first write; a hidden file of the user's (.DS_Store) stays."""
    task, drawings, _ = KILLED[script]
    for folder in drawings:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / ".00000_a.png.tmpq1w2e3").write_bytes(b"")
    (tmp_path / ".sources.json.tmpz9y8").write_bytes(b"")
    (tmp_path / drawings[0] / ".DS_Store").write_bytes(b"")
    record = files.DrawingRecord(tmp_path, files.check_output_dir(task, tmp_path, [], False), [Path("a.png")], script)
    record.add(files.numbered_name(0, Path("a.png")))
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob(".*")) == [f"{drawings[0]}/.DS_Store"]
