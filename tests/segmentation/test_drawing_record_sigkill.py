"""segment.py killed (kill -9) after writing its record of the run (sources.json) and before its first PNG left
sources.json alone in its --output-dir; the same command again refused it as perhaps another task's, and the user had
to move it by hand. The record names its script: the rerun takes it for an earlier run's output (--overwrite replaces
it), as a killed run's PNGs (test_segment_killed_run.py)."""

import json
import os
import signal
from pathlib import Path

from forkkit import forked, killed
from scriptkit import run_script


def _killed_at_first_png(segment: list[object]) -> int:
    """segment.py, its first PNG write killing it (SIGKILL: no handler, no cleanup): after the record, before any
    drawing (in a forked child of this process)."""
    from swinlite import files

    files.atomic_write_png = lambda path, image: os.kill(os.getpid(), signal.SIGKILL)
    return run_script("segment", segment)


def test_a_rerun_replaces_the_record_its_killed_run_left_alone(trained, tmp_path: Path, capsys):
    data, run = trained
    images = sorted((data / "images" / "validation").glob("*.png"))[:2]
    out = tmp_path / "out"
    segment = ["--checkpoint", run / "best.safetensors", "--input", *images, "--output-dir", out]
    status, output = forked(lambda: _killed_at_first_png(segment))
    assert killed(status), output
    assert sorted(p.name for p in out.iterdir()) == [".lock", "sources.json"]  # its lock: the next run takes it over

    assert run_script("segment", segment) == 2  # an earlier run's: refused without --overwrite, as any
    assert "holds an earlier run's sources.json: pass --overwrite" in capsys.readouterr().err
    assert run_script("segment", [*segment, "--overwrite"]) == 0
    sources = json.loads((out / "sources.json").read_text())
    assert sorted(sources) == sorted(p.name for p in (out / "overlays").iterdir()) and len(sources) == 2
    assert sorted(p.name for p in out.iterdir()) == ["classes.csv", "labels", "overlays", "sources.json"]


def test_detect_pys_lone_record_is_refused(trained, tmp_path: Path, capsys):
    data, run = trained
    out = tmp_path / "out"
    out.mkdir()
    (out / "sources.json").write_text('{"script": "detect.py", "00000_a.png": "a.png"}\n')
    image = sorted((data / "images" / "validation").glob("*.png"))[0]
    segment = ["--checkpoint", run / "best.safetensors", "--input", image, "--output-dir", out, "--overwrite"]
    assert run_script("segment", segment) == 2
    assert "holds sources.json alone, the record of a detect.py run (killed before its first drawing)" in (
        capsys.readouterr().err
    )
    assert [p.name for p in out.iterdir()] == ["sources.json"]
