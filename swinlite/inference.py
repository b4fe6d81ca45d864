"""Label images with a classifier (the engine of scripts/predict.py): find images, decode, top-k rows.

Images are opened with the training loader's ``load_rgb`` and transformed with the model's evaluation
transform (``timm.data.resolve_model_data_config``; for a self-describing weights file that is the
run's val transform), so predictions on a run's val folder score exactly the run's val top-1.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from timm.data import ImageNetInfo, create_transform, infer_imagenet_subset, resolve_model_data_config
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .classification.data import load_rgb
from .io import atomic_write_bytes


def pick_device(name: str) -> torch.device:
    """``"auto"``: CUDA when there is one, else the CPU; ValueError for a device this machine lacks."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available here; use --device cpu")
    return device


def eval_transform(model: nn.Module) -> torch.nn.Module:
    """The model's evaluation transform (resize, center crop, normalize) from its ``pretrained_cfg``."""
    return create_transform(**resolve_model_data_config(model), is_training=False)


def class_names(model: nn.Module) -> list[str]:
    """The recorded class names, else ImageNet's (timm's ``ImageNetInfo``) for an ImageNet head, else indices."""
    names = model.pretrained_cfg.get("label_names")
    if names and len(names) == model.num_classes:
        return list(names)
    subset = infer_imagenet_subset(model)
    if subset is not None:
        info = ImageNetInfo(subset)
        return [info.index_to_description(i) for i in range(model.num_classes)]
    return [str(i) for i in range(model.num_classes)]


def collect_images(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Files given, and every file under the folders given (recursive, sorted, hidden ones left out)."""
    found = []
    for path in map(Path, paths):
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
            if not files:
                raise ValueError(f"the folder {str(path)!r} holds no files")
            found += files
        elif path.is_file():
            found.append(path)
        else:
            raise ValueError(f"{str(path)!r} does not exist")
    return found


class ImageFiles(Dataset):
    """(index, image [3, H, W]) per file, or (index, why it could not be read)."""

    def __init__(self, paths: list[Path], transform: torch.nn.Module) -> None:
        self.paths = paths
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor | str]:
        try:
            return i, self.transform(load_rgb(self.paths[i]))
        except Exception as e:  # PIL raises many types for files that are not images or are broken
            return i, f"{type(e).__name__}: {e}"


@dataclass(frozen=True)
class Prediction:
    """Top-k of one image: class indices and probabilities, best first."""

    path: Path
    indices: list[int]
    probs: list[float]


def predict(
    model: nn.Module, loader: DataLoader, topk: int, device: torch.device
) -> Iterator[tuple[int, Prediction | str]]:
    """Yield (number of files done, a prediction or ``"path: why it was skipped"``) per file, in order.

    ``loader`` batches :class:`ImageFiles` items with ``collate_fn=list``.
    """
    paths = loader.dataset.paths
    model = model.eval().to(device)
    done = 0
    for batch in loader:
        good = [(i, x) for i, x in batch if isinstance(x, torch.Tensor)]
        results: dict[int, Prediction | str] = {i: f"{paths[i]}: {x}" for i, x in batch if isinstance(x, str)}
        if good:
            with torch.inference_mode():
                probs = model(torch.stack([x for _, x in good]).to(device)).float().softmax(dim=1)  # [B, classes]
            best = probs.topk(topk, dim=1)
            for row, (i, _) in enumerate(good):
                results[i] = Prediction(paths[i], best.indices[row].tolist(), best.values[row].tolist())
        for i, _ in batch:
            done += 1
            yield done, results[i]


def write_csv(predictions: list[Prediction], classes: list[str], topk: int, path: str | os.PathLike) -> None:
    """Columns ``path, class, prob`` then ``class_2, prob_2, ...`` up to ``topk``; written atomically."""
    header = ["path", "class", "prob"]
    for k in range(2, topk + 1):
        header += [f"class_{k}", f"prob_{k}"]
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(header)
    for p in predictions:
        row: list[object] = [str(p.path)]
        for index, prob in zip(p.indices, p.probs, strict=True):
            row += [classes[index], f"{prob:.6f}"]
        writer.writerow(row)
    atomic_write_bytes(path, text.getvalue().encode())
