"""scripts/segment.py --overwrite removes an earlier run's outputs only once it has an image's PNGs to write: a run
whose every image is unusable exits 2 and leaves them byte for byte; one that works replaces them whole."""

import shutil
from pathlib import Path

import pytest
from scriptkit import run_script


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too), by its path relative to it -> its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _empty(images: Path, folder: Path) -> list[object]:
    (folder / "empty.png").write_bytes(b"")
    return ["--input", folder / "empty.png"]


def _too_thin(images: Path, folder: Path) -> list[object]:
    return ["--input", *sorted(images.glob("*.png"))[:3], "--ratios", "1e-3"]  # every view thinner than a patch


@pytest.mark.parametrize("unusable", [_empty, _too_thin], ids=["0-byte", "ratios-1e-3"])
def test_overwrite_keeps_earlier_outputs_until_an_image_is_segmented(unusable, trained, tmp_path: Path, capsys):
    data, run = trained
    images, out, bad = shutil.copytree(data / "images" / "validation", tmp_path / "val"), tmp_path / "out", tmp_path
    segment = ["--checkpoint", run / "best.safetensors", "--output-dir", out, "--overwrite"]
    assert run_script("segment", [*segment, "--input", images]) == 0
    (out / "eval.json").write_text("{}\n")  # another script's output: replaced with the rest
    before = _files(out)
    assert len([n for n in before if n.startswith("labels/")]) > 1

    failed = unusable(images, bad)
    assert run_script("segment", [*segment, *failed]) == 2
    assert "could be used" in capsys.readouterr().err
    assert _files(out) == before

    one = sorted(images.glob("*.png"))[-1]
    assert run_script("segment", [*segment, "--input", one]) == 0  # it works: the earlier run's outputs go whole
    name = "00000_" + one.name
    assert sorted(_files(out)) == ["classes.csv", f"labels/{name}", f"overlays/{name}", "sources.json"]
