"""One train + eval epoch of each detector on the quirky 6-image COCO file; metrics, checkpoints, errors."""

import csv
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from detkit import REPO, edit_coco, make_quirky_coco, rewrite_checkpoint, tiny_overrides
from PIL import Image

from swinlite.detection.predictor import load_detector
from swinlite.detection.task import DetectionTask
from swinlite.engine import run
from swinlite.engine.config import flatten, to_dict
from swinlite.engine.preflight import check_run
from swinlite.hub import hub_repo
from swinlite.io import read_metadata, read_state_dict
from swinlite.models import SwinV2Block

load_det_config = DetectionTask.load_config

AP = ["val_map", "val_map50", "val_map75", "val_map_small", "val_map_medium", "val_map_large"]
LOSSES = {
    "fasterrcnn": ["loss_box_reg", "loss_classifier", "loss_objectness", "loss_rpn_box_reg"],
    "maskrcnn": ["loss_box_reg", "loss_classifier", "loss_mask", "loss_objectness", "loss_rpn_box_reg"],
    "retinanet": ["loss_bbox_regression", "loss_classification"],
    "fcos": ["loss_bbox_ctrness", "loss_bbox_regression", "loss_classification"],
}


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``one_epoch(detector)``: the run folder of one epoch of ``detector`` (Faster R-CNN under bf16 autocast, FCOS
    with the FPN its GroupNorm needs) on a quirky COCO file of the module, trained by the first test that asks (in
    that test, under its one_thread fixture) and read by the others; none changes it."""
    root = tmp_path_factory.mktemp("epochs")
    coco = make_quirky_coco(root / "coco")
    runs: dict[str, Path] = {}

    def trained(detector: str) -> Path:
        if detector not in runs:
            extra = {"model.detector": detector, "train.amp": "bf16" if detector == "fasterrcnn" else "none"}
            if detector == "fcos":
                extra["model.fpn_channels"] = 64  # FCOS's head has GroupNorm(32 groups), and P7 is 1x1 on these images
            runs[detector] = run(DetectionTask, load_det_config(None, tiny_overrides(coco, root / detector, **extra)))
        return runs[detector]

    return trained


@pytest.mark.filterwarnings("ignore::UserWarning")  # the file's quirks warn; test_data checks those warnings
@pytest.mark.parametrize("detector", list(LOSSES))
def test_one_epoch_writes_every_metric_and_checkpoint(one_epoch: Callable[[str], Path], detector: str):
    out = one_epoch(detector)
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    masks = [f"val_mask_{k[4:]}" for k in AP] if detector == "maskrcnn" else []
    expected = ["epoch", "train_loss", *LOSSES[detector], *AP, *masks, "lr", "epoch_time", "train_img_s"]
    assert list(rows[0]) == expected and len(rows) == 1
    assert all(0 <= float(rows[0][k]) <= 100 for k in ("val_map", "val_map50")) and float(rows[0]["train_loss"]) > 0
    for name in ("curves.png", "best.safetensors", "last.safetensors", "resume.pt", "config.yaml"):
        assert (out / name).is_file(), name
    meta = read_metadata(out / "best.safetensors")
    assert meta["classes"] == ["square", "bar"] and meta["category_ids"] == [3, 7]
    assert meta["detector"]["detector"] == detector and meta["epoch"] == 1
    model, categories, _ = load_detector(out / "best.safetensors")  # rebuilt from the metadata alone
    assert categories.names == ["square", "bar"] and not model.training


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_config_line_makes_the_backbone_swin_v2(coco: Path, tmp_path: Path):
    """model.name of a Swin-V2 variant: one Faster R-CNN epoch through the engine, and the checkpoint rebuilds it."""
    overrides = tiny_overrides(coco, tmp_path / "run", **{"model.name": "swinlite_v2_pico_patch2_window4_32"})
    out = run(DetectionTask, load_det_config(None, overrides))
    with open(out / "metrics.csv", newline="") as f:
        row = next(csv.DictReader(f))
    assert float(row["train_loss"]) > 0 and 0 <= float(row["val_map"]) <= 100
    model, _, _ = load_detector(out / "best.safetensors")
    blocks = [m for m in model.modules() if isinstance(m, SwinV2Block)]  # the fast subclass included
    assert len(blocks) == 5  # pico depths 1-1-2-1


def test_a_run_starts_from_a_detection_runs_weights_and_names_other_class_names(
    one_epoch: Callable[[str], Path], coco: Path, tmp_path: Path
):
    """model.pretrained=<a detection run>/best.safetensors failed ("116 checkpoint keys did not map onto
    SwinTransformer"); the whole detector loads now: an epoch at lr 0 ends with the weights it started from (the
    Faster R-CNN epoch of test_one_epoch_writes_every_metric_and_checkpoint, its file naming other classes). The run
    gives the detector its classes' names: a file of as many other classes is named with both lists."""
    first = one_epoch("fasterrcnn") / "best.safetensors"
    cats = rewrite_checkpoint(first, tmp_path / "cats.safetensors", classes=["cat", "dog"])
    still = {"model.pretrained": cats, "optim.lr": 0, "schedule.warmup_lr": 0}
    with pytest.warns(UserWarning) as record:  # the file's quirks warn too; test_data checks those warnings
        second = run(DetectionTask, load_det_config(None, tiny_overrides(coco, tmp_path / "second", **still)))
    assert any("cats.safetensors: its class layers were trained on other classes (cat, dog) than this run's (square, "
               "bar)" in str(w.message) for w in record)  # fmt: skip
    start, end = read_state_dict(first), read_state_dict(second / "last.safetensors")
    assert start.keys() == end.keys() and all(torch.equal(start[k], end[k]) for k in start)


