"""One train + eval epoch through scripts/train_segmentation.py; metrics, checkpoints and the model rebuilt from its
file alone; the shipped configs."""

import csv
import warnings
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file
from scriptkit import load_script
from segkit import CLASSES, REPO, tiny_overrides

from swinlite.engine.config import flatten, to_dict
from swinlite.engine.distributed import DistInfo
from swinlite.engine.loop import StepSettings
from swinlite.engine.preflight import check_run
from swinlite.engine.task import RunContext
from swinlite.hub import hub_repo
from swinlite.io import read_metadata
from swinlite.segmentation import task
from swinlite.segmentation.models import SegOutput
from swinlite.segmentation.predictor import load_segmenter
from swinlite.segmentation.task import SegmentationTask, seg_loss

COLUMNS = ["epoch", "train_loss", "loss_aux", "loss_decode", "val_miou", "val_macc", "val_aacc", "lr", "epoch_time",
           "train_img_s", "val_miou_ema", "val_macc_ema", "val_aacc_ema"]  # fmt: skip


def test_epochs_write_every_metric_and_a_self_describing_checkpoint(trained):
    _, out = trained
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == COLUMNS and len(rows) == 2
    doc = " ".join((REPO / "docs" / "segmentation.md").read_text().split())
    assert f"`{', '.join(COLUMNS[:10])}`" in doc  # the columns in the order a run writes them
    for row in rows:
        assert all(0 <= float(row[k]) <= 100 for k in COLUMNS if k.startswith("val_"))
        total = float(row["loss_decode"]) + 0.4 * float(row["loss_aux"])
        assert float(row["train_loss"]) == pytest.approx(total, rel=1e-4)
    names = ("curves.png", "best.safetensors", "last.safetensors", "ema.safetensors", "best_ema.safetensors")
    for name in (*names, "resume.pt", "config.yaml"):
        assert (out / name).is_file(), name
    meta = read_metadata(out / "best.safetensors")
    assert meta["task"] == "segmentation" and meta["classes"] == list(CLASSES) and len(meta["palette"]) == 3
    assert (meta["ignore_index"], meta["reduce_zero_label"]) == (255, False)
    assert meta["preprocessing"]["img_scale"] == [64, 32] and meta["preprocessing"]["mode"] == "whole"
    best = max(rows, key=lambda r: float(r["val_miou"]))  # train.best_of=raw; max keeps the first of equal scores
    assert meta["epoch"] == int(best["epoch"]) and meta["val_miou"] == pytest.approx(float(best["val_miou"]), 1e-5)
    log = (out.parent / "stdout.txt").read_text()  # per-class table of each evaluation (raw and EMA weights)
    assert log.count("val per class (%):") == 4 and all(f"\n{c} " in log for c in CLASSES)
    model, info = load_segmenter(out / "best.safetensors")  # rebuilt from the metadata alone
    assert not model.training and info.labels.classes == CLASSES and model.num_classes == 3


def test_loss_averages_over_every_pixel_ignored_ones_counting_zero():
    logits = torch.randn(2, 3, 4, 5)
    target = torch.randint(0, 3, (2, 4, 5))
    target[0, 0] = 255
    per_pixel = torch.nn.functional.cross_entropy(logits, target.clamp(max=2), reduction="none")  # [2, 4, 5]
    expected = per_pixel.masked_fill(target == 255, 0).sum() / target.numel()
    torch.testing.assert_close(seg_loss(logits, target, 255), expected)
    assert seg_loss(logits, torch.full_like(target, 255), 255) == 0  # all ignored: zero, not NaN


