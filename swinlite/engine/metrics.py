"""Per-epoch metrics: ``metrics.csv`` (one row per epoch) and ``curves.png``, both rewritten whole each epoch;
optionally TensorBoard event files beside them."""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

from ..io import atomic_write
from .checkpoint import writing

# the engine's columns of a metrics row, which a task's evaluate key or training loss part of the same name would
# replace (each refused; an evaluate key is refused the parts' names, ``loss_*``, too)
ENGINE_COLUMNS = ("epoch", "train_loss", "lr", "epoch_time", "train_img_s")


def _columns(history: list[dict[str, float]]) -> list[str]:
    """Every key of the rows, in the order they first appear (a run resumed with EMA on or off gains or loses
    the ``*_ema`` columns)."""
    return list(dict.fromkeys(key for row in history for key in row))


def write_csv(history: list[dict[str, float | None]], path: str | Path) -> None:
    """Write all epochs so far, one column per key of any row (empty where a row lacks it, or holds None: a value not
    measured)."""
    columns = _columns(history)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in history:
        writer.writerow({k: _fmt(row[k]) for k in columns if row.get(k) is not None})
    atomic_write(path, lambda f: f.write(text.getvalue().encode()))


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:.6g}"


def plot_curves(history: list[dict[str, float]], path: str | Path, metrics: dict[str, str]) -> None:
    """Training losses (total and parts) and validation loss against epoch; ``metrics`` (column: label) beside."""
    # loaded here: a task's config, predictor and export import the engine and need no [train] extra (engine.run
    # names a missing matplotlib before a run starts); a bare Figure saves with the Agg canvas: no pyplot, no display
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(10, 4))
    # fixed margins (the titles name what the y axes hold): tight_layout measured every tick label on every epoch
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.12, top=0.92, wspace=0.15)
    ax_loss, ax_metric = fig.subplots(1, 2)
    columns = _columns(history)
    losses = ["train_loss", *sorted(k for k in columns if k.startswith("loss_")), "val_loss"]

    def curve(key: str) -> tuple[list[float], list[float]]:  # (epochs, values) of the rows that hold ``key``
        rows = [r for r in history if key in r]
        return [r["epoch"] for r in rows], [r[key] for r in rows]

    for key in (k for k in losses if k in columns):
        width = 1 if key.startswith("loss_") else 2
        ax_loss.plot(*curve(key), marker=".", label=key.replace("_loss", ""), linewidth=width)
    for key, label in metrics.items():
        ax_metric.plot(*curve(key), marker=".", label=label)
    # the titles at a fixed height (no search for the tick labels under them) and whole epochs on the x axes
    ax_loss.set_title("loss", y=1.0)
    ax_metric.set_title("validation metrics", y=1.0)
    for ax in (ax_loss, ax_metric):
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    atomic_write(path, lambda f: f.write(buffer.getvalue()))


class TensorBoardLog:
    """TensorBoard event files in ``folder``: the running loss and lr per step, every metrics row per epoch.

    Every tag is on one axis, the optimizer steps done: a step's scalars at its 1-based count, an epoch's row at the
    count when the epoch ends (as Lightning logs; ``epoch/epoch`` holds its number), so that a run resumed after step
    n, purging from step n + 1, drops exactly the events a killed run wrote after that point. The run's event file is
    opened once: by :meth:`open` on resume, else by the first event.

    Args:
        folder: the run's output folder (beside metrics.csv).
    """

    def __init__(self, folder: str | Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ValueError(
                "train.tensorboard=true needs the tensorboard package: pip install tensorboard "
                '(or, in a checkout, pip install -e ".[train]")'
            ) from None
        self.folder, self.summary_writer, self.writer = Path(folder), SummaryWriter, None
        # the writer's file as its errors name it: its writes fail in a thread of TensorBoard's (a full disk), which
        # the next call of this process raises again, naming no file
        self.events = self.folder / "events.out.tfevents.*"

    def open(self, purge_step: int | None = None) -> None:
        """Open the run's event file; ``purge_step``: on resume, the first step not done: TensorBoard drops the events
        that the older files hold from it on (those a killed run wrote after the resume point).

        TensorBoard reads a folder's event files in the order of their names, which begin with the second they were
        opened in and end with a counter of the process (``...tfevents.<second>.<host>.<pid>.<n>``): the file of a
        run resumed within the second of the last one's could sort before it (``.10`` before ``.9``), and its later
        steps were then purged as out of order. The file is opened in a second no file of the folder names."""
        while any(self.folder.glob(f"events.out.tfevents.{int(time.time()):010d}.*")):
            time.sleep(0.05)
        with writing(self.events):
            self.writer = self.summary_writer(log_dir=str(self.folder), purge_step=purge_step)

    def step(self, step: int, loss: float, lr: float) -> None:
        """The running loss and the lr after ``step`` optimizer steps."""
        if self.writer is None:
            self.open()
        with writing(self.events):
            self.writer.add_scalar("train/running_loss", loss, step)
            self.writer.add_scalar("train/lr", lr, step)

    def epoch(self, row: dict[str, float | None], step: int) -> None:
        """An epoch's metrics row (its number as ``epoch/epoch``) at ``step``, the steps done when it ended; flushed
        with every event before it."""
        if self.writer is None:
            self.open()
        with writing(self.events):
            for key, value in row.items():
                if value is not None:  # not measured (metrics.csv leaves its cell empty)
                    self.writer.add_scalar(f"epoch/{key}", value, step)
        self.flush()

    def flush(self) -> None:
        """Write the events so far to the file (before a resume file marks them done)."""
        if self.writer is not None:
            with writing(self.events):
                self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            with writing(self.events):
                self.writer.close()
