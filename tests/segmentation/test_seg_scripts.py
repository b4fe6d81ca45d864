"""scripts/evaluate_segmentation.py and segment.py from the checkpoint alone, run in-process through their ``main``;
--help before torch loads."""

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from pico import PICO
from PIL import Image
from scriptkit import SCRIPTS, disk_full_after_first_file, load_script, script_env
from segkit import CLASSES, COLORS

from swinlite.io import read_metadata, save_safetensors
from swinlite.segmentation import predictor
from swinlite.segmentation.data import Labels
from swinlite.segmentation.inference import InferenceSettings


def test_evaluate_scores_the_split_as_the_run_did(trained, tmp_path: Path, capsys):
    data, run = trained
    argv = ["--checkpoint", str(run / "best.safetensors"), "--data-dir", str(data), "--output-dir", str(tmp_path)]
    assert load_script("evaluate_segmentation").main([*argv, "--num-workers", "0"]) == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    meta = read_metadata(run / "best.safetensors")
    assert abs(report["miou"] - meta["val_miou"]) < 1e-6  # the same weights, data and settings as the run's
    assert list(report["per_class"]) == list(CLASSES) and report["images"] == 6
    printed = capsys.readouterr().out
    assert all(name in printed for name in CLASSES) and f"mIoU {report['miou']:.2f}" in printed
    with open(tmp_path / "per_class_iou.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["class"] for r in rows] == list(CLASSES)
    assert np.nanmean([float(r["iou"] or "nan") for r in rows]) == pytest.approx(report["miou"], abs=1e-4)
    folders = {"image_dir": str(data / "images" / "validation"), "mask_dir": str(data / "annotations" / "validation")}
    recorded = {"weights": "raw", "data_dir": str(data), "split": "validation", "amp": "none"}
    assert report | recorded | folders == report  # recorded
    argv += ["--mode", "slide", "--ratios", "1.0", "1.5", "--flip"]  # the options run and are recorded
    with pytest.raises(ValueError, match="holds an earlier run's eval.json, per_class_iou.csv: pass --overwrite"):
        load_script("evaluate_segmentation").main([*argv, "--num-workers", "0"])
    assert load_script("evaluate_segmentation").main([*argv, "--num-workers", "0", "--overwrite"]) == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["test"]["mode"] == "slide" and report["test"]["ratios"] == [1.0, 1.5] and report["test"]["flip"]


def test_a_full_disk_before_the_last_file_leaves_no_eval_json(trained, tmp_path: Path, monkeypatch):
    """eval.json was written first: alone after a full disk, it refused every rerun, --overwrite's too. It is written
    last now, and per_class_iou.csv alone is this task's (--overwrite replaces it: test_output_dir_other_tasks.py)."""
    data, run = trained
    argv = ["--checkpoint", str(run / "best.safetensors"), "--data-dir", str(data), "--output-dir", str(tmp_path)]
    disk_full_after_first_file(monkeypatch, tmp_path)
    with pytest.raises(OSError, match="No space left on device"):
        load_script("evaluate_segmentation").main([*argv, "--num-workers", "0"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["per_class_iou.csv"]


def test_an_image_that_does_not_decode_is_left_out_of_the_evaluation(trained, tmp_path: Path):
    """A val image whose header reads (the scan passes) but whose pixels do not: the scores of the other pairs, as
    if the folder held only those (not the next pair counted twice in its place); eval.json's ``skipped`` names
    it."""
    data, run = trained
    argv = ["--checkpoint", str(run / "best.safetensors"), "--num-workers", "0"]
    for folder in ("broken", "without"):
        shutil.copytree(data, tmp_path / folder)
    path = tmp_path / "broken" / "images" / "validation" / "02.png"
    path.write_bytes(path.read_bytes()[:100])
    for pair in ("images", "annotations"):
        (tmp_path / "without" / pair / "validation" / "02.png").unlink()

    def evaluate(folder: str) -> dict:
        out = ["--data-dir", str(tmp_path / folder), "--output-dir", str(tmp_path / f"{folder}_eval")]
        assert load_script("evaluate_segmentation").main([*argv, *out]) == 0
        return json.loads((tmp_path / f"{folder}_eval" / "eval.json").read_text())

    with pytest.warns(UserWarning, match=r"pair .*02\.png, .*02\.png left out of the evaluation: unreadable"):
        broken = evaluate("broken")
    without = evaluate("without")
    assert without["skipped"] == [] and [s["path"] for s in broken["skipped"]] == [str(path)]
    assert broken["skipped"][0]["reason"].startswith("unreadable")
    folders = dict.fromkeys(("skipped", "data_dir", "image_dir", "mask_dir"))
    assert broken | folders == without | folders and broken["images"] == 5


def test_images_too_thin_for_the_test_scales_are_left_out_in_one_warning(trained, tmp_path: Path):
    """Two val images whose test views are thinner than the patch: each was its own warning as it was read (200 for
    the demo's at --ratios 0.01); now one names both, and the others are scored as without them."""
    data, run = trained
    data = shutil.copytree(data, tmp_path / "data")
    for name in ("thin_a", "thin_b"):
        Image.new("RGB", (600, 1)).save(data / "images" / "validation" / f"{name}.png")
        Image.fromarray(np.ones((1, 600), np.uint8), mode="L").save(data / "annotations" / "validation" / f"{name}.png")
    argv = ["--checkpoint", str(run / "best.safetensors"), "--data-dir", str(data), "--output-dir", str(tmp_path),
            "--num-workers", "0"]  # fmt: skip
    with pytest.warns(UserWarning) as record:
        assert load_script("evaluate_segmentation").main(argv) == 0
    thin = [str(w.message) for w in record if "too thin" in str(w.message)]
    assert len(thin) == 1 and thin[0].startswith("2 images of ") and "thin_a.png" in thin[0] and "thin_b.png" in thin[0]
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["images"] == 6 and [Path(s["path"]).name for s in report["skipped"]] == ["thin_a.png", "thin_b.png"]
    assert report["miou"] == pytest.approx(read_metadata(run / "best.safetensors")["val_miou"], abs=1e-6)


def test_segment_writes_palette_label_maps_and_overlays(trained, tmp_path: Path, capsys):
    data, run = trained
    (tmp_path / "in").mkdir()
    Image.open(data / "images" / "validation" / "00.png").save(tmp_path / "in" / "a.png")
    (tmp_path / "in" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    Image.new("RGB", (600, 1)).save(tmp_path / "in" / "thin.png")  # a traceback before, after 2 files written
    Image.new("RGB", (600, 20)).save(tmp_path / "in" / "thin20.png")  # rescaled to 64x2: predicted
    argv = ["--checkpoint", str(run / "last.safetensors"), "--input", str(tmp_path / "in"), "--output-dir",
            str(tmp_path / "out")]  # fmt: skip
    assert load_script("segment").main(argv) == 0
    assert "thin.png: a 1x600 (HxW) image would be rescaled to 1x64 (ratio 1.0), thinner than the backbone's 2-pixel " \
           "patch: too thin" in capsys.readouterr().err  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "out" / "labels").iterdir()) == ["00000_a.png", "00003_thin20.png"]
    with Image.open(tmp_path / "out" / "labels" / "00000_a.png") as labels:  # index 1, broken.png, is skipped
        assert labels.mode == "P" and labels.size == (48, 40)
        assert set(np.unique(np.asarray(labels))) <= {0, 1, 2}
        assert labels.getpalette()[:9] == [v for c in read_metadata(run / "last.safetensors")["palette"] for v in c]
    with Image.open(tmp_path / "out" / "overlays" / "00000_a.png") as overlay:
        assert overlay.mode == "RGB" and overlay.size == (48, 40)
    with open(tmp_path / "out" / "classes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["class"] for r in rows] == list(CLASSES)
    doc = " ".join((SCRIPTS.parent / "docs" / "segmentation.md").read_text().split())
    assert f"`seg/classes.csv` (columns `{','.join(rows[0])}`:" in doc  # the header a run writes
    assert len(COLORS) == len(CLASSES)


def test_help_imports_neither_torch_nor_timm():
    code = (
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(SCRIPTS)!r})\n"
        "for name in ('train_segmentation.py', 'evaluate_segmentation.py', 'segment.py'):\n"
        "    sys.argv = [name, '--help']\n"
        "    try:\n"
        f"        runpy.run_path({str(SCRIPTS)!r} + '/' + name, run_name='__main__')\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, name\n"
        "    assert 'torch' not in sys.modules and 'timm' not in sys.modules, name\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=script_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("usage:") == 3 and "data.test_mode=slide" in result.stdout and "--alpha" in result.stdout
    assert "train.ema_decay=0.9998 train.ema_warmup=true" in result.stdout  # 0.9998 without it: long runs only


def test_a_segmentation_checkpoint_points_classifier_tools_to_the_segmentation_scripts(trained):
    from swinlite.metadata import read_info

    with pytest.raises(ValueError, match="is a segmentation checkpoint, not a classifier's; use scripts/segment.py"):
        read_info(trained[1] / "best.safetensors")


def test_the_checkpoints_labels_and_every_test_setting_are_read_as_recorded(tmp_path: Path):
    """reduce_zero_label and each test setting, none at its default (read as false, or the ratios as (1.0,), passed
    every other test)."""
    pre = {"mean": [0.4, 0.5, 0.6], "std": [0.1, 0.2, 0.3], "img_scale": [96, 48], "mode": "slide",
           "crop_size": [32, 40], "stride": [16, 20], "ratios": [0.5, 1.0], "flip": True}  # fmt: skip
    meta = {"task": "segmentation", "segmenter": {"name": PICO}, "classes": ["a", "b"], "ignore_index": 255,
            "palette": [[0, 0, 0], [9, 9, 9]], "reduce_zero_label": True, "preprocessing": pre}  # fmt: skip
    save_safetensors(tmp_path / "seg.safetensors", {"x": torch.zeros(1)}, meta)
    info = predictor.read_info(tmp_path / "seg.safetensors")
    assert info.labels == Labels(("a", "b"), ((0, 0, 0), (9, 9, 9)), 255, reduce_zero_label=True)
    assert (info.mean, info.std) == ((0.4, 0.5, 0.6), (0.1, 0.2, 0.3))
    assert info.test == InferenceSettings((96, 48), "slide", (32, 40), (16, 20), (0.5, 1.0), flip=True)


def test_ema_selects_the_runs_ema_file_for_a_segmentation_checkpoint(trained):
    """--ema (export_onnx.py, ...) finds a segmentation run's EMA weights by the engine's own metadata key."""
    from swinlite.weights import ema_counterpart

    run = trained[1]
    assert ema_counterpart(run / "best.safetensors") == run / "best_ema.safetensors"
    assert ema_counterpart(run / "last.safetensors") == run / "ema.safetensors"
    assert ema_counterpart(run / "ema.safetensors") == run / "ema.safetensors"  # already the EMA weights


@pytest.mark.parametrize("script", ["segment", "evaluate_segmentation"])
def test_ema_reads_the_ema_file_beside_the_checkpoint(trained, tmp_path: Path, capsys, script: str):
    """--ema, as predict.py's and evaluate.py's (users passed best_ema.safetensors themselves): EMA weights beside the
    checkpoint whose classifier gives every pixel the last class (its bias raised) label every pixel so."""
    from swinlite.io import read_state_dict

    data, run = trained
    checkpoint = tmp_path / "run" / "best.safetensors"
    checkpoint.parent.mkdir()
    shutil.copy(run / "best.safetensors", checkpoint)
    state = read_state_dict(checkpoint)
    state["decode_head.classifier.bias"][-1] += 1e4  # [classes]: the last class wins every pixel
    ema = checkpoint.with_name("best_ema.safetensors")
    save_safetensors(ema, state, read_metadata(checkpoint) | {"weights": "ema"})
    out = tmp_path / "out"
    inputs = ["--input", data / "images" / "validation"] if script == "segment" else ["--data-dir", data]
    argv = ["--checkpoint", checkpoint, *inputs, "--output-dir", out, "--ema"]
    assert load_script(script).main([str(a) for a in argv]) == 0
    err = capsys.readouterr().err
    assert f"EMA weights: {ema}\n" in err and err.count("EMA weights: ") == 1  # named, as predict.py names it
    if script == "segment":
        labels = [np.asarray(Image.open(path)) for path in sorted((out / "labels").glob("*.png"))]
        assert len(labels) == 6 and all((label == len(CLASSES) - 1).all() for label in labels)
    else:
        report = json.loads((out / "eval.json").read_text())
        assert report["checkpoint"] == str(ema) and report["weights"] == "ema"
        assert [report["per_class"][c]["acc"] for c in CLASSES] == [0.0, 0.0, 100.0]