def test_unknown_key_and_bad_values_are_clear_errors():
    with pytest.raises(ValueError, match="did you mean 'model.fpn_channels'"):
        load_det_config(None, ["model.fpn_channel=16"])
    with pytest.raises(ValueError, match="model.detector must be one of fasterrcnn, maskrcnn, retinanet, fcos"):
        load_det_config(None, ["model.detector=yolo"])
    for channels in (32, 80):  # 32: GroupNorm(32 groups) of a 1x1 map failed in evaluation, after training
        with pytest.raises(ValueError, match=f"multiple of 32 and at least 64 for fcos .*got {channels}"):
            DetectionTask.check_config(load_det_config(None, ["model.detector=fcos", f"model.fpn_channels={channels}"]))


def _no_object(coco: Path) -> dict[str, object]:
    (coco / "empty.json").write_text(
        '{"images": [{"id": 1, "file_name": "01.png", "width": 48, "height": 48}], "annotations": [], '
        '"categories": [{"id": 3, "name": "square"}, {"id": 7, "name": "bar"}]}'
    )
    return {"data.train_ann": coco / "empty.json"}


def _val_without_objects(coco: Path) -> dict[str, object]:
    edit_coco(coco, "val", lambda d: d.update(annotations=[]))
    return {}


def _val_only_crowds(coco: Path) -> dict[str, object]:
    edit_coco(coco, "val", lambda d: [a.update(iscrowd=1) for a in d["annotations"]])
    return {}


def _val_category_training_lacks(coco: Path) -> dict[str, object]:
    edit_coco(coco, "val", lambda d: d["categories"].append({"id": 9, "name": "cat"}))  # scored as no class
    return {}


def _own_files_under_the_demo(coco: Path) -> dict[str, object]:
    """The demo's data.dataset=digits with the user's own files: the demo was written into data/det_digits (1,403
    files) and trained, the files ignored, config.yaml saying dataset digits."""
    return {"data.dataset": "digits", "data.data_dir": coco.parent / "det_digits",
            "data.train_ann": coco / "annotations" / "instances_train2017.json"}  # fmt: skip


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        (_no_object, "hold no usable object"),
        (_val_without_objects, r"the val annotations \(.*instances_val2017.json\): no annotation at all, so no "
         r"object to score; the AP would be NaN"),
        (_val_only_crowds, r"\): no object to score on the images kept, only iscrowd or empty ones; the AP would be"),
        (_val_category_training_lacks, r"instances_val2017.json has categories \(id name\) that the training "
         r"annotation file .*instances_train2017.json lacks: 9 'cat'; it has 3 'square', 7 'bar'$"),
        (_own_files_under_the_demo, r"^data.train_ann points at your own data, but data.dataset=digits trains the "
         r"built-in demo \(written into data.data_dir .*det_digits\); set data.dataset=coco to train on your files$"),
    ],
    ids=["training-set-without-objects", "val-set-without-objects", "val-set-of-crowds", "val-category-training-lacks",
         "own-files-with-the-demo-dataset"],
)  # fmt: skip
def test_data_that_cannot_train_is_an_error_before_training(coco: Path, tmp_path: Path, prepare, message):
    overrides = tiny_overrides(coco, tmp_path / "run", **prepare(coco))
    with pytest.raises(ValueError, match=message):
        run(DetectionTask, load_det_config(None, overrides))
    assert not (tmp_path / "run" / "resume.pt").exists() and not (tmp_path / "det_digits").exists()


