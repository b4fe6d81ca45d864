"""A segment.py run killed after its first label map (Ctrl-C, kill -9) left PNGs without its record of the run
(sources.json, classes.csv were written at its end), which a rerun with --overwrite refused as the user's: the user
had to clean up by hand. sources.json is written before the first PNG, naming the PNGs the run may write: the killed
run's PNGs are its, replaced by --overwrite."""

import json
from pathlib import Path

from scriptkit import interrupt_second_png, run_script


def test_overwrite_replaces_a_killed_runs_pngs(trained, tmp_path: Path, monkeypatch, capsys):
    data, run = trained
    images = sorted((data / "images" / "validation").glob("*.png"))[:2]
    out = tmp_path / "out"
    segment = ["--checkpoint", run / "best.safetensors", "--input", *images, "--output-dir", out]
    with monkeypatch.context() as patch:
        interrupt_second_png(patch)
        assert run_script("segment", segment) == 130
    assert [p.name for p in (out / "labels").iterdir()] == ["00000_" + images[0].name]
    assert not (out / "overlays").exists() and not (out / "classes.csv").exists()
    capsys.readouterr()

    assert run_script("segment", [*segment, "--overwrite"]) == 0
    sources = json.loads((out / "sources.json").read_text())
    assert sorted(sources) == sorted(p.name for p in (out / "overlays").iterdir()) and len(sources) == 2
    assert sorted(p.name for p in out.iterdir()) == ["classes.csv", "labels", "overlays", "sources.json"]
