"""scripts/train_detection.py, evaluate_detection.py and detect.py, run in-process as from the command line."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from detkit import edit_coco
from scriptkit import disk_full_after_first_file, run_script

from swinlite.hub import hub_repo

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the file's quirks warn; test_data checks those


def _no_constants(name: str):
    raise AssertionError(f"{name} is not JSON")


def test_help_says_which_file_applies_and_what_shows_every_key(capsys):
    """--help no longer lists every key (64b0a0f: it answers before torch loads); --print-config prints them, as
    tests/detection/test_detection_docs.py checks."""
    assert run_script("train_detection", ["--help"]) == 0
    text = capsys.readouterr().out
    assert "--print-config shows every key as it will apply to your command" in " ".join(text.split())
    assert "with --data-dir, without --config: configs/det_coco_fasterrcnn_swin_tiny_1x.yaml" in text
    assert "without --data-dir and --config: configs/det_demo.yaml" in text
    assert "train.ema_decay=0.9998 train.ema_warmup=true" in text  # 0.9998 without it: long runs only


def test_missing_data_is_one_clear_error(tmp_path: Path, capsys, offline_hub):
    # --data-dir's recipe starts from the ImageNet weights of swinlite_tiny's tag: in the (offline) cache here
    offline_hub.add(hub_repo("swinlite_tiny_patch4_window7_224.ms_in1k"), {"placeholder": torch.zeros(1)})
    argv = ["--data-dir", str(tmp_path / "nowhere"), "--output-dir", str(tmp_path / "run")]
    assert run_script("train_detection", argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --data-dir (data.data_dir) {tmp_path / 'nowhere'} does not exist; expected a folder in COCO 2017's "
        "layout holding annotations/instances_train2017.json and train2017/"
    )


def test_evaluate_detection_writes_box_and_mask_ap(trained, tmp_path: Path, capsys):
    coco, run = trained
    argv = ["--checkpoint", str(run / "best.safetensors"), "--data-dir", str(coco), "--output-dir", str(tmp_path)]
    assert run_script("evaluate_detection", argv + ["--num-workers", "0"]) == 0
    report = json.loads((tmp_path / "eval.json").read_text(), parse_constant=_no_constants)  # strict JSON
    assert report["images"] == 4 and set(report) >= {"bbox", "segm"}  # 05.png missing, 06.png does not decode
    evaluated = {"data_dir": str(coco), "split": "val", "amp": "none", "image_dir": str(coco / "val2017"),
                 "annotations": str(coco / "annotations" / "instances_val2017.json")}  # fmt: skip
    assert report | evaluated == report  # what was evaluated: the data folder, the split, --amp
    assert set(report["bbox"]) == {"map", "map50", "map75", "map_small", "map_medium", "map_large"}
    assert report["bbox"]["map_large"] is None  # no object that large: COCO's -1, NaN in Python, null here
    assert "Average Precision" in capsys.readouterr().out
    detections = json.loads((tmp_path / "detections.json").read_text())
    fields = {"image_id", "category_id", "bbox", "score", "segmentation"}  # COCO's results: none of loadRes' fields
    assert detections and all(set(d) == fields for d in detections)


def test_a_full_disk_before_the_last_file_leaves_no_eval_json(trained, tmp_path: Path, monkeypatch):
    """eval.json was written first: alone after a full disk, it refused every rerun, --overwrite's too. It is written
    last now, and detections.json alone is this task's (--overwrite replaces it: test_output_dir_other_tasks.py)."""
    coco, run = trained
    argv = ["--checkpoint", run / "best.safetensors", "--data-dir", coco, "--output-dir", tmp_path, "--num-workers=0"]
    disk_full_after_first_file(monkeypatch, tmp_path)
    assert run_script("evaluate_detection", argv) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["detections.json"]


def test_an_image_that_does_not_decode_is_left_out_of_the_evaluation(trained, tmp_path: Path):
    """A val image whose header reads but whose pixels do not: the AP and detections of the images that do, as if
    the file listed only those (not the next image's detections in its place); eval.json's ``skipped`` names it
    after the scan's skips."""
    coco, run = trained
    data = shutil.copytree(coco, tmp_path / "coco")
    path = data / "val2017" / "02.png"
    path.write_bytes(path.read_bytes()[:100])  # as 06.png
    argv = ["--checkpoint", str(run / "best.safetensors"), "--data-dir", str(data), "--num-workers", "0"]
    with pytest.warns(UserWarning, match=r"image id 2 \(.*02\.png\) left out of the evaluation: unreadable"):
        assert run_script("evaluate_detection", [*argv, "--output-dir", str(tmp_path / "broken")]) == 0

    def unlist(c: dict) -> None:
        c.update(images=[i for i in c["images"] if i["id"] != 2])
        c.update(annotations=[a for a in c["annotations"] if a["image_id"] != 2])

    edit_coco(data, "val", unlist)
    assert run_script("evaluate_detection", [*argv, "--output-dir", str(tmp_path / "unlisted")]) == 0
    broken, unlisted = (json.loads((tmp_path / d / "eval.json").read_text()) for d in ("broken", "unlisted"))
    names = [Path(s["path"]).name for s in broken["skipped"]]
    assert names == ["05.png", "02.png", "06.png"]  # the scan's (missing), then those that did not decode
    assert broken["skipped"][1]["path"] == str(path)
    reasons = [s["reason"] for s in broken["skipped"]]  # the path once, under "path" (the scan's repeated it)
    assert reasons[0] == "missing file" and all(r.startswith("unreadable (") for r in reasons[1:]), reasons
    assert unlisted["skipped"] == [s for s in broken["skipped"] if s["path"] != str(path)]
    assert {**broken, "skipped": None} == {**unlisted, "skipped": None} and broken["images"] == 3
    detections = [(tmp_path / d / "detections.json").read_text() for d in ("broken", "unlisted")]
    assert detections[0] == detections[1]