@pytest.mark.parametrize("aux_weight", [1.0, 0.25])
def test_the_loss_is_the_decode_heads_plus_aux_weight_times_the_auxiliary_heads(aux_weight: float, tmp_path: Path):
    """Any model.aux_weight, not only the default 0.4 of the trained run's metrics.csv."""
    torch.manual_seed(0)
    logits, aux_logits = torch.randn(2, 2, 3, 4, 5).unbind()  # [B, K, H, W] each
    masks = torch.randint(0, 3, (2, 4, 5))  # no pixel ignored: each loss is the mean cross-entropy
    cfg = SegmentationTask.load_config(None, [f"model.aux_weight={aux_weight}"])
    cpu = torch.device("cpu")
    seg_task = SegmentationTask(RunContext(cfg, cpu, DistInfo(), tmp_path, StepSettings(cpu)))
    out = seg_task.train_step(lambda images: SegOutput(logits, aux_logits), (torch.zeros(2, 3, 4, 5), masks))
    decode = torch.nn.functional.cross_entropy(logits, masks)
    aux = torch.nn.functional.cross_entropy(aux_logits, masks)
    torch.testing.assert_close(out.loss, decode + aux_weight * aux)
    torch.testing.assert_close(out.parts, {"loss_decode": decode, "loss_aux": aux})


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("seg_*.yaml")), ids=lambda p: p.name)
def test_shipped_segmentation_configs_load_and_pass_the_checks(
    path: Path, offline_hub, stub_inputs, tmp_path, monkeypatch, recwarn
):
    cfg = SegmentationTask.load_config(path)
    monkeypatch.chdir(tmp_path)  # the config's data paths, relative to the repository's root, stubbed here
    stub_inputs(SegmentationTask, cfg)
    if cfg.model.pretrained is True:  # the tag's weights in the (offline) cache: what the preflight looks for
        offline_hub.add(hub_repo(cfg.model.name), {"placeholder": torch.zeros(1)})
    check_run(SegmentationTask, cfg)
    assert not [str(w.message) for w in recwarn if " is unused: " in str(w.message)]
    assert SegmentationTask.load_config(None, [f"{k}={v}" for k, v in flatten(to_dict(cfg)).items()]) == cfg


@pytest.mark.parametrize(
    "crop,img_scale,ratios,expected",
    [
        ([512, 512], [2048, 512], [0.5, 2.0], None),  # the ADE20K recipe
        ([64, 64], [256, 64], [0.75, 1.5], None),  # configs/seg_demo.yaml
        ([512, 512], [2048, 512], [0.5, 0.75], "at most 1536x384"),  # no rescaled short side reaches 512
        ([64, 400], [256, 64], [0.75, 1.5], "at most 384x96"),  # no long side reaches 400
    ],
)
def test_a_crop_larger_than_every_rescaled_image_is_one_warning(crop, img_scale, ratios, expected):
    """Every crop would be partly padding (ignored by the loss, computed all the same): said before training."""
    overrides = [f"data.crop_size={crop}", f"data.img_scale={img_scale}", f"data.ratio_range={ratios}"]
    cfg = SegmentationTask.load_config(None, [o.replace(" ", "") for o in overrides])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SegmentationTask.check_config(cfg)
    messages = [str(w.message) for w in caught]
    if expected is None:
        assert messages == []
    else:
        assert len(messages) == 1 and expected in messages[0] and "every crop is partly padding" in messages[0]


def test_a_pretrained_file_that_does_not_fit_is_refused_before_any_mask_is_read(seg_folder, tmp_path, monkeypatch):
    """A model.pretrained of another model (a nano's weights for a pico) was refused only after the scan had read
    every mask of both splits (the early check tests that the file reads, not that it fits): the model, whose
    classes are the settings', is built before the scan now."""
    path = tmp_path / "nano.safetensors"
    save_file(timm.create_model("swinlite_nano_patch2_window4_64", num_classes=0).state_dict(), path)

    def scan_split(images: Path, masks: Path, *_) -> None:
        raise AssertionError(f"the masks of {masks} were read before the model.pretrained file was fitted")

    monkeypatch.setattr(task, "scan_split", scan_split)
    (tmp_path / "defaults.yaml").write_text("{}\n")
    overrides = tiny_overrides(seg_folder, tmp_path / "run", **{"model.pretrained": path})
    with pytest.raises(ValueError, match=f"model.pretrained {path}: .*did not map onto SwinTransformer"):
        load_script("train_segmentation").main(["--config", str(tmp_path / "defaults.yaml"), *overrides])
