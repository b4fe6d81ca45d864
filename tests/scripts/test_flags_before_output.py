"""evaluate_detection.py and evaluate_segmentation.py checked their output folder before their data and flags: into
a folder holding an earlier evaluation, a missing annotation file or a --stride longer than the checkpoint's crop
first asked for --overwrite, and with it failed on those; a --data-dir that is a file was said before the folder, a
missing one after it. The data's paths, and evaluate_segmentation.py's checkpoint and test flags, are checked first
(as evaluate.py's since 9e591f2); nothing is removed before."""

from pathlib import Path

import pytest
from PIL import Image
from scriptkit import run_script

OVERWRITE = pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["", "overwrite"])


def _earlier(out: Path, *names: str) -> dict[str, bytes]:
    out.mkdir()
    for name in names:
        (out / name).write_bytes(b"an earlier evaluation's")
    return {p.name: p.read_bytes() for p in out.iterdir()}


@OVERWRITE
@pytest.mark.parametrize("data", ["missing", "file"])
def test_evaluate_detection_names_its_data_before_the_output_folder(tmp_path, capsys, overwrite, data):
    out = tmp_path / "out"
    before = _earlier(out, "eval.json", "detections.json")
    (tmp_path / "model.file").write_bytes(b"never read: the data is refused first")
    root = tmp_path / "data"
    if data == "file":
        root.write_bytes(b"an archive not yet unpacked")
    argv = ["--checkpoint", tmp_path / "model.file", "--data-dir", root, "--output-dir", out, *overwrite]
    assert run_script("evaluate_detection", argv) == 2
    error = capsys.readouterr().err
    expected = "is a file; expected a folder" if data == "file" else f"{root} does not exist; expected a folder in COCO"
    assert expected in error and "--output-dir" not in error
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@OVERWRITE
@pytest.mark.parametrize(
    ("flags", "said"),
    [(["--mode", "slide", "--stride", "1000", "1000"], "--stride"), ([], "image folder")],
    ids=["stride", "data"],
)  # fmt: skip
def test_evaluate_segmentation_names_its_flags_and_data_before_the_output_folder(
    tmp_path, capsys, segmenter_file, overwrite, flags, said
):
    out = tmp_path / "out"
    before = _earlier(out, "eval.json", "per_class_iou.csv")
    data = tmp_path / "missing" if said == "image folder" else tmp_path
    argv = ["--checkpoint", segmenter_file, "--images", data, "--masks", data, *flags, "--output-dir", out]
    assert run_script("evaluate_segmentation", [*argv, *overwrite]) == 2
    error = capsys.readouterr().err
    assert said in error and "--output-dir" not in error, error
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@OVERWRITE
@pytest.mark.parametrize(("script", "earlier"), [("detect", "detections.json"), ("segment", "classes.csv")])
@pytest.mark.parametrize("flag", ["--checkpoint", "--onnx"])
@pytest.mark.parametrize("given", ["missing", "run_folder"])
def test_detect_and_segment_name_a_model_path_that_is_no_file_before_the_output_folder(
    tmp_path, capsys, overwrite, script, earlier, flag, given
):
    """detect.py and segment.py read their model after the output folder's checks (a placeholder file stands for it in
    the tests of those): a missing one is said before them, and a run's folder (it passed as existing, and reading it
    said it did not exist) as no file, naming the run's weights where a checkpoint is expected."""
    out = tmp_path / "out"
    before = _earlier(out, earlier, "sources.json")
    (tmp_path / "in").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "in" / "a.png")
    model = tmp_path / ("none" if given == "missing" else "run")
    if given == "run_folder":
        model.mkdir()
        (model / "best.safetensors").write_bytes(b"never read")
    argv = [flag, model, "--input", tmp_path / "in", "--output-dir", out, *overwrite]
    assert run_script(script, argv) == 2
    error = capsys.readouterr().err
    hint = f" (did you mean {str(model / 'best.safetensors')!r}?)" if flag == "--checkpoint" else ""
    said = "does not exist" if given == "missing" else f"is not a file{hint}"
    assert error == f"error: {flag} {str(model)!r} {said}\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