def test_detect_writes_coco_results_and_drawn_images(trained, tmp_path: Path, capsys):
    coco, run = trained
    inputs = [str(coco / "val2017"), str(coco / "train2017" / "01.png")]  # a folder (with a corrupt file) and a file
    argv = ["--checkpoint", str(run / "last.safetensors"), "--input", *inputs, "--output-dir", str(tmp_path)]
    assert run_script("detect", argv + ["--score-thresh", "0.0"]) == 0
    results = json.loads((tmp_path / "detections.json").read_text())
    assert results, "an untrained detector still scores every class well above 0"
    assert set(results[0]) == {"image", "category_id", "category", "bbox", "score"}
    assert {(r["category_id"], r["category"]) for r in results} <= {(3, "square"), (7, "bar")}
    assert len(list((tmp_path / "images").glob("*.png"))) == 5  # 4 readable val images + the file; 06.png skipped
    best = max(r["score"] for r in results)
    assert run_script("detect", argv + ["--score-thresh", "1.0", "--overwrite"]) == 0
    assert json.loads((tmp_path / "detections.json").read_text()) == []
    note = f"note: no detection scored --score-thresh 1.0 or more; the best scored {best:.4f}"
    assert note in capsys.readouterr().err  # not a bare "0 detections"


@pytest.mark.parametrize(
    "unscorable",
    [lambda d: d.update(annotations=[]), lambda d: [a.update(iscrowd=1) for a in d["annotations"]]],
    ids=["no-objects", "only-crowds"],
)
def test_evaluate_detection_on_data_with_nothing_to_score_is_one_error(trained, tmp_path: Path, capsys, unscorable):
    """It printed COCOeval's NaN summary and wrote an eval.json of nulls, as if that were a result."""
    coco, run = trained
    data = shutil.copytree(coco, tmp_path / "coco")
    edit_coco(data, "val", unscorable)
    argv = ["--checkpoint", str(run / "best.safetensors"), "--data-dir", str(data), "--output-dir", str(tmp_path)]
    assert run_script("evaluate_detection", [*argv, "--num-workers", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: the val annotations (") and "no object to score" in err
    assert not (tmp_path / "eval.json").exists()


@pytest.mark.parametrize("script", ["detect", "evaluate_detection"])
def test_ema_reads_the_ema_file_beside_the_checkpoint(trained, tmp_path: Path, capsys, script: str):
    """--ema, as predict.py's and evaluate.py's (users passed best_ema.safetensors themselves): EMA weights beside the
    checkpoint whose detector keeps no box (the background logit raised) give no detection, the raw weights some."""
    from swinlite.io import read_metadata, read_state_dict, save_safetensors

    coco, run = trained
    checkpoint = tmp_path / "run" / "best.safetensors"
    checkpoint.parent.mkdir()
    shutil.copy(run / "best.safetensors", checkpoint)
    state = read_state_dict(checkpoint)
    state["roi_heads.box_predictor.cls_score.bias"][0] += 100.0  # [classes + 1]: every box scores background
    ema = checkpoint.with_name("best_ema.safetensors")
    save_safetensors(ema, state, read_metadata(checkpoint) | {"weights": "ema"})
    data = {"detect": ["--input", coco / "val2017", "--score-thresh", "0"],
            "evaluate_detection": ["--data-dir", coco, "--num-workers", "0"]}[script]  # fmt: skip
    detections = {}
    for flags in ([], ["--ema"]):
        out = tmp_path / f"out{len(flags)}"
        assert run_script(script, ["--checkpoint", checkpoint, *data, "--output-dir", out, *flags]) == 0
        detections[bool(flags)] = json.loads((out / "detections.json").read_text())
    assert detections[False] and detections[True] == []
    err = capsys.readouterr().err
    assert f"EMA weights: {ema}\n" in err and err.count("EMA weights: ") == 1  # named, as predict.py names it
    if script == "evaluate_detection":
        reports = [json.loads((tmp_path / f"out{n}" / "eval.json").read_text()) for n in (0, 1)]
        assert [(r["checkpoint"], r["weights"]) for r in reports] == [(str(checkpoint), "raw"), (str(ema), "ema")]
