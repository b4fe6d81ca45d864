"""scripts/detect.py --overwrite removes an earlier run's outputs only once it has a drawing to write: a run whose
every image is unusable exits 2 and leaves them byte for byte; one that works replaces them whole."""

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scriptkit import run_script

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the data's quirks warn; test_data checks those


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too), by its path relative to it -> its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _empty(folder: Path) -> Path:
    (folder / "empty.png").write_bytes(b"")
    return folder / "empty.png"


def _thin(folder: Path) -> Path:
    Image.fromarray(np.zeros((1, 4000, 3), np.uint8)).save(folder / "thin.png")  # too thin for the resize
    return folder / "thin.png"


@pytest.mark.parametrize("unusable", [_empty, _thin], ids=["0-byte", "4000x1"])
def test_overwrite_keeps_earlier_outputs_until_an_image_is_drawn(unusable, trained, tmp_path: Path, capsys):
    coco, run = trained
    val, out, bad = shutil.copytree(coco / "val2017", tmp_path / "val"), tmp_path / "out", tmp_path / "bad"
    bad.mkdir()
    detect = ["--checkpoint", run / "best.safetensors", "--output-dir", out, "--overwrite", "--input"]
    assert run_script("detect", [*detect, val]) == 0
    (out / "eval.json").write_text("{}\n")  # another script's output: replaced with the rest
    before = _files(out)
    assert len([n for n in before if n.startswith("images/")]) > 1

    assert run_script("detect", [*detect, unusable(bad)]) == 2
    assert "none of the 1 images could be used" in capsys.readouterr().err
    assert _files(out) == before

    one = sorted(val.glob("*.png"))[0]
    assert run_script("detect", [*detect, unusable(bad), one]) == 0  # one usable image: the earlier run's go whole
    after = _files(out)
    assert sorted(after) == ["detections.json", "images/00001_" + one.name, "sources.json"]
