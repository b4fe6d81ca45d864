"""EMA runs write their weights and metrics; best.safetensors follows train.best_of; TensorBoard events."""

import csv
import sys
from pathlib import Path

import pytest
import torch
from trainkit import tiny_config, train

from swinlite.engine.checkpoint import load_resume
from swinlite.engine.metrics import TensorBoardLog
from swinlite.io import read_metadata, read_state_dict


def test_ema_files_metrics_and_best_of_both(tmp_path: Path, folder: Path):
    extra = {"train.ema_decay": 0.5, "train.epochs": 3, "train.tensorboard": True, "train.channels_last": True}
    out = train(tiny_config(folder, tmp_path / "out", **extra))
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert list(rows[0])[-3:] == ["val_loss_ema", "val_top1_ema", "val_top3_ema"]  # 3 classes: top-3
    resume = load_resume(out / "resume.pt")
    ema = read_state_dict(out / "ema.safetensors")
    saved_ema = {k.removeprefix("module."): v for k, v in resume["ema"].items()}
    assert all(torch.equal(ema[k], saved_ema[k]) for k in ema)  # the EMA weights, not the trained ones
    assert not all(torch.equal(ema[k], resume["model"][k]) for k in ema)
    assert read_metadata(out / "ema.safetensors")["weights"] == "ema"

    # best_ema: the epoch with the best EMA top-1 (first on a tie); best: the better of raw and EMA (raw on a tie)
    ema_top1 = [float(r["val_top1_ema"]) for r in rows]
    best_ema_meta = read_metadata(out / "best_ema.safetensors")
    assert best_ema_meta["epoch"] == ema_top1.index(max(ema_top1)) + 1 and best_ema_meta["weights"] == "ema"
    scored = [(max(float(r["val_top1"]), e), r, "raw" if float(r["val_top1"]) >= e else "ema") for r, e in
              zip(rows, ema_top1, strict=True)]  # fmt: skip
    top, row, kind = max(scored, key=lambda s: s[0])  # max keeps the first epoch on a tie
    best_meta = read_metadata(out / "best.safetensors")
    assert (best_meta["epoch"], best_meta.get("weights", "raw")) == (int(row["epoch"]), kind)
    assert best_meta["val_top1"] == top and resume["best"] == top

    events = list(out.glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_tensorboard_missing_is_a_clear_error(tmp_path: Path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if the package were not installed
    with pytest.raises(ValueError, match="train.tensorboard=true needs the tensorboard package: pip install"):
        TensorBoardLog(tmp_path)
