"""A segmentation run's resume state (resume.pt) given to extract_features.py or visualize.py: refused at once, naming
the run's weights files, rather than read through the classifier path (raw levels at the classifier's size, without
the run's norms, mean and std)."""

from pathlib import Path

import pytest
from scriptkit import run_script

PICO = "swinlite_pico_patch2_window4_32"


@pytest.mark.parametrize("model", [[], ["--model", PICO]], ids=["no-model", "model"])
@pytest.mark.parametrize(
    "script, options",
    [("extract_features", ["--input", "{image}", "--no-progress"]), ("visualize", ["--image", "{image}"])],
)
def test_resume_state_refused(trained, tmp_path: Path, capsys, script: str, options: list[str], model: list[str]):
    data, run = trained
    image = data / "images" / "validation" / "00.png"
    argv = ["--checkpoint", run / "resume.pt", *model, "--output", tmp_path / "out"]
    argv += [o.format(image=image) for o in options]
    assert run_script(script, argv) != 0
    err = capsys.readouterr().err
    assert f"{run / 'resume.pt'} is a segmentation run's resume state" in err
    assert f"give the run's weights, {run / 'best.safetensors'} or {run / 'last.safetensors'}" in err
    assert "out_norm=True" not in err
    assert not (tmp_path / "out").exists()
