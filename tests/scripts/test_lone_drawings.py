"""A folder of drawings (detect.py's images/, segment.py's labels/ and overlays/) is a script's earlier output only
where that script's record of the run beside it (sources.json) names its drawings (files._check_recorded). A dataset's
lone images/ of files named <n>_<name>.png was removed by detect.py and evaluate_detection.py --overwrite as an earlier
run's (and called one without it): it is the user's, refused with or without --overwrite, and kept."""

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scriptkit import evaluation_inputs, run_script

from swinlite import files

# script -> (its data arguments: "in" a folder of one image, "data" never read; the drawings folder checked)
SCRIPTS = {
    "detect": (["--input", "in"], "images"),
    "evaluate_detection": (["--data-dir", "data"], "images"),
    "segment": (["--input", "in"], "labels"),
    "evaluate_segmentation": (["--images", "data", "--masks", "data"], "overlays"),
}


def _image(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(path)
    return path


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["", "overwrite"])
@pytest.mark.parametrize("script", SCRIPTS)
def test_a_lone_drawings_folder_is_the_users(tmp_path, capsys, segmenter_file, script, overwrite):
    data, drawn = SCRIPTS[script]
    out = tmp_path / "out"
    _image(out / drawn / "00000_cat.png")  # the user's, named as the scripts name their drawings
    _image(out / drawn / "00001_dog.png")
    _image(tmp_path / "in" / "a.png")
    (tmp_path / "model.file").write_bytes(b"never read: the run is refused before")
    checkpoint = evaluation_inputs(tmp_path, script, segmenter_file) or tmp_path / "model.file"
    before = _files(tmp_path)
    args = [tmp_path / a if a in ("in", "data") else a for a in data]
    argv = ["--checkpoint", checkpoint, *args, "--output-dir", out, *overwrite]
    assert run_script(script, argv) == 2
    error = capsys.readouterr().err
    assert f"{out / drawn} is not " in error and "is kept as yours" in error and "earlier run" not in error
    assert _files(tmp_path) == before


@pytest.mark.parametrize("task", ["detection", "segmentation"])
def test_a_drawings_folder_beside_its_record_is_an_earlier_runs(tmp_path, task):
    script = next(s for s, names in files.OUTPUT_DIR_FILES[task].items() if set(names) & set(files.DRAWINGS))
    written = files.OUTPUT_DIR_FILES[task][script]
    for name in written:
        path = tmp_path / name / "00000_a.png" if name in files.DRAWINGS else tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"an earlier run's")
    (tmp_path / files.RECORD).write_bytes(files.json_bytes({"00000_a.png": "a.png"}))  # it names the drawings
    with pytest.raises(ValueError, match="holds an earlier run's"):
        files.check_output_dir(task, tmp_path, [], overwrite=False)
    earlier = files.check_output_dir(task, tmp_path, [], overwrite=True)
    assert sorted(p.name for p in earlier) == sorted(written)


def test_the_other_tasks_lone_images_folder_is_left_alone(tmp_path):
    """segment.py writes no images/: it writes beside a dataset's, as train.py --overwrite leaves it."""
    _image(tmp_path / "images" / "00000_cat.png")
    assert files.check_output_dir("segmentation", tmp_path, [], overwrite=True) == []
    assert files.script_outputs(tmp_path) == files.script_outputs(tmp_path / "none")