def test_images_too_thin_to_resize_are_left_out_of_training_and_evaluation_with_a_warning(coco: Path, tmp_path: Path):
    """A 1 x 400 image crashed the train transform (in a loader worker) or the detector's resize in evaluation."""
    Image.new("RGB", (400, 1)).save(coco / "train2017" / "03.png")  # the negative image, in both splits
    Image.new("RGB", (1, 400)).save(coco / "val2017" / "03.png")
    for split, size in (("train", (400, 1)), ("val", (1, 400))):
        edit_coco(coco, split, lambda d, size=size: d["images"][2].update(width=size[0], height=size[1]))
    with pytest.warns(UserWarning) as record:
        out = run(DetectionTask, load_det_config(None, tiny_overrides(coco, tmp_path / "run")))
    left_out = sorted(str(w.message) for w in record if "left out (image id" in str(w.message))
    assert left_out == [
        f"1 images of {coco / 'annotations' / 'instances_train2017.json'} left out (image id: reason): 3: a 1x400 "
        "(HxW) image would be resized to 0x96 "
        "(short side 40, long side at most 96): too thin",
        f"1 images of {coco / 'annotations' / 'instances_val2017.json'} left out (image id: reason): 3: a 400x1 "
        "(HxW) image would be resized to 96x0 "
        "(short side 48, long side at most 96): too thin",
    ]
    assert (out / "best.safetensors").is_file()


def _cut_off(folder: Path, names: list[str]) -> None:
    """Cut the image files ``names`` of ``folder`` as detkit cuts 06.png: the header reads, the pixels do not."""
    for name in names:
        path = folder / name
        path.write_bytes(path.read_bytes()[:100])


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["01.png", "02.png", "03.png", "04.png"], r"no val image could be scored: all 5 were left out as they were "
         r"read, e\.g\. .*01\.png: unreadable \("),
        (["01.png", "02.png", "04.png"], r"the 1 val images scored hold no object to score; those left out as they "
         r"were read: 4, e\.g\. .*01\.png: unreadable"),
    ],
    ids=["none-decodes", "only-the-negative-decodes"],
)  # fmt: skip
def test_a_validation_that_scores_nothing_stops_the_run_with_the_epoch_kept(coco: Path, tmp_path: Path, names, message):
    """Every val image cut off behind a good header (as 06.png): each epoch logged a NaN val_map and the run
    finished with no best.safetensors and exit 0; now the first validation stops it, the trained epoch resumable."""
    _cut_off(coco / "val2017", names)
    with pytest.raises(ValueError, match=f"evaluation after training epoch 1/2 failed \\(ValueError: {message}"):
        run(DetectionTask, load_det_config(None, tiny_overrides(coco, tmp_path / "run", **{"train.epochs": 2})))
    assert (tmp_path / "run" / "resume.pt").is_file() and not (tmp_path / "run" / "best.safetensors").exists()


RCNN_ONLY = ["box_head_dim", "rpn_batch_size_per_image", "box_batch_size_per_image"]


@pytest.mark.parametrize(
    ("detector", "unused"),
    [("fasterrcnn", []), ("maskrcnn", []), ("retinanet", RCNN_ONLY), ("fcos", [*RCNN_ONLY, "anchor_scale"])],
)
def test_model_settings_the_detector_does_not_read_are_warned_of(detector: str, unused: list[str], recwarn):
    """model.box_head_dim and the R-CNN samplers' sizes under retinanet or fcos, model.anchor_scale under fcos (its
    anchors are the strides) trained without a word, and config.yaml recorded them as if used."""
    settings = {"box_head_dim": 7, "rpn_batch_size_per_image": 1, "box_batch_size_per_image": 1, "anchor_scale": 4}
    overrides = [f"model.detector={detector}", "model.fpn_channels=64"]  # 64: FCOS's GroupNorm
    overrides += [f"model.{key}={value}" for key, value in settings.items()]
    DetectionTask.check_config(load_det_config(None, overrides))
    said = [str(w.message) for w in recwarn]
    assert [m.split(" is unused: ")[0] for m in said] == [f"model.{name}" for name in unused], said
    if unused:
        why = f"model.detector={detector} does not read it, only model.detector=fasterrcnn or maskrcnn"
        assert said[0] == f"model.box_head_dim is unused: {why}"
    if detector == "fcos":
        fcos = "model.detector=fcos sizes its anchors by each level's stride alone"
        assert said[-1] == f"model.anchor_scale is unused: {fcos}"
    DetectionTask.check_config(load_det_config(None, overrides[:2]))  # the defaults: no warning
    assert len(recwarn) == len(said)


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("det_*.yaml")), ids=lambda p: p.name)
def test_shipped_detection_configs_load_and_pass_the_checks(
    path: Path, offline_hub, stub_inputs, tmp_path, monkeypatch, recwarn
):
    cfg = load_det_config(path)
    monkeypatch.chdir(tmp_path)  # the config's data paths, relative to the repository's root, stubbed here
    stub_inputs(DetectionTask, cfg)
    if cfg.model.pretrained is True:  # the tag's weights in the (offline) cache: what the preflight looks for
        offline_hub.add(hub_repo(cfg.model.name), {"placeholder": torch.zeros(1)})
    check_run(DetectionTask, cfg)
    assert not [str(w.message) for w in recwarn if " is unused: " in str(w.message)]  # its settings, its detector's
    assert load_det_config(None, [f"{k}={v}" for k, v in flatten(to_dict(cfg)).items()]) == cfg
