"""detect.py's note when no detection is kept: with boxes below --score-thresh, the best score; with a detector that
kept no box at all (none scored its model.score_thresh), that, naming the threshold. It said "the best scored
0.0000", a score the model never gave."""

import json
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import save_file
from scriptkit import load_script, run_script

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the data's quirks warn; test_data checks those


def _with_score_thresh(checkpoint: Path, path: Path, score_thresh: float) -> Path:
    """A copy of ``checkpoint`` whose detector keeps only boxes scoring ``score_thresh`` or more."""
    with safe_open(str(checkpoint), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    detector = json.loads(meta["detector"]) | {"score_thresh": score_thresh}
    save_file(tensors, str(path), metadata=meta | {"detector": json.dumps(detector)})
    return path


def test_a_detector_that_kept_no_box_says_so_naming_its_threshold(trained, tmp_path: Path, capsys):
    coco, run = trained
    checkpoint = _with_score_thresh(run / "last.safetensors", tmp_path / "strict.safetensors", 1.0)
    argv = ["--checkpoint", checkpoint, "--input", coco / "val2017", "--output-dir", tmp_path / "out"]
    assert run_script("detect", argv) == 0
    assert json.loads((tmp_path / "out" / "detections.json").read_text()) == []
    err = capsys.readouterr().err
    assert "note: the model kept no box: none scored model.score_thresh 1.0 or more\n" in err
    assert "the best scored" not in err


def test_the_onnx_path_names_its_runs_threshold(tmp_path: Path, capsys):
    """An ONNX file does not record model.score_thresh."""
    assert load_script("detect").finish(tmp_path, [], [], 1, None, 0.5, None, {}) == 0
    assert capsys.readouterr().err == "note: the model kept no box: none scored its run's model.score_thresh or more\n"


def test_best_score_is_none_until_a_box_is_kept():
    best_score = load_script("detect").best_score
    assert best_score(None, []) is None and best_score(None, [0.2, 0.3]) == 0.3
    assert best_score(0.4, []) == 0.4 and best_score(0.4, [0.1]) == 0.4 and best_score(0.1, [0.4]) == 0.4
