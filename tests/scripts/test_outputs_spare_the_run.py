"""No script writes its output file over a file of a training run in the run's folder: ``predict.py --checkpoint
RUN/best.safetensors --output RUN/resume.pt`` wrote its CSV over the run's resume file (predict.py now writes only
a .csv name). Each is refused before any work, so placeholders stand for the run's files, the model and the ONNX
file."""

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scriptkit import run_script

# (script, its arguments with {out} for the output, a file of the run it is given as {out})
CASES = [
    ("predict", ["--checkpoint", "{run}/best.safetensors", "--output", "{out}", "{images}"], "metrics.csv"),
    ("predict", ["--onnx", "{run}/model.onnx", "--output", "{out}", "{images}"], "metrics.csv"),  # its only .csv
    ("export_onnx", ["--checkpoint", "{run}/best.safetensors", "--output", "{out}"], "resume.pt"),
    ("export_onnx", ["--checkpoint", "{run}/best.safetensors", "--output", "{out}"], "config.yaml"),
    ("export_onnx", ["--checkpoint", "{run}/best.safetensors", "--output", "{out}"], "scan.json.gz"),
    ("export_onnx", ["--checkpoint", "{run}/best.safetensors", "--output", "{out}"],
     "events.out.tfevents.1700000000.host.1.0"),
    ("export_onnx", ["--checkpoint", "{run}/best.safetensors", "--output", "{out}"], "ema.safetensors"),
    ("export_onnx", ["--checkpoint", "{run}/best.safetensors", "--output", "{out}"], "curves.png"),
    ("convert_checkpoint", ["{run}/resume.pt", "{out}"], "best.safetensors"),
    ("convert_checkpoint", ["{run}/best.safetensors", "{out}"], "last.safetensors"),
]  # fmt: skip


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.mark.parametrize("given", ["in_the_run", "through_a_linked_folder", "as_a_link"])
@pytest.mark.parametrize(("script", "argv", "name"), CASES, ids=[f"{s}-{n.split('.')[0]}" for s, _, n in CASES])
def test_an_output_that_is_a_file_of_a_training_run_is_refused(tmp_path, capsys, script, argv, name, given):
    """The run's file named as it is, through a link to the run folder, or as a link elsewhere to it (links are
    resolved, as for inputs): one error line naming it and the run, and no file is changed."""
    run, images = tmp_path / "run", tmp_path / "images"
    run.mkdir()
    for own in ("config.yaml", "best.safetensors", "resume.pt", "model.onnx"):  # a run that saved, its ONNX export
        (run / own).write_bytes(b"the run's: never read, the script is refused before")
    images.mkdir()
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(images / "a.png")
    out = {"in_the_run": run, "through_a_linked_folder": tmp_path / "alias", "as_a_link": tmp_path}[given] / name
    if given == "through_a_linked_folder":
        os.symlink(run, out.parent)
    elif given == "as_a_link":
        os.symlink(run / name, out)
    before = _files(tmp_path)
    code = run_script(script, [a.format(run=run, images=images, out=out) for a in argv])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    option = "output" if script == "convert_checkpoint" else "--output"
    shown = f"{out} (a link to {run / name})" if given == "as_a_link" else out
    assert code == 2 and errors == [
        f"error: {option} {shown} is a file of the training run in {run}: choose another {option}"
    ]
    assert _files(tmp_path) == before
