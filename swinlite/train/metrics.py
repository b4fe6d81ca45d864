"""Per-epoch metrics: ``metrics.csv`` (one row per epoch) and ``curves.png``, both rewritten whole each epoch."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402

from ..io import atomic_write  # noqa: E402

# The columns every run writes; EMA runs add ema_val_loss, ema_val_top1, ema_val_top5.
COLUMNS = ["epoch", "train_loss", "val_loss", "val_top1", "val_top5", "lr", "epoch_time", "train_img_s"]


def write_csv(history: list[dict[str, float]], path: str | Path, first: list[str] = COLUMNS) -> None:
    """Write all epochs so far, columns ``first`` then any others; top-k values are percentages, ``epoch_time`` s."""
    columns = first + [k for k in history[0] if k not in first] if history else first
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in history:
        writer.writerow({k: _fmt(row[k]) for k in columns})
    atomic_write(path, lambda f: f.write(text.getvalue().encode()))


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:.6g}"


def read_csv(path: str | Path) -> list[dict[str, float]]:
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def plot_curves(history: list[dict[str, float]], path: str | Path) -> None:
    """Loss (train and val) and val top-1/top-5 against epoch, side by side."""
    epochs = [row["epoch"] for row in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, [r["train_loss"] for r in history], marker=".", label="train")
    ax_loss.plot(epochs, [r["val_loss"] for r in history], marker=".", label="val")
    ax_acc.plot(epochs, [r["val_top1"] for r in history], marker=".", label="val top-1")
    ax_acc.plot(epochs, [r["val_top5"] for r in history], marker=".", label="val top-5")
    if "ema_val_top1" in history[0]:
        ax_acc.plot(epochs, [r["ema_val_top1"] for r in history], marker=".", label="EMA val top-1")
    ax_loss.set(xlabel="epoch", ylabel="loss", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="validation accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write(path, lambda f: f.write(buffer.getvalue()))
