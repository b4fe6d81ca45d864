"""Per-epoch detection metrics: ``metrics.csv`` and ``curves.png`` (losses and COCO AP), rewritten whole each epoch."""

from __future__ import annotations

import io
from pathlib import Path

from matplotlib.figure import Figure  # a bare Figure saves with the Agg canvas: no pyplot, no display

from ..io import atomic_write
from ..train.metrics import write_csv
from .evaluation import AP_NAMES

HEAD = ["epoch", "train_loss"]  # then each loss component, then TAIL
TAIL = [f"val_{n}" for n in AP_NAMES] + ["lr", "epoch_time"]


def columns(history: list[dict[str, float]]) -> list[str]:
    """``epoch, train_loss, <loss components>, val_map, ..., val_map_large, lr, epoch_time``, then any others."""
    losses = sorted(k for k in history[0] if k.startswith("loss_"))
    return HEAD + losses + TAIL


def write_metrics(history: list[dict[str, float]], path: str | Path) -> None:
    """AP values in percent, ``epoch_time`` in seconds."""
    write_csv(history, path, first=columns(history))


def plot_curves(history: list[dict[str, float]], path: str | Path) -> None:
    """Training losses (total and components) and validation AP / AP50 / AP75 against epoch."""
    epochs = [row["epoch"] for row in history]
    fig = Figure(figsize=(10, 4))
    ax_loss, ax_ap = fig.subplots(1, 2)
    for key in ["train_loss"] + sorted(k for k in history[0] if k.startswith("loss_")):
        ax_loss.plot(
            epochs, [r[key] for r in history], marker=".", label=key, linewidth=2 if key == "train_loss" else 1
        )
    for key, label in (("val_map", "AP"), ("val_map50", "AP50"), ("val_map75", "AP75"), ("val_mask_map", "mask AP")):
        if key in history[0]:
            ax_ap.plot(epochs, [r[key] for r in history], marker=".", label=label)
    ax_loss.set(xlabel="epoch", ylabel="loss", title="training loss")
    ax_ap.set(xlabel="epoch", ylabel="COCO AP (%)", title="validation mAP")
    for ax in (ax_loss, ax_ap):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    atomic_write(path, lambda f: f.write(buffer.getvalue()))
