"""No script writes (or, with --overwrite, empties) a folder that holds one of its inputs, nor calls files it did not
write an earlier run's: detect.py and segment.py (both paths), extract_features.py; no script that writes an
--output-dir replaces or keeps an earlier run's results (its own, or its task's other script's) without --overwrite.
Each is refused before any work, so a placeholder stands for the model file."""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from pico import PICO
from PIL import Image
from scriptkit import evaluation_inputs, run_script
from trainkit import make_folder

from swinlite import files

# (script, model option, a folder of numbered drawings it writes in --output-dir)
DRAWING = [("detect", "--checkpoint", "images"), ("detect", "--onnx", "images"),
           ("segment", "--checkpoint", "labels"), ("segment", "--onnx", "overlays")]  # fmt: skip
IDS = [f"{script}{flag}" for script, flag, _ in DRAWING]


def _image(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(path)
    return path


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def _record(out: Path, drawn: str) -> None:
    """Write beside ``out/drawn`` the record of the run its script writes with it, sources.json naming its drawings
    (files._check_recorded): without it the folder is the user's."""
    script = next(names for scripts in files.OUTPUT_DIR_FILES.values() for names in scripts.values() if drawn in names)
    for name in script:
        if name not in files.DRAWINGS:
            (out / name).write_bytes(b"an earlier run's")
    drawings = {p.name: "a.png" for p in (out / drawn).iterdir()}  # named by the record (files.DrawingRecord)
    (out / files.RECORD).write_bytes(files.json_bytes(drawings))


def _raw(tmp_path: Path) -> Path:
    """A raw checkpoint of a 3-class pico model (its initial weights)."""
    torch.manual_seed(0)
    torch.save(timm.create_model(PICO, num_classes=3).state_dict(), tmp_path / "raw.pth")
    return tmp_path / "raw.pth"


def _run(capsys, script: str, flag: str, model: Path, inputs: list[Path], out: Path, *extra: str) -> str:
    """The one error line of a run that must be refused (exit code 2)."""
    code = run_script(script, [flag, model, "--input", *inputs, "--output-dir", out, *extra])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["", "overwrite"])
@pytest.mark.parametrize("where", ["file", "folder", "link"])
@pytest.mark.parametrize(("script", "flag", "drawn"), DRAWING, ids=IDS)
def test_an_input_inside_a_folder_the_run_writes_is_refused(tmp_path, capsys, script, flag, drawn, where, overwrite):
    """Once, with --overwrite, detect.py emptied P/images, the input P/images/photo.jpg and the user's img.png with
    it, then skipped the input as unreadable."""
    out, model = tmp_path / "P", tmp_path / "model.file"
    model.write_bytes(b"never read: the run is refused before")
    _image(out / drawn / "img.png")
    photo = _image(out / drawn / "sub" / "photo.png")
    if where == "link":  # a folder elsewhere holding a link into it: emptying the folder would break the link
        (tmp_path / "elsewhere").mkdir()
        os.symlink(photo, tmp_path / "elsewhere" / "photo.png")
    given = {"file": photo, "folder": photo.parent, "link": tmp_path / "elsewhere"}[where]
    before = _files(tmp_path)
    error = _run(capsys, script, flag, model, [given], out, *overwrite)
    shown = f"{given / 'photo.png'} (a link to {photo})" if where == "link" else given
    assert f"the input {shown} lies inside {out / drawn}, which this run writes" in error
    assert _files(tmp_path) == before


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["", "overwrite"])
@pytest.mark.parametrize(("script", "flag", "drawn"), DRAWING, ids=IDS)
def test_files_no_run_wrote_are_named_and_kept(tmp_path, capsys, script, flag, drawn, overwrite):
    """They were called "an earlier run's images", and --overwrite removed them."""
    out, model = tmp_path / "P", tmp_path / "model.file"
    model.write_bytes(b"never read: the run is refused before")
    _image(out / drawn / "00003_a.png")  # as a run names its drawings
    mine, image = _image(out / drawn / "img.png"), _image(tmp_path / "in" / "a.png")
    before = _files(tmp_path)
    error = _run(capsys, script, flag, model, [image], out, *overwrite)
    assert f"{out / drawn} holds files no run wrote there ({mine}" in error
    assert "earlier run" not in error and _files(tmp_path) == before


