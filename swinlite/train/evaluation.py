"""Evaluate a checkpoint on an ImageFolder split: top-1/top-5, loss, per-class accuracy, confusion matrix.

Checkpoints in any layout ``swinlite.convert_state_dict`` reads (swinlite, timm, official Microsoft,
torchvision) are accepted; weights written by ``scripts/train.py`` also carry the model name, class
names and preprocessing, so they need no other argument.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import timm
import torch
from matplotlib.figure import Figure  # a bare Figure saves with the Agg canvas: no pyplot, no display
from torch.utils.data import DataLoader

from ..convert import convert_state_dict
from ..io import atomic_write
from .checkpoint import load_weights, read_metadata
from .config import DataConfig
from .data import ImageFolderDataset, build_transforms, scan_split
from .engine import EvalResult, StepSettings, evaluate


@dataclass
class EvalSetup:
    model: torch.nn.Module
    loader: DataLoader
    classes: list[str]


def _classes_for(data_dir: Path, split: str, meta: dict) -> list[str]:
    if "classes" in meta:
        return list(meta["classes"])
    source = data_dir / "train" if (data_dir / "train").is_dir() else data_dir / split
    return scan_split(source, verify=False).classes


def prepare_evaluation(
    checkpoint: str | Path,
    data_dir: str | Path,
    model_name: str | None = None,
    split: str = "val",
    batch_size: int = 64,
    num_workers: int = 2,
    img_size: int | None = None,
) -> EvalSetup:
    """Load the checkpoint into its model and build the split's loader; ValueError on any mismatch."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise ValueError(f"--data-dir {data_dir} does not exist")
    meta = read_metadata(checkpoint) if str(checkpoint).endswith(".safetensors") else {}
    name = model_name or meta.get("model")
    if name is None:
        raise ValueError(f"{checkpoint} does not record its model; pass --model, e.g. swinlite_tiny_patch4_window7_224")
    raw = load_weights(checkpoint)
    state = convert_state_dict(raw)
    classes = _classes_for(data_dir, split, meta)
    head = state.get("head.fc.weight")
    if head is not None and head.shape[0] != len(classes):
        raise ValueError(f"{checkpoint} classifies {head.shape[0]} classes but {data_dir} has {len(classes)}")
    model = timm.create_model(name, num_classes=len(classes))
    model.load_state_dict(convert_state_dict(raw, model), strict=head is not None)
    pretrained = model.pretrained_cfg
    data = DataConfig(
        img_size=img_size or meta.get("img_size") or pretrained["input_size"][-1],
        crop_pct=meta.get("crop_pct", pretrained.get("crop_pct", 0.875)),
        interpolation=meta.get("interpolation", pretrained.get("interpolation", "bicubic")),
        mean=tuple(meta.get("mean", pretrained["mean"])),
        std=tuple(meta.get("std", pretrained["std"])),
    )
    dataset = ImageFolderDataset(scan_split(data_dir / split, classes).samples, build_transforms(data)[1])
    return EvalSetup(model, DataLoader(dataset, batch_size=batch_size, num_workers=num_workers), classes)


def plot_confusion(confusion: torch.Tensor, classes: list[str], path: str | Path) -> None:
    """Row-normalized confusion matrix (true class down, predicted across); counts shown for <= 20 classes."""
    rows = confusion / confusion.sum(1, keepdim=True).clamp(min=1)
    size = max(4.0, min(20.0, 0.45 * len(classes) + 2))
    fig = Figure(figsize=(size, size))
    ax = fig.subplots()
    ax.imshow(rows.numpy(), cmap="Blues", vmin=0, vmax=1)
    if len(classes) <= 20:
        ticks = range(len(classes))
        ax.set(xticks=ticks, yticks=ticks, xticklabels=classes, yticklabels=classes)
        for i in ticks:
            for j in ticks:
                count = int(confusion[i, j])
                if count:
                    ax.text(j, i, count, ha="center", va="center", color="white" if rows[i, j] > 0.5 else "black")
    ax.set(xlabel="predicted", ylabel="true", title="confusion matrix")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    atomic_write(path, lambda f: f.write(buffer.getvalue()))


def run_evaluation(setup: EvalSetup, device: torch.device, amp_dtype: torch.dtype | None = None) -> EvalResult:
    setup.model.to(device)
    return evaluate(setup.model, setup.loader, len(setup.classes), StepSettings(device, amp_dtype))


def format_report(result: EvalResult, classes: list[str]) -> str:
    """Overall numbers, then one line per class."""
    lines = [f"top-1 {result.top1:.2f}%  top-5 {result.top5:.2f}%  loss {result.loss:.4f}", "per-class accuracy:"]
    counts = result.confusion.sum(1)
    for name, acc, n in zip(classes, result.per_class_accuracy.tolist(), counts.tolist(), strict=True):
        lines.append(f"  {name:<20} {acc:6.2f}%  ({int(n)} images)")
    return "\n".join(lines)
