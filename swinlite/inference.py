"""Label images with a classifier (the engine of scripts/predict.py): the eval transform, top-k rows, the CSV.

Images are listed and decoded by :mod:`swinlite.images` (as training decodes them) and transformed with
the model's evaluation transform (``timm.data.resolve_model_data_config``; for a self-describing weights
file that is the run's val transform), so predictions on a run's val folder score exactly the run's val
top-1.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator

import torch
from PIL import Image
from timm.data import (
    DEFAULT_CROP_PCT,
    ImageNetInfo,
    create_transform,
    infer_imagenet_subset,
    resolve_model_data_config,
)
from torch import nn
from torch.utils.data import DataLoader
from torchvision import transforms

from .files import center_crop_scale, elongation_problem
from .images import ImageItem
from .predictions import Prediction, write_csv  # noqa: F401 (re-exported: the torch-free half)

MLP_RATIO = 4  # the MLP's hidden width over its block's, in every registered variant: a stage's widest activation


def batch_too_large(
    model: nn.Module, batch_size: int, size: int, memory: int, element_size: int = 4, what: str = "--img-size"
) -> str | None:
    """Why batches of ``batch_size`` images of ``size`` x ``size`` pixels cannot run in ``memory`` bytes (the
    device's: :func:`~swinlite.device.device_memory`), or None. A lower bound of the forward pass's peak: two tensors
    of the first stage's MLP (its hidden layer's output and GELU's, ``MLP_RATIO`` times the stage's channels at the
    stage's resolution, ``element_size`` bytes a value) live at once; ``--img-size 5000`` swapped for minutes before
    the first batch ended. The message names ``what`` set the size, the batch and the device's memory."""
    first = model.feature_info[0]  # {"num_chs", "reduction"}
    tokens = math.ceil(size / first["reduction"]) ** 2
    need = 2 * element_size * batch_size * tokens * MLP_RATIO * first["num_chs"]
    if need <= memory:
        return None
    return (
        f"{what} {size}: a batch of {batch_size} images of {size}x{size} needs at least {need / 2**30:.1f} GiB (the "
        f"model's first stage: two tensors of its MLP's {MLP_RATIO * first['num_chs']} channels at "
        f"1/{first['reduction']} of the size), more than the device's {memory / 2**30:.1f} GiB: lower the size or "
        "--batch-size"
    )


def check_rgb_model(model: nn.Module, source: object) -> None:
    """ValueError unless ``model`` (read from ``source``, its weights file) takes 3-channel images: the scripts load
    images as RGB (an alpha never reaches the model), as the ONNX predictor does
    (:func:`swinlite.onnx_predict.check_channels`). Called once the model is read, before data is scanned or an output
    written; Python code feeds a model of other channels (``swinlite.load_model``) itself.
    """
    size = list(resolve_model_data_config(model)["input_size"])  # [C, H, W]
    channels = getattr(model, "in_chans", size[0])
    if channels != 3 or size[0] != 3:
        raise ValueError(
            f"{source} holds a model of {channels}-channel images (input_size {size}): the scripts feed RGB images, "
            "expected [3, H, W]"
        )


def eval_transform(model: nn.Module) -> Callable[[Image.Image], torch.Tensor]:
    """The model's evaluation transform (resize, center crop, normalize) from its ``pretrained_cfg``; in timm's
    "center" crop mode an image too elongated to resize is a ValueError (:func:`swinlite.files.elongation_problem`),
    which :class:`~swinlite.images.ImageFiles` reports as the reason to skip it."""
    config = resolve_model_data_config(model)
    transform = create_transform(**config, is_training=False)
    shorter = eval_resize_shorter(config)
    if shorter is None:
        return transform
    return transforms.Compose([functools.partial(_refuse_elongated, shorter=shorter), transform])  # picklable


def eval_resize_shorter(config: dict) -> int | None:
    """The shorter side timm's evaluation transform for a data ``config`` (``resolve_model_data_config``) resizes
    images to, in its "center" crop mode; None in the other modes (which keep no aspect ratio to blow up)."""
    if (config.get("crop_mode") or "center") != "center":
        return None
    return center_crop_scale(config["input_size"][1:], config.get("crop_pct") or DEFAULT_CROP_PCT)


def _refuse_elongated(image: Image.Image, shorter: int) -> Image.Image:
    problem = elongation_problem(image.height, image.width, shorter)
    if problem is not None:
        raise ValueError(problem)
    return image


def class_names(model: nn.Module) -> list[str]:
    """The recorded class names, else ImageNet's (timm's ``ImageNetInfo``) for an ImageNet head, else indices.

    Raises:
        ValueError: the model has no classifier (``num_classes=0``, as :func:`swinlite.load_model` builds it for
            weights that hold none): there is nothing to label.
    """
    if model.num_classes == 0:
        name = model.pretrained_cfg.get("architecture", type(model).__name__)
        raise ValueError(
            f"this {name} has no classifier (num_classes=0: its weights hold none), so there are no classes to "
            "label; for its features use scripts/extract_features.py or export_onnx.py --features"
        )
    names = model.pretrained_cfg.get("label_names")
    if names and len(names) == model.num_classes:
        return list(names)
    subset = infer_imagenet_subset(model)
    if subset is not None:
        info = ImageNetInfo(subset)
        return [info.index_to_description(i) for i in range(model.num_classes)]
    return [str(i) for i in range(model.num_classes)]


def predict(
    model: nn.Module, loader: DataLoader, topk: int, device: torch.device, amp: torch.dtype | None = None
) -> Iterator[tuple[int, Prediction | str]]:
    """Yield (number of files done, a prediction or ``"path: why it was skipped"``) per file, in order.

    ``loader`` batches :class:`swinlite.images.ImageFiles` items with ``collate_fn=list``; ``amp`` is the autocast
    dtype (``swinlite.device.autocast_dtype``; None: full precision); the classes are ranked and their probabilities
    computed in fp32 (:func:`top_k`). ``model`` is moved to ``device`` (``model.to(device)``: it stays there) and runs
    in eval mode (:func:`eval_mode`: each of its modules is back in its own mode once the iteration ends, or the
    generator is closed).
    """
    paths = loader.dataset.paths
    model.to(device)
    done = 0
    with eval_mode(model):
        for batch in loader:
            good: list[ImageItem] = [item for item in batch if item.image is not None]
            results: dict[int, Prediction | str] = {
                it.index: f"{paths[it.index]}: {it.error}" for it in batch if it.error
            }
            if good:
                with torch.inference_mode(), torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                    logits = model(torch.stack([item.image for item in good]).to(device))  # [B, classes]
                indices, probs = top_k(logits, topk)  # [B, k] each
                for row, item in enumerate(good):
                    results[item.index] = Prediction(paths[item.index], indices[row].tolist(), probs[row].tolist())
            for item in batch:
                done += 1
                yield done, results[item.index]


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode inside; after, each of its modules back in the mode it was in (a training model's
    frozen stages, which it keeps in eval mode, too): the library's inference leaves a caller's model as it was."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def top_k(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, classes] -> (indices, probabilities) [B, k] of the ``k`` best classes, best first.

    Ranked by the fp32 logits, equal ones to the lower index (a stable sort): softmax keeps the order of distinct
    logits, but rounds a confident model's runner-ups to the same probability (often 0), which ``probs.topk`` then
    ordered arbitrarily (on the CPU ``torch.full((1, 4), 0.25).topk(4)`` gives 2, 3, 0, 1). The probabilities are the
    fp32 softmax. :func:`swinlite.onnx_predict.top_k` is the same rule in NumPy (tests/test_onnx_predict.py pins them
    together).
    """
    logits = logits.float()
    order = logits.sort(dim=1, descending=True, stable=True).indices[:, :k]  # [B, k]
    return order, logits.softmax(dim=1).gather(1, order)
