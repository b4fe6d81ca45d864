"""Label images with a classifier (the engine of scripts/predict.py): the eval transform, top-k rows, the CSV.

Images are listed and decoded by :mod:`swinlite.images` (as training decodes them) and transformed with
the model's evaluation transform (``timm.data.resolve_model_data_config``; for a self-describing weights
file that is the run's val transform), so predictions on a run's val folder score exactly the run's val
top-1.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from timm.data import ImageNetInfo, create_transform, infer_imagenet_subset, resolve_model_data_config
from torch import nn
from torch.utils.data import DataLoader

from .images import ImageItem
from .predictions import Prediction, write_csv  # noqa: F401 (re-exported: the torch-free half)


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


def predict(
    model: nn.Module, loader: DataLoader, topk: int, device: torch.device
) -> Iterator[tuple[int, Prediction | str]]:
    """Yield (number of files done, a prediction or ``"path: why it was skipped"``) per file, in order.

    ``loader`` batches :class:`swinlite.images.ImageFiles` items with ``collate_fn=list``.
    """
    paths = loader.dataset.paths
    model = model.eval().to(device)
    done = 0
    for batch in loader:
        good: list[ImageItem] = [item for item in batch if item.image is not None]
        results: dict[int, Prediction | str] = {it.index: f"{paths[it.index]}: {it.error}" for it in batch if it.error}
        if good:
            with torch.inference_mode():
                logits = model(torch.stack([item.image for item in good]).to(device))  # [B, classes]
                probs = logits.float().softmax(dim=1)
            best = probs.topk(topk, dim=1)
            for row, item in enumerate(good):
                results[item.index] = Prediction(
                    paths[item.index], best.indices[row].tolist(), best.values[row].tolist()
                )
        for item in batch:
            done += 1
            yield done, results[item.index]