@pytest.mark.parametrize("hidden", [".DS_Store", ".ipynb_checkpoints/00003_a-checkpoint.png"])
@pytest.mark.parametrize(("script", "flag", "drawn"), DRAWING, ids=IDS)
def test_hidden_names_in_a_drawings_folder_are_left_out(tmp_path, capsys, script, flag, drawn, hidden):
    """OS and tool metadata in a folder of drawings (macOS's .DS_Store, Jupyter's .ipynb_checkpoints/): --overwrite
    was refused, naming them as files no run wrote. Hidden names are left out as input listing leaves them out: the
    run is refused only as an earlier run's folder without --overwrite, and with it goes on (to read the model, here
    a placeholder, which is refused next: nothing is removed before)."""
    out, model = tmp_path / "P", tmp_path / "model.file"
    model.write_bytes(b"never read: the run is refused before")
    _image(out / drawn / "00003_a.png")
    (out / drawn / hidden).parent.mkdir(exist_ok=True)
    (out / drawn / hidden).write_bytes(b"metadata")
    _record(out, drawn)
    image = _image(tmp_path / "in" / "a.png")
    before = _files(tmp_path)
    error = _run(capsys, script, flag, model, [image], out)
    assert "holds an earlier run's" in error and f"{drawn}," in error and "no run wrote" not in error
    error = _run(capsys, script, flag, model, [image], out, "--overwrite")
    assert "no run wrote" not in error and "earlier run" not in error and "model.file" in error
    assert _files(tmp_path) == before


def test_extract_refuses_a_listed_image_inside_its_features_folder(tmp_path, capsys):
    out = tmp_path / "feats"
    image = _image(out / "features" / "x.png")
    (tmp_path / "list.txt").write_text(f"{image}\n")
    (tmp_path / "model.file").write_bytes(b"never read")
    argv = ["--checkpoint", tmp_path / "model.file", "--input", tmp_path / "list.txt", "--output", out]
    assert run_script("extract_features", argv) == 2
    assert f"the input {image} lies inside {out / 'features'}, which this run writes" in capsys.readouterr().err


# an evaluation script -> (a file of its results found in --output-dir, its data arguments)
EVALUATIONS = {
    "evaluate": ("confusion_matrix.png", ["--data-dir", "data"]),
    "evaluate_detection": ("detections.json", ["--data-dir", "data"]),  # as detect.py left it there
    "evaluate_segmentation": ("per_class_iou.csv", ["--images", "data", "--masks", "data"]),  # eval.json: any task's
}


@pytest.mark.parametrize("script", EVALUATIONS)
def test_an_evaluation_into_a_folder_holding_results_is_refused_unless_overwrite(
    tmp_path, capsys, segmenter_file, script
):
    """evaluate_detection.py replaced the detections.json of a detect.py run in its --output-dir without a word."""
    found, data = EVALUATIONS[script]
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / found).write_bytes(b"an earlier run's")
    (tmp_path / "model.file").write_bytes(b"never read: the run is refused before")
    checkpoint = evaluation_inputs(tmp_path, script, segmenter_file) or tmp_path / "model.file"
    argv = ["--checkpoint", checkpoint, *(tmp_path / a if a == "data" else a for a in data)]
    if script == "evaluate":  # it checks the checkpoint and the data against its flags before the folder
        argv = ["--checkpoint", _raw(tmp_path), "--model", PICO, "--data-dir", make_folder(tmp_path / "data", 3, 1)]
    assert run_script(script, [*argv, "--output-dir", tmp_path / "out"]) == 2
    error = capsys.readouterr().err
    assert f"--output-dir {tmp_path / 'out'} holds an earlier run's {found}: pass --overwrite to replace" in error
    assert (tmp_path / "out" / found).read_bytes() == b"an earlier run's"


# a script that writes an --output-dir -> its data arguments ("in": a folder of one image; "data": never read)
OUTPUT_DIR_SCRIPTS = {
    "detect": ["--input", "in"],
    "segment": ["--input", "in"],
    "evaluate": ["--data-dir", "data"],
    "evaluate_detection": ["--data-dir", "data"],
    "evaluate_segmentation": ["--images", "data", "--masks", "data"],
}


def _refused(tmp_path: Path, capsys, script: str, *extra: object, segmenter: Path | None = None) -> str:
    """The one error line of ``script`` into tmp_path/out, refused before its model (a placeholder) is read (but
    evaluate_segmentation.py's, ``segmenter``: it checks its flags against it before the folder)."""
    _image(tmp_path / "in" / "a.png")
    (tmp_path / "model.file").write_bytes(b"never read: the run is refused before")
    checkpoint = evaluation_inputs(tmp_path, script, segmenter) or tmp_path / "model.file"
    data = [tmp_path / a if a in ("in", "data") else a for a in OUTPUT_DIR_SCRIPTS[script]]
    argv = ["--checkpoint", checkpoint, *data, "--output-dir", tmp_path / "out", *extra]
    assert run_script(script, argv) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize(
    ("script", "found"),
    [("detect", "eval.json"), ("segment", "per_class_iou.csv"), ("evaluate_detection", "images/00000_a.png"),
     ("evaluate_detection", "sources.json"), ("evaluate_segmentation", "labels/00000_a.png")],
)  # fmt: skip
def test_the_other_script_of_a_tasks_results_are_refused_unless_overwrite(
    tmp_path, capsys, segmenter_file, script, found
):
    """evaluate_detection.py --overwrite into detect.py's folder (of another checkpoint) replaced detections.json and
    left the drawings and sources.json beside its eval.json; detect.py left an evaluation's eval.json beside its
    drawings. The two scripts of a task count each other's results as an earlier run's (eval.json and sources.json,
    which other tasks write too, beside the task's detections.json)."""
    (tmp_path / "out" / found).parent.mkdir(parents=True)
    (tmp_path / "out" / found).write_bytes(b"an earlier run's")
    shared = found in files.shared_names("detection")
    if shared:
        (tmp_path / "out" / "detections.json").write_bytes(b"an earlier run's")
    drawn = found.split("/")[0] in files.DRAWINGS
    if drawn:  # with the record of the run beside it: alone, the folder is the user's (test_lone_drawings)
        _record(tmp_path / "out", found.split("/")[0])
    error = _refused(tmp_path, capsys, script, segmenter=segmenter_file)
    held = [p.name for p in sorted((tmp_path / "out").iterdir())]
    assert f"--output-dir {tmp_path / 'out'} holds an earlier run's " in error and ": pass --overwrite" in error
    assert all(name in error for name in held)
    assert (tmp_path / "out" / found).read_bytes() == b"an earlier run's"


