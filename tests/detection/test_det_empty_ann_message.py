"""evaluate_detection.py's refusal of data with nothing to score says why, naming the file as the user gave it; its
range checks name only the option at fault."""

import json
from pathlib import Path

import pytest
from PIL import Image
from scriptkit import run_script

from swinlite.detection.data import CocoDetection, categories_of, load_split
from swinlite.detection.evaluation import check_scorable

BOX = {"bbox": [2, 2, 8, 8], "area": 64, "category_id": 1, "iscrowd": 0}


def _split(folder: Path, annotations: list[dict], missing: str | None = None) -> CocoDetection:
    """A two-image COCO split in ``folder`` (relative: as a user types it) holding ``annotations``; ``missing``: an
    image file not written (left out, with a warning)."""
    (folder / "images").mkdir(parents=True)
    names = ["a.png", "b.png"]
    for name in names:
        if name != missing:
            Image.new("RGB", (16, 16)).save(folder / "images" / name)
    data = {
        "images": [{"id": i, "file_name": name, "width": 16, "height": 16} for i, name in enumerate(names, 1)],
        "annotations": [{"id": i, **ann} for i, ann in enumerate(annotations, 1)],
        "categories": [{"id": 1, "name": "thing"}],
    }
    (folder / "empty.json").write_text(json.dumps(data))
    split = load_split(folder / "empty.json", folder / "images")
    return CocoDetection(split, categories_of(split), evaluation=True)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("annotations", "missing", "why"),
    [
        ([], None, "no annotation at all, so no object to score"),
        ([BOX | {"image_id": 2}], "b.png", r"no annotation on the images kept \(those left out are named in a "
         r"warning above\), so no object to score"),
        ([BOX | {"image_id": 1, "iscrowd": 1}], None, "no object to score on the images kept, only iscrowd or empty "
         "ones"),
    ],
    ids=["no-annotation", "annotations-only-on-images-left-out", "only-crowds"],
)  # fmt: skip
def test_the_refusal_says_why_and_names_the_file_as_given(tmp_path: Path, monkeypatch, annotations, missing, why):
    """A file of no annotation given by --ann said "the val annotations (...) hold no object to score on the images
    kept, only iscrowd or empty ones"."""
    monkeypatch.chdir(tmp_path)
    dataset = _split(Path("coco"), annotations, missing)
    with pytest.raises(ValueError, match=rf"^--ann coco/empty.json: {why}; the AP would be NaN$"):
        check_scorable(dataset, "val", "--ann")
    with pytest.raises(ValueError, match=rf"^the val annotations \(coco/empty.json\): {why}; the AP would be NaN$"):
        check_scorable(dataset, "val")


@pytest.mark.parametrize(
    ("options", "message"),
    [(["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
     (["--num-workers", "-1"], "--num-workers must be at least 0, got -1")],
)  # fmt: skip
def test_a_range_refusal_names_only_the_option_at_fault(options: list[str], message: str, capsys):
    """--num-workers -1 said "--batch-size must be at least 1, --num-workers at least 0"."""
    argv = ["--checkpoint", "best.safetensors", "--data-dir", "coco", *options]
    assert run_script("evaluate_detection", argv) == 2
    assert capsys.readouterr().err.startswith(f"error: {message} (see ")
