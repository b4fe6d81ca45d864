"""Every script that writes an output folder holds its lock (swinlite.lock.OutputLock, as training and
extract_features.py do) from the folder's checks to its last file: a second segment.py --overwrite into a folder a
first one wrote removed part of its files (both runs then failed or lied), two detect.py runs left detections.json of
one input beside drawings of the other. A run into a held folder is refused naming the holder and changes nothing; a
lock file left by a run that died is taken over with a warning, and is no output of any run to the folder's checks."""

import os
import socket
from pathlib import Path

import numpy as np
import pytest
from pico import PICO
from PIL import Image
from scriptkit import evaluation_inputs, run_script
from trainkit import make_folder

import swinlite.visualize
from swinlite import files
from swinlite.lock import LOCK_FILE, OutputLock

# (script, its model option, its data arguments: "in" a folder of one image, "data" never read, "classes" a class
# folder layout) -> id
CASES = {
    "detect--checkpoint": ("detect", "--checkpoint", ["--input", "in"]),
    "detect--onnx": ("detect", "--onnx", ["--input", "in"]),
    "segment--checkpoint": ("segment", "--checkpoint", ["--input", "in"]),
    "segment--onnx": ("segment", "--onnx", ["--input", "in"]),
    "evaluate": ("evaluate", "--checkpoint", ["--data-dir", "classes"]),
    "evaluate_detection": ("evaluate_detection", "--checkpoint", ["--data-dir", "data"]),
    "evaluate_segmentation": ("evaluate_segmentation", "--checkpoint", ["--images", "data", "--masks", "data"]),
    "visualize": ("visualize", "--checkpoint", []),
}


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _argv(tmp_path: Path, case: str, out: Path | None, weights: Path, segmenter: Path) -> list[object]:
    """The arguments of a run of ``case`` that reaches its output folder (models are placeholders where the script
    reads them after the folder's checks); ``out`` None: the evaluation's default folder, the checkpoint's."""
    script, flag, data = CASES[case]
    for folder in ("in", "run"):
        (tmp_path / folder).mkdir()
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(tmp_path / "in" / "a.png")
    model = tmp_path / "run" / "best.safetensors"
    model.write_bytes(b"never read: the run is refused before")
    model = evaluation_inputs(tmp_path, script, segmenter) or model
    if script in ("evaluate", "visualize"):  # they read the model before the folder
        model, data = weights, [*data, "--model", PICO]
    if script == "evaluate":
        make_folder(tmp_path / "classes", 10, 1, splits=("val",))  # the initial weights: 10 classes
    given = [tmp_path / a if a in ("in", "data", "classes") else a for a in data]
    option = "--output" if script == "visualize" else "--output-dir"
    return [flag, model, *given, *([option, out] if out else []), "--overwrite"]


@pytest.mark.parametrize("case", CASES)
def test_a_run_into_a_held_folder_is_refused_and_changes_nothing(
    tmp_path, capsys, initial_weights, segmenter_file, case
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "eval.json").write_bytes(b"the first run's")  # --overwrite would remove it
    argv = _argv(tmp_path, case, out, initial_weights(PICO), segmenter_file)
    with OutputLock(out, "segment.py run", "--output-dir"):
        before = _files(tmp_path)
        assert run_script(CASES[case][0], argv) == 2
        assert _files(tmp_path) == before
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    option = "--output" if case == "visualize" else "--output-dir"
    holder = f"segment.py run (pid {os.getpid()} on {socket.gethostname()}, started "
    assert len(errors) == 1 and errors[0].startswith(f"error: output folder {out} is in use by another {holder}")
    assert errors[0].endswith(f"); wait for it to finish or choose another {option}")


def test_an_evaluation_beside_a_running_trainings_checkpoint_is_refused(tmp_path, capsys, segmenter_file):
    argv = _argv(tmp_path, "evaluate_detection", None, tmp_path / "unused", segmenter_file)
    with OutputLock(tmp_path / "run", "training run", "--output-dir"):
        before = _files(tmp_path)
        assert run_script("evaluate_detection", argv) == 2
        assert _files(tmp_path) == before
    error = capsys.readouterr().err
    assert f"error: output folder {tmp_path / 'run'} is in use by another training run (pid {os.getpid()}" in error
    assert "wait for it to finish or choose another --output-dir" in error


def test_a_dead_runs_lock_is_taken_over_and_a_finished_run_leaves_none(tmp_path, initial_weights, monkeypatch):
    """visualize.py's runs; the bias maps' drawing (test_visualize.py's) replaced by a stand-in of their files."""
    monkeypatch.setattr(
        swinlite.visualize, "bias_pngs", lambda model: {f"bias_stage{i}.png": b"drawn" for i in range(4)}
    )
    out = tmp_path / "plots"
    out.mkdir()
    (out / LOCK_FILE).write_text("visualize.py run (pid 1 on elsewhere, started 2026-01-01 00:00:00)")
    argv = ["--model", PICO, "--checkpoint", initial_weights(PICO), "--output", out]
    with pytest.warns(
        UserWarning, match=r"plots/\.lock was left by a run that ended without releasing it .*taken over"
    ):
        assert run_script("visualize", argv) == 0
    assert not (out / LOCK_FILE).exists() and (out / "bias_stage0.png").is_file()
    assert run_script("visualize", [*argv, "--overwrite"]) == 0  # the first run's own lock is gone with it


@pytest.mark.parametrize("task", files.OUTPUT_DIR_FILES)
def test_a_lock_file_is_no_output_to_the_folders_checks(tmp_path, task):
    (tmp_path / LOCK_FILE).write_text("detect.py run (pid 1 on elsewhere, started 2026-01-01 00:00:00)")
    assert files.check_output_dir(task, tmp_path, [], overwrite=False) == []


def test_a_hard_link_copy_of_a_folder_has_a_lock_of_its_own(tmp_path):
    """`cp -al runs/a runs/b` of a killed run shares its .lock: b's run locked a's file, refused a's resume while it
    ran ("in use by another training run") and left its own record in a's folder."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / LOCK_FILE).write_text("training run (pid 1 on host, started earlier)")  # a killed run's, left behind
    os.link(a / LOCK_FILE, b / LOCK_FILE)
    copy = OutputLock(b, "training run", "--output-dir")
    copy.acquire()
    try:
        original = OutputLock(a, "training run", "--output-dir")
        original.acquire()  # not refused: the copy holds a file of its own
        original.release()
        assert copy.stale is None  # the copy's lock is new, not a's record taken over
    finally:
        copy.release()
