"""Per-epoch metrics: ``metrics.csv`` (one row per epoch) and ``curves.png``, both rewritten whole each epoch;
optionally TensorBoard event files beside them."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from matplotlib.figure import Figure  # a bare Figure saves with the Agg canvas: no pyplot, no display

from ..io import atomic_write


def columns(k: int, ema: bool) -> list[str]:
    """metrics.csv's columns: top-k with the k used (min(5, classes); none for 1 class); EMA runs add
    ``val_loss_ema``, ``val_top1_ema`` and ``val_top{k}_ema``."""
    topk = [f"val_top{k}"] if k > 1 else []
    names = ["epoch", "train_loss", "val_loss", "val_top1", *topk, "lr", "epoch_time", "train_img_s"]
    return names + ([f"{name}_ema" for name in ("val_loss", "val_top1", *topk)] if ema else [])


def topk_column(row: dict[str, float]) -> str | None:
    """The ``val_top{k}`` key of a row (k > 1), or None."""
    return next((key for key in row if re.fullmatch(r"val_top[2-5]", key)), None)


def write_csv(history: list[dict[str, float]], path: str | Path, first: list[str] | None = None) -> None:
    """Write all epochs so far: columns ``first`` (default: the first row's keys in order), then any others;
    top-k values are percentages, ``epoch_time`` seconds."""
    first = list(history[0]) if first is None else first
    columns = first + [k for k in history[0] if k not in first]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in history:
        writer.writerow({k: _fmt(row[k]) for k in columns})
    atomic_write(path, lambda f: f.write(text.getvalue().encode()))


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:.6g}"


def plot_curves(history: list[dict[str, float]], path: str | Path) -> None:
    """Loss (train and val) and val top-1/top-k (and EMA top-1) against epoch, side by side."""
    epochs = [row["epoch"] for row in history]
    fig = Figure(figsize=(10, 4))
    ax_loss, ax_acc = fig.subplots(1, 2)
    ax_loss.plot(epochs, [r["train_loss"] for r in history], marker=".", label="train")
    ax_loss.plot(epochs, [r["val_loss"] for r in history], marker=".", label="val")
    ax_acc.plot(epochs, [r["val_top1"] for r in history], marker=".", label="val top-1")
    topk = topk_column(history[0])
    if topk is not None:
        ax_acc.plot(epochs, [r[topk] for r in history], marker=".", label=f"val top-{topk[7:]}")
    if "val_top1_ema" in history[0]:
        ax_acc.plot(epochs, [r["val_top1_ema"] for r in history], marker=".", label="EMA val top-1")
    ax_loss.set(xlabel="epoch", ylabel="loss", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="validation accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    atomic_write(path, lambda f: f.write(buffer.getvalue()))


class TensorBoardLog:
    """TensorBoard event files in ``folder``: every metrics row per epoch, the running loss and lr per step.

    Args:
        folder: the run's output folder (beside metrics.csv).
        purge_step: on resume, the step resumed from: events a killed run wrote after it are dropped.
    """

    def __init__(self, folder: str | Path, purge_step: int | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ValueError(
                "train.tensorboard=true needs the tensorboard package: pip install tensorboard "
                "(or pip install swinlite[train])"
            ) from None
        self.writer = SummaryWriter(log_dir=str(folder), purge_step=purge_step)

    def step(self, step: int, loss: float, lr: float) -> None:
        self.writer.add_scalar("train/running_loss", loss, step)
        self.writer.add_scalar("train/lr", lr, step)

    def epoch(self, row: dict[str, float]) -> None:
        for key, value in row.items():
            if key != "epoch":
                self.writer.add_scalar(f"epoch/{key}", value, int(row["epoch"]))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
