"""extract_features.py and visualize.py write an --output folder of their own: not a training run's (``train.py
--overwrite`` replaced the weights and left the features and plots of the old ones beside them), nor one holding
another script's outputs (each wrote beside the other's, and beside an evaluation's). Each is refused before any work,
so placeholders stand for the run's files and the other scripts' outputs."""

import os
from pathlib import Path

import numpy as np
import pytest
from pico import PICO
from PIL import Image
from scriptkit import run_script

import swinlite  # noqa: F401  (registers the models)

RUN_FILES = {"config.yaml": "model: {}\n", "best.safetensors": "the run's", "resume.pt": "the run's"}
# what the other scripts leave in a folder: the files each one is refused beside
OUTPUTS = {
    "extract_features": {"settings.json": "{}", "features/a.png.safetensors": "features"},
    "visualize": {"bias_stage0.png": "png", "features.png": "png"},
    "evaluate": {"eval.json": "{}", "confusion_matrix.png": "png"},
}


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def _argv(script: str, tmp_path: Path, weights: Path, out: Path) -> list[object]:
    image = tmp_path / "a.png"
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(image)
    given = ["--input", image, "--no-progress"] if script == "extract_features" else ["--image", image, "--overwrite"]
    return ["--model", PICO, "--checkpoint", weights, "--output", out, *given]


@pytest.mark.parametrize("given", ["as_it_is", "through_a_link"])
@pytest.mark.parametrize(("script", "example"), [("extract_features", "features"), ("visualize", "plots")])
def test_a_training_runs_folder_is_refused(tmp_path, capsys, initial_weights, script, example, given):
    run = tmp_path / "run"
    run.mkdir()
    _write(run, RUN_FILES)
    out = run if given == "as_it_is" else tmp_path / "alias"
    if given == "through_a_link":
        os.symlink(run, out)
    argv = _argv(script, tmp_path, initial_weights(PICO), out)
    before = _files(tmp_path)
    assert run_script(script, argv) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: --output {out} is a training run's folder (its --overwrite replaces the weights, and would leave "
        f"these outputs of the old ones): choose another --output, e.g. {run.resolve().parent / f'run_{example}'}"
    ]
    assert _files(tmp_path) == before


@pytest.mark.parametrize(("script", "example"), [("extract_features", "features"), ("visualize", "plots")])
def test_the_folder_suggested_beside_a_training_run_is_its_own(tmp_path, initial_weights, script, example):
    """The folder the refusal suggests, beside the run (inside it, the outputs outlived the weights they were of when
    the run was resumed or started over)."""
    run = tmp_path / "run"
    run.mkdir()
    _write(run, RUN_FILES)
    assert run_script(script, _argv(script, tmp_path, initial_weights(PICO), tmp_path / f"run_{example}")) == 0
    assert any((tmp_path / f"run_{example}").iterdir())


@pytest.mark.parametrize(
    ("script", "other"),
    [("extract_features", "visualize"), ("extract_features", "evaluate"), ("visualize", "extract_features"),
     ("visualize", "evaluate")],
)  # fmt: skip
def test_a_folder_holding_another_scripts_outputs_is_refused(tmp_path, capsys, initial_weights, script, other):
    """visualize.py even with --overwrite: it replaces an earlier run of its own, not another script's outputs."""
    out = tmp_path / "out"
    out.mkdir()
    _write(out, OUTPUTS[other])
    argv = _argv(script, tmp_path, initial_weights(PICO), out)
    before = _files(tmp_path)
    assert run_script(script, argv) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    names = ", ".join(Path(name).parts[0] for name in OUTPUTS[other])
    assert errors == [
        f"error: --output {out} holds another script's outputs ({names}): {script}.py writes a folder of its own; "
        "choose another --output"
    ]
    assert _files(tmp_path) == before