@pytest.mark.parametrize(
    ("script", "theirs"),
    [("segment", "images/mine.png"), ("detect", "labels/mine.txt"), ("evaluate", "images/mine.png"),
     ("evaluate", "sources.json"), ("evaluate", "classes.csv"), ("evaluate_segmentation", "detections.json")],
)  # fmt: skip
def test_another_tasks_names_are_the_users_files(tmp_path, capsys, script, theirs):
    """Counting every script's names for every script refused segment.py into a dataset root (its input inside
    images/, detect.py's drawings folder), detect.py beside a YOLO labels/ folder, and evaluate.py --overwrite
    removed a user's sources.json and classes.csv: they are another task's names, left alone."""
    (tmp_path / "out" / theirs).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "out" / theirs).write_bytes(b"the user's")
    (tmp_path / "model.file").write_bytes(b"not a checkpoint: read once the folder is accepted")
    inputs = tmp_path / "out" / "images" if script == "segment" else tmp_path / "in"  # segment.py: a dataset root
    _image(inputs / "a.png")
    data = [inputs if a == "in" else tmp_path / a if a == "data" else a for a in OUTPUT_DIR_SCRIPTS[script]]
    _image(tmp_path / "data" / "val" / "c0" / "a.png")  # evaluate.py reads its split's folders first
    argv = ["--checkpoint", tmp_path / "model.file", *data, "--output-dir", tmp_path / "out", "--overwrite"]
    assert run_script(script, argv) == 2
    error = capsys.readouterr().err
    assert "--output-dir" not in error and "model.file" in error  # refused for the checkpoint, not the folder
    assert (tmp_path / "out" / theirs).read_bytes() == b"the user's"


@pytest.mark.parametrize(
    ("task", "theirs"),
    [("classification", "sources.json"), ("classification", "classes.csv"), ("classification", "detections.json"),
     ("segmentation", "detections.json"), ("detection", "classes.csv")],
)  # fmt: skip
def test_overwrite_removes_no_file_of_another_tasks_name(tmp_path, task, theirs):
    """What --overwrite removes, once the evaluation's scores are computed: evaluate.py removed a user's sources.json
    and classes.csv beside the checkpoint (segment.py's names), as an earlier run's."""
    (tmp_path / theirs).write_bytes(b"the user's")
    assert files.check_output_dir(task, tmp_path, [], overwrite=True) == []


@pytest.mark.parametrize(("script", "drawn"), [("evaluate_detection", "images"), ("evaluate_segmentation", "labels")])
def test_an_evaluation_keeps_the_users_files_in_a_drawings_folder_and_inputs_in_one(
    tmp_path, capsys, segmenter_file, script, drawn
):
    """--overwrite removes detect.py's and segment.py's drawings folders with an evaluation's own results: one that
    holds files no run wrote is refused, and so is an input inside one (emptying it would remove the input)."""
    mine = _image(tmp_path / "out" / drawn / "mine.png")
    error = _refused(tmp_path, capsys, script, "--overwrite", segmenter=segmenter_file)
    assert f"{tmp_path / 'out' / drawn} holds files no run wrote there ({mine}" in error
    mine.unlink()
    shutil.rmtree(tmp_path / "data")  # the data, made where the evaluation checks its paths first: into the folder
    data = tmp_path / "out" / drawn / "data"
    data.mkdir(parents=True)
    (tmp_path / "data").symlink_to(data)
    error = _refused(tmp_path, capsys, script, "--overwrite", segmenter=segmenter_file)
    assert f"lies inside {tmp_path / 'out' / drawn}, which this run writes or --overwrite empties" in error
    assert data.is_dir()
