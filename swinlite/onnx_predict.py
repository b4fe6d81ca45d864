"""Run an exported swinlite ONNX file with ONNX Runtime, NumPy and Pillow only: no torch anywhere on this path.

``scripts/predict.py --onnx``, ``detect.py --onnx`` and ``segment.py --onnx`` use it. It reads what it needs from
the file's metadata (written by :mod:`swinlite.export`; values are JSON): ``task``, ``classes``, ``preprocessing``
(timm's data config) and ``input_sizes`` for a classifier; ``category_ids``, ``classes`` and ``input_sizes`` for a
detector; ``classes``, ``palette``, ``preprocessing`` (mean, std, test settings) and ``input_sizes`` for a
segmenter. What each task does around its graph is PyTorch's, in NumPy, to the last bit or within float32 rounding
(``tests/test_onnx_predict.py`` and the tasks' ONNX tests check each against torch, torchvision or timm): timm's
evaluation transform (:func:`preprocess`), the detector's resize (:func:`bilinear_resize`), Mask R-CNN's mask
pasting (:func:`paste_masks`), the segmenter's antialiased rescale (:func:`antialiased_resize`), its windows, flips
and averaging (:func:`segment_scores`), and torchvision's drawings (:func:`draw_detections`, :func:`draw_boxes`,
:func:`draw_masks`).

This module, :mod:`swinlite.files`, :mod:`swinlite.metadata`, :mod:`swinlite.seg_views` and :mod:`swinlite.colours`
import no torch, but ``import swinlite.x`` runs ``swinlite/__init__.py``, which does: the scripts load them through
``_cli.import_without_torch``.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from .colours import label_colour
from .files import center_crop_scale, elongation_problem
from .metadata import PREPROCESSING_KEYS, check_preprocessing
from .script import extra_error
from .seg_views import TEST_MODES, large_problem, slide_windows, stride_problem, stride_unused, test_views
from .wording import counted

INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
    "lanczos": Image.Resampling.LANCZOS,
}
DEFAULT_CROP_PCT = 0.875  # timm's, when a config has none
# what runs each task's ONNX file, named where another task's is given (the evaluation scripts read checkpoints only)
ONNX_SCRIPTS = {"detection": "scripts/detect.py --onnx", "segmentation": "scripts/segment.py --onnx"}


@dataclass(frozen=True)
class OnnxModel:
    """An ONNX Runtime session and what the file says about its model.

    Attributes:
        path: the file.
        session: the ONNX Runtime session (CPU).
        metadata: the file's ``metadata_props``, each value JSON-decoded where it parses.
        input_name: the graph's (first) input.
        channels: image channels the input takes, or None when the graph leaves them open.
        sizes: ((min H, max H), (min W, max W)) the graph serves (``input_sizes``), or None when not recorded.
        batch: the batch an input [B, C, H, W] of a fixed batch takes (another exporter's file: ``torch.onnx.export``
            without ``dynamic_axes`` fixes it to its example's, often 1), or None when the graph leaves it open.
    """

    path: Path
    session: Any
    metadata: dict[str, Any]
    input_name: str
    channels: int | None
    sizes: tuple[tuple[int, int], tuple[int, int]] | None
    batch: int | None = None

    @property
    def task(self) -> str | None:
        return self.metadata.get("task")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _decode(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def open_model(path: str | os.PathLike) -> OnnxModel:
    """Load ``path`` into an ONNX Runtime CPU session and read its metadata.

    Raises:
        ValueError: a missing file or a folder, a file that is not ONNX or is truncated, recorded input sizes that are
            not ``{"height": [min, max], "width": [min, max]}``; each naming the file.
        ModuleNotFoundError: ONNX Runtime is not installed, naming the extra that holds it
            (:func:`swinlite.script.extra_error`).
    """
    try:
        import onnxruntime as ort
    except ModuleNotFoundError as e:
        raise extra_error(e, "swinlite.onnx_predict.open_model") from None

    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not an ONNX file")
    if not path.is_file():
        raise ValueError(f"ONNX file {path} does not exist")
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # ONNX Runtime raises its own types for files that are not (whole) ONNX models
        raise ValueError(f"{path} is not an ONNX model, or is truncated: {_first_line(e)}") from None
    metadata = {k: _decode(v) for k, v in session.get_modelmeta().custom_metadata_map.items()}
    graph_input = session.get_inputs()[0]
    shape = graph_input.shape
    channels = shape[-3] if len(shape) >= 3 and isinstance(shape[-3], int) else None
    batch = shape[0] if len(shape) == 4 and isinstance(shape[0], int) else None
    sizes = _input_sizes(metadata, path, shape)
    return OnnxModel(path, session, metadata, graph_input.name, channels, sizes, batch)


def _input_sizes(
    metadata: dict[str, Any], path: Path, shape: list[int | str | None]
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The recorded sizes; without them a graph's static height and width (a file from another exporter), or None."""
    sizes = metadata.get("input_sizes")
    if sizes is None:
        static = len(shape) >= 2 and all(isinstance(side, int) for side in shape[-2:])
        return ((shape[-2],) * 2, (shape[-1],) * 2) if static else None
    try:
        (h0, h1), (w0, w1) = sizes["height"], sizes["width"]
        if all(isinstance(v, int) for v in (h0, h1, w0, w1)) and 1 <= h0 <= h1 and 1 <= w0 <= w1:
            return (h0, h1), (w0, w1)
    except (TypeError, KeyError, ValueError):
        pass
    raise ValueError(f"{path}: metadata input_sizes must be {{'height': [min, max], 'width': [min, max]}}, got {sizes}")


def size_problem(model: OnnxModel, height: int, width: int) -> str | None:
    """Why the graph cannot take an image of ``height`` x ``width``, naming the range it serves and how to export one
    that serves it (where an export can: none takes less than :func:`smallest_export`); None if it can."""
    if model.sizes is None:
        return None
    (h0, h1), (w0, w1) = model.sizes
    if h0 <= height <= h1 and w0 <= width <= w1:
        return None
    smallest = smallest_export(model)
    if smallest is not None and (height < smallest[0] or width < smallest[1]):
        if model.task not in ("detection", "segmentation"):
            return (
                f"{height}x{width} (HxW) is smaller than any export of {model.metadata.get('model', 'its model')} "
                f"takes ({smallest[0]} pixels a side)"
            )
        kind = {"detection": "detector", "segmentation": "segmenter"}[model.task]
        return (
            f"{height}x{width} (HxW) is smaller than {model.path.name} takes (height from {smallest[0]}, width from "
            f"{smallest[1]}; no {kind} export takes less)"
        )
    if h0 == h1 and w0 == w1:  # --fixed-size (a range has min < max), or another exporter's static H and W
        served, advice = f"{h0}x{w0} only", "export a range of sizes: scripts/export_onnx.py without --fixed-size"
    else:
        served = f"height {h0}..{h1}, width {w0}..{w1}"
        advice = "export again with scripts/export_onnx.py " + (
            "--max-size" if height > h1 or width > w1 else "--min-size, which goes no lower than the model's minimum"
        )
    return f"{height}x{width} (HxW) is outside the sizes {model.path.name} was exported for: {served} ({advice})"


def smallest_export(model: OnnxModel) -> tuple[int, int] | None:
    """(height, width) below which no export of the file's model serves an image, where the file tells, else None.

    A detector's smallest size is its file's (one pixel above the coarsest stride: it takes no ``--min-size``). The
    others' is recorded by ``scripts/export_onnx.py`` (``smallest_size``: one patch, or one pixel above the coarsest
    stride of the maps; it refuses a ``--min-size`` below it); a file without the record (an older swinlite's,
    another exporter's) does not tell, but for a segmenter's, whose smallest size is taken to be its file's.
    """
    if model.sizes is None:
        return None
    (low_h, _), (low_w, _) = model.sizes
    smallest = model.metadata.get("smallest_size")
    if model.task != "detection" and isinstance(smallest, int) and not isinstance(smallest, bool):
        return smallest, smallest
    return (low_h, low_w) if model.task in ("detection", "segmentation") else None


def check_channels(model: OnnxModel) -> None:
    """ValueError unless the graph takes 3-channel images: the predictors feed RGB."""
    if model.channels is not None and model.channels != 3:
        raise ValueError(f"{model.path} takes {model.channels}-channel images; the predictor feeds 3 (RGB)")


def check_rgb(image: Image.Image) -> None:
    """ValueError unless ``image`` is an RGB PIL image. Not converted here: 16-bit and float modes need the scaling
    :func:`swinlite.files.load_rgb` applies (``convert("RGB")`` clips them), and the scripts read files with it."""
    if not isinstance(image, Image.Image):
        raise ValueError(f"expected an RGB PIL image (swinlite.files.load_rgb(path)), got {type(image).__name__}")
    if image.mode != "RGB":
        raise ValueError(
            f"expected an RGB image, got a {image.height}x{image.width} (HxW) image of mode {image.mode}: read files "
            'with swinlite.files.load_rgb(path), or convert an 8-bit image with image.convert("RGB")'
        )


# --- classification ---------------------------------------------------------------------------------------------


def classifier_settings(
    model: OnnxModel, classes: list[str] | None = None, preprocessing: dict[str, Any] | None = None
) -> tuple[list[str], dict[str, Any]]:
    """The class names and preprocessing of a classifier: the file's metadata, or the given ones; given preprocessing
    keys replace the file's one by one (``{"input_size": [3, 64, 64]}`` keeps the file's crop, interpolation, mean).

    Raises:
        ValueError: the file is not a classifier's; names or preprocessing neither recorded nor given (naming
            which, and the flags); invalid values (naming the flag when given, else the file); a class count that
            differs from the graph's outputs.
    """
    check_classifier(model)
    classes = classes if classes is not None else model.metadata.get("classes")
    name = "--preprocessing" if preprocessing is not None else f"{model.path}: metadata preprocessing"
    if isinstance(preprocessing, dict):
        _check_keys(preprocessing, name)
    recorded = model.metadata.get("preprocessing")
    if isinstance(preprocessing, dict) and isinstance(recorded, dict):
        preprocessing = recorded | preprocessing  # a key not given stays the file's, not timm's default
    preprocessing = preprocessing if preprocessing is not None else recorded
    missing = [flag for flag, v in (("--classes", classes), ("--preprocessing", preprocessing)) if v is None]
    if missing:
        raise ValueError(
            f"{model.path} has no swinlite metadata for its {' and '.join(f[2:] for f in missing)}: pass "
            f"{' and '.join(missing)} (see --help)"
        )
    if not (isinstance(classes, list) and classes and all(isinstance(c, str) for c in classes)):
        raise ValueError(f"{model.path}: class names must be a non-empty list of strings, got {str(classes)[:80]}")
    size = preprocessing.get("input_size") if isinstance(preprocessing, dict) else None
    if isinstance(size, list | tuple) and size and size[0] != 3:  # before its mean and std are counted against it
        raise ValueError(f"{name} input_size {list(size)}: the predictor feeds RGB images, expected [3, H, W]")
    preprocessing = check_preprocessing(preprocessing, name)
    outputs = model.session.get_outputs()[0].shape[-1]
    if isinstance(outputs, int) and outputs != len(classes):
        raise ValueError(f"{model.path} has {outputs} outputs but {len(classes)} class names")
    check_channels(model)
    problem = size_problem(model, *preprocessing["input_size"][1:])
    if problem:
        raise ValueError(f"{name} input_size: {problem}")
    return classes, preprocessing


def check_classifier(model: OnnxModel) -> None:
    """ValueError naming the task of a file recorded as another task's (no record: taken as a classifier's), and the
    script that runs it (:data:`ONNX_SCRIPTS`)."""
    if model.task not in (None, "classification"):
        runs = f"; use {ONNX_SCRIPTS[model.task]}" if model.task in ONNX_SCRIPTS else ""
        raise ValueError(f"{model.path} is a {model.task} model, not a classifier{runs}")


def _check_keys(preprocessing: dict[str, Any], name: str) -> None:
    """ValueError naming the keys of a given ``preprocessing`` that are no timm data config key (a typo such as
    ``crop_pc`` was ignored: the file's value applied), with the known ones."""
    unknown = [key for key in preprocessing if key not in PREPROCESSING_KEYS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], PREPROCESSING_KEYS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(
            f"{name} has unknown keys {', '.join(map(repr, unknown))}{hint}; known: {', '.join(PREPROCESSING_KEYS)}"
        )


def _resized(size: tuple[int, int], target: int) -> tuple[int, int]:
    """(H, W) with the shorter side ``target`` and the other scaled: torchvision's ``Resize(int)`` rule."""
    h, w = size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(target * long / short)
    return (new_long, target) if w <= h else (target, new_long)


def _keep_ratio(size: tuple[int, int], target: tuple[int, int], longest: float) -> tuple[int, int]:
    """(H, W) scaled by one ratio to ``target``: timm's ``ResizeKeepRatio`` rule (no random scale or aspect)."""
    ratios = (size[0] / target[0], size[1] / target[1])
    ratio = max(ratios) * longest + min(ratios) * (1.0 - longest)
    return round(size[0] / ratio), round(size[1] / ratio)


def _center_crop(image: Image.Image, size: tuple[int, int], fill: tuple[int, ...] = (0, 0, 0)) -> Image.Image:
    """torchvision's ``center_crop`` (timm's ``center_crop_or_pad``): pad with ``fill`` if smaller, then crop."""
    h, w = size
    if w > image.width or h > image.height:
        left, top = max(w - image.width, 0) // 2, max(h - image.height, 0) // 2
        canvas = Image.new("RGB", (max(w, image.width), max(h, image.height)), fill)
        canvas.paste(image, (left, top))
        image = canvas
        if image.size == (w, h):
            return image
    top, left = int(round((image.height - h) / 2.0)), int(round((image.width - w) / 2.0))
    return image.crop((left, top, left + w, top + h))


def _resize(image: Image.Image, size: tuple[int, int], interpolation: str) -> Image.Image:
    if (image.height, image.width) == tuple(size):
        return image
    return image.resize((size[1], size[0]), INTERPOLATIONS[interpolation])


def preprocess(image: Image.Image, preprocessing: dict[str, Any]) -> np.ndarray:
    """timm's evaluation transform (``create_transform(**preprocessing)``) of an RGB image, as float32 [3, H, W].

    Resize (``crop_mode`` "center": shorter side to size / crop_pct; "squash": both sides; "border": longer
    side, then padded with the mean colour), center crop to ``input_size``, scale to 0..1, normalize.

    Raises:
        ValueError: an image that is not RGB (:func:`check_rgb`); "center" mode and an image too elongated to resize
            (:func:`swinlite.files.elongation_problem`).
    """
    check_rgb(image)
    _, height, width = preprocessing["input_size"]
    crop_pct = preprocessing.get("crop_pct") or DEFAULT_CROP_PCT
    interpolation = preprocessing.get("interpolation", "bilinear")
    mode = preprocessing.get("crop_mode") or "center"
    scale = (math.floor(height / crop_pct), math.floor(width / crop_pct))
    mean, std = preprocessing.get("mean", (0.485, 0.456, 0.406)), preprocessing.get("std", (0.229, 0.224, 0.225))
    fill = (0, 0, 0)
    if mode == "squash":
        image = _resize(image, scale, interpolation)
    elif mode == "border":
        image = _resize(image, _keep_ratio((image.height, image.width), scale, 1.0), interpolation)
        fill = tuple(round(255 * m) for m in mean)
    elif problem := elongation_problem(image.height, image.width, center_crop_scale((height, width), crop_pct)):
        raise ValueError(problem)
    elif scale[0] == scale[1]:
        image = _resize(image, _resized((image.height, image.width), scale[0]), interpolation)
    else:
        image = _resize(image, _keep_ratio((image.height, image.width), scale, 0.0), interpolation)
    return normalize(_center_crop(image, (height, width), fill), mean, std)


def normalize(image: Image.Image, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """An RGB image as float32 [3, H, W]: scaled to 0..1, then ``(x - mean) / std`` per channel."""
    pixels = np.asarray(image, dtype=np.uint8).astype(np.float32) / np.float32(255)  # [H, W, 3]
    return ((pixels - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)).transpose(2, 0, 1)


def batch_size(model: OnnxModel, given: int | None, default: int) -> int:
    """Images per forward pass: ``given`` (``--batch-size``), else ``default``; the batch of a graph that fixes it
    (:attr:`OnnxModel.batch`), which takes no other.

    Raises:
        ValueError: a ``given`` batch size the graph does not take.
    """
    if model.batch is None:
        return default if given is None else given
    if given not in (None, model.batch):
        raise ValueError(
            f"--batch-size {given}: {model.path} takes batches of {counted(model.batch, 'image')} only (its input's "
            f"batch is fixed): drop --batch-size, or pass {model.batch}"
        )
    return model.batch


def classify(model: OnnxModel, images: np.ndarray) -> np.ndarray:
    """Class probabilities [B, classes] (:func:`softmax` of :func:`class_logits`) of preprocessed images
    [B, C, H, W]; an empty batch (B = 0) gives [0, classes]. Raises as :func:`class_logits`."""
    return softmax(class_logits(model, images))


def class_logits(model: OnnxModel, images: np.ndarray) -> np.ndarray:
    """Logits [B, classes] (float32) of preprocessed images [B, C, H, W]; an empty batch (B = 0) gives [0, classes].

    A graph of a fixed batch (:attr:`OnnxModel.batch`) is fed that many at a time, the last ones padded with zeros
    whose outputs are dropped (ONNX Runtime refuses any other batch).

    Raises:
        ValueError: a file recorded as another task's (:func:`check_classifier`); images that are not a floating-point
            [B, C, H, W] batch of the graph's channels (:func:`check_images`), or of a size it does not serve.
    """
    check_classifier(model)
    images = check_images(model, images)
    problem = size_problem(model, *images.shape[2:])
    if problem:
        raise ValueError(problem)
    if model.batch is None:  # fed whole: the graph takes any batch, an empty one included
        logits = model.session.run(None, {model.input_name: images})[0]
    else:  # at least one batch, so that an empty one gets the outputs' shape
        batch = model.batch
        count = max(math.ceil(len(images) / batch), 1) * batch
        padded = np.concatenate([images, np.zeros((count - len(images), *images.shape[1:]), np.float32)])
        runs = [model.session.run(None, {model.input_name: padded[i : i + batch]})[0] for i in range(0, count, batch)]
        logits = np.concatenate(runs)
    return logits[: len(images)].astype(np.float32)


def softmax(logits: np.ndarray) -> np.ndarray:
    """logits [B, classes] -> probabilities [B, classes], in float32."""
    logits = logits.astype(np.float32)
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def check_images(model: OnnxModel, images: np.ndarray) -> np.ndarray:
    """``images`` as contiguous float32, after a ValueError naming the expected input unless they are a
    floating-point [B, C, H, W] batch of the graph's channels (3 where it leaves them open): uint8 pixels would be
    fed unscaled and unnormalised, as the PyTorch model refuses them."""
    images = np.asarray(images)
    channels = model.channels or 3
    expected = f"normalised float images [B, {channels}, H, W] (e.g. preprocess() outputs, stacked)"
    if images.ndim != 4:
        raise ValueError(f"expected {expected}, got an array of shape {images.shape}")
    if not np.issubdtype(images.dtype, np.floating):
        raise ValueError(f"expected {expected}, got dtype {images.dtype}")
    if images.shape[1] != channels:
        hint = " (channels last? images.transpose(0, 3, 1, 2) puts them first)" if images.shape[3] == channels else ""
        raise ValueError(f"expected {expected}, got an array of shape {images.shape}{hint}")
    return np.ascontiguousarray(images, dtype=np.float32)


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """logits [B, classes] -> (indices, probabilities) [B, k] of the ``k`` best classes, best first: ranked by the
    float32 logits, equal ones to the lower index (a stable sort), the probabilities their :func:`softmax`; the rule
    of :func:`swinlite.inference.top_k` (why: there), which ranks the PyTorch path's."""
    logits = logits.astype(np.float32)
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]  # [B, k]
    return order, np.take_along_axis(softmax(logits), order, axis=1)


# --- detection --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DetectorSettings:
    """What a detector file records: COCO category ids and names (index ``label - 1``), and its resize sizes."""

    category_ids: list[int]
    names: list[str]
    test_size: int
    max_size: int


def detector_settings(model: OnnxModel) -> DetectorSettings:
    """The detector's categories and sizes from the file's metadata.

    Raises:
        ValueError: not a detector's file (naming its task, or the keys it lacks).
    """
    meta = model.metadata
    if model.task != "detection":
        what = f"a {model.task} model" if model.task else "a file without swinlite detector metadata"
        raise ValueError(f"{model.path} is {what}; export a detection checkpoint with scripts/export_onnx.py")
    missing = [k for k in ("category_ids", "classes", "data") if k not in meta]
    ids, names, data = meta.get("category_ids"), meta.get("classes"), meta.get("data")
    if missing or not isinstance(data, dict) or not isinstance(ids, list) or not isinstance(names, list):
        raise ValueError(f"{model.path}: its detector metadata lacks or mangles {', '.join(missing) or 'data'}")
    if len(ids) != len(names):
        raise ValueError(f"{model.path}: {len(ids)} category ids for {len(names)} class names")
    check_channels(model)
    return DetectorSettings(list(ids), list(names), int(data["test_size"]), int(data["max_size"]))


def resize_problem(settings: DetectorSettings, height: int, width: int) -> str | None:
    """Why the detector's resize (torchvision's: scale ``min(test / short side, max / long side)``, each side
    rounded down) would leave nothing of an image, or None."""
    new_height, new_width = resized_size(settings, height, width)
    if min(new_height, new_width) >= 1:
        return None
    return (
        f"a {height}x{width} (HxW) image would be resized to {new_height}x{new_width} (test size {settings.test_size}, "
        f"max size {settings.max_size}): too thin"
    )


def too_thin(model: OnnxModel, settings: DetectorSettings, height: int, width: int) -> str | None:
    """Why :func:`detect` cannot take a ``height`` x ``width`` image that is to be skipped, not refused, or None: the
    resize leaves nothing of it (:func:`resize_problem`), or a side thinner than the file's smallest size (no
    detector export takes less: it starts one pixel above the coarsest stride)."""
    problem = resize_problem(settings, height, width)
    if problem:
        return problem
    return _thin_problem(model, [resized_size(settings, height, width)], height, width, "resized to", "detector")


def _thin_problem(
    model: OnnxModel, sizes: list[tuple[int, int]], height: int, width: int, change: str, kind: str
) -> str | None:
    """Why a ``height`` x ``width`` image fed to the graph at ``sizes`` (H, W) is to be skipped: one of them thinner
    than no ``kind`` export serves (:func:`smallest_export`); None if none is (or the file records no sizes)."""
    smallest = smallest_export(model)
    if smallest is None:
        return None
    low_h, low_w = smallest
    small = next(((h, w) for h, w in sizes if h < low_h or w < low_w), None)
    if small is None:
        return None
    return (
        f"a {height}x{width} (HxW) image would be {change} {small[0]}x{small[1]}, thinner than {model.path.name} "
        f"takes (height from {low_h}, width from {low_w}; no {kind} export takes less): too thin"
    )


def resized_size(settings: DetectorSettings, height: int, width: int) -> tuple[int, int]:
    """The size the detector resizes an image to (torchvision's eval resize; see :func:`resize_problem`)."""
    scale = min(settings.test_size / min(height, width), settings.max_size / max(height, width))
    return math.floor(height * scale), math.floor(width * scale)


def _linear_weights(size: int, new_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Source indices and weights of linear interpolation with half-pixel centers, no antialiasing (float32)."""
    scale = np.float32(size) / np.float32(new_size)
    source = np.float64(scale) * (np.arange(new_size) + 0.5) - 0.5  # rounded once to float32, as torch's fused op
    source = np.maximum(source.astype(np.float32), np.float32(0))
    first = source.astype(np.int64)
    weight = np.clip(source - first.astype(np.float32), 0, 1).astype(np.float32)
    return first, np.minimum(first + 1, size - 1), np.float32(1) - weight, weight


def bilinear_resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """image [C, H, W] float32 -> [C, h, w]: ``torch.nn.functional.interpolate(mode="bilinear",
    align_corners=False)`` on CPU: the same weights, sums within float32 rounding. One channel at a time, so that
    the temporaries at the new size are one channel's (a segmenter's logits of 150 classes at a photo's size)."""
    r0, r1, wr0, wr1 = _linear_weights(image.shape[1], size[0])
    c0, c1, wc0, wc1 = _linear_weights(image.shape[2], size[1])
    resized = np.empty((image.shape[0], *size), dtype=np.result_type(image, np.float32))  # [C, h, w]
    for out, plane in zip(resized, image, strict=True):
        top, bottom = plane[r0], plane[r1]  # [h, W]
        top = wc0 * top[:, c0] + wc1 * top[:, c1]  # [h, w]
        bottom = wc0 * bottom[:, c0] + wc1 * bottom[:, c1]
        out[...] = wr0[:, None] * top + wr1[:, None] * bottom
    return resized


def detect(
    model: OnnxModel, settings: DetectorSettings, image: Image.Image
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """One RGB image -> boxes [N, 4] (x1, y1, x2, y2 in its pixels), scores [N], labels [N] (1-based class index),
    and for Mask R-CNN masks [N, 1, M, M] (probabilities within each box; :func:`paste_masks` puts them in the
    image), else None.

    The image is scaled to 0..1 and resized as the detector resizes it (:func:`resized_size`, bilinear), which the
    graph takes with the size it had.

    Raises:
        ValueError: an image that is not RGB (:func:`check_rgb`); an image the resize leaves nothing of, or resizes
            outside the graph's range (:func:`too_thin` says which of those to skip).
    """
    check_rgb(image)
    problem = too_thin(model, settings, image.height, image.width)
    if problem:  # its sizes are the image's own order, W x H; not prefixed with the resized H x W
        raise ValueError(problem)
    size = resized_size(settings, image.height, image.width)
    problem = size_problem(model, *size)
    if problem:
        raise ValueError(f"resized to {size[0]}x{size[1]} (HxW): {problem}")
    pixels = np.asarray(image, dtype=np.uint8).astype(np.float32).transpose(2, 0, 1) / np.float32(255)  # [3, H, W]
    feeds = {"image": bilinear_resize(pixels, size), "original_size": np.array([image.height, image.width])}
    boxes, scores, labels, *masks = model.session.run(None, feeds)
    return boxes, scores, labels, masks[0] if masks else None


def paste_masks(masks: np.ndarray, boxes: np.ndarray, height: int, width: int) -> np.ndarray:
    """masks [N, 1, M, M] (probabilities within their boxes), boxes [N, 4] (x1, y1, x2, y2) -> [N, H, W] float32
    probabilities in a ``height`` x ``width`` image: torchvision's ``paste_masks_in_image`` (each mask padded by one
    cell, its box grown to match and cut to whole pixels, the mask resized bilinearly into it)."""
    size = masks.shape[-1]
    padded = np.pad(masks[:, 0], ((0, 0), (1, 1), (1, 1)))  # [N, M + 2, M + 2]
    half = (boxes[:, 2:] - boxes[:, :2]) * np.float32(0.5) * np.float32((size + 2) / size)  # (w/2, h/2), grown
    centre = (boxes[:, 2:] + boxes[:, :2]) * np.float32(0.5)
    grown = np.concatenate([centre - half, centre + half], axis=1).astype(np.int64)  # toward zero, as torch's
    pasted = np.zeros((len(masks), height, width), dtype=np.float32)
    for k, (mask, (left, top, right, bottom)) in enumerate(zip(padded, grown.tolist(), strict=True)):
        resized = bilinear_resize(mask[None], (max(bottom - top + 1, 1), max(right - left + 1, 1)))[0]
        x0, x1, y0, y1 = max(left, 0), min(right + 1, width), max(top, 0), min(bottom + 1, height)
        pasted[k, y0:y1, x0:x1] = resized[y0 - top : y1 - top, x0 - left : x1 - left]
    return pasted


def draw_detections(
    image: Image.Image, boxes: np.ndarray, labels: np.ndarray, texts: list[str], masks: np.ndarray | None = None
) -> Image.Image:
    """``image`` with the detections kept drawn as :func:`swinlite.detection.predictor.draw_detections` draws them:
    ``masks`` [N, H, W] (bool; None: a detector without masks) each in the colour of its class of ``labels`` [N]
    (:func:`swinlite.colours.label_colour`) at alpha 0.4, then ``boxes`` [N, 4] with their ``texts``."""
    if masks is not None:
        image = draw_masks(image, masks, 0.4, [label_colour(int(label)) for label in labels])
    return draw_boxes(image, boxes, texts)


def draw_boxes(image: Image.Image, boxes: np.ndarray, texts: list[str]) -> Image.Image:
    """A copy of ``image`` with ``boxes`` [N, 4] in red, 2 px, each with its text: torchvision's
    ``draw_bounding_boxes(image, boxes, texts, colors="red", width=2)``, pixel for pixel."""
    image = image.copy()
    draw, font = ImageDraw.Draw(image), ImageFont.load_default()
    for box, text in zip(boxes.astype(np.int64).tolist(), texts, strict=True):
        draw.rectangle(box, width=2, outline=(255, 0, 0))
        draw.text((box[0] + 3, box[1] + 3), text, fill=(255, 0, 0), font=font)  # margin: width + 1
    return image


# --- segmentation -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmenterSettings:
    """What a segmenter file records: class names, one RGB colour per class, normalisation, and the test settings
    (see :class:`swinlite.segmentation.inference.InferenceSettings`)."""

    classes: list[str]
    palette: list[tuple[int, int, int]]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    img_scale: tuple[int, int]
    mode: str
    crop_size: tuple[int, int]
    stride: tuple[int, int]
    ratios: tuple[float, ...]
    flip: bool


def segmenter_settings(
    model: OnnxModel,
    mode: str | None = None,
    ratios: Sequence[float] | None = None,
    flip: bool | None = None,
    stride: Sequence[int] | None = None,
) -> SegmenterSettings:
    """The segmenter's classes, palette and test settings from the file's metadata; ``mode``, ``ratios``, ``flip``
    and ``stride`` change the latter where given (``scripts/segment.py --mode/--ratios/--flip/--no-flip/--stride``).

    Raises:
        ValueError: not a segmenter's file (naming its task), metadata that lacks or mangles a key, or a ``stride``
            for settings that predict each image whole (the ``mode`` given, or the file's without one).
    """
    meta = model.metadata
    if model.task != "segmentation":
        what = f"a {model.task} model" if model.task else "a file without swinlite segmenter metadata"
        raise ValueError(f"{model.path} is {what}; export a segmentation checkpoint with scripts/export_onnx.py")
    try:
        pre = meta["preprocessing"]
        settings = SegmenterSettings(
            [str(c) for c in meta["classes"]], [tuple(map(int, c)) for c in meta["palette"]],
            tuple(map(float, pre["mean"])), tuple(map(float, pre["std"])), tuple(map(int, pre["img_scale"])),
            mode or str(pre["mode"]), tuple(map(int, pre["crop_size"])), tuple(map(int, stride or pre["stride"])),
            tuple(map(float, ratios or pre["ratios"])), bool(pre["flip"]) if flip is None else flip,
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{model.path}: its segmenter metadata lacks or mangles {e}") from None
    if settings.mode not in TEST_MODES:
        raise ValueError(f"{model.path}: test mode must be one of {', '.join(TEST_MODES)}, got {settings.mode!r}")
    unused = stride_unused(stride, settings.mode, None if mode else str(model.path))
    if unused:
        raise ValueError(unused)
    problem = stride_problem(settings.crop_size, settings.stride) if settings.mode == "slide" else None
    if problem:  # a file of a run before data.test_stride was checked
        raise ValueError(f"{model.path}: slide mode: {problem} (or predict in mode whole; --stride H W, --mode whole)")
    outputs, count = model.session.get_outputs()[0].shape[1], len(settings.classes)
    if len(settings.palette) != count or (isinstance(outputs, int) and outputs != count):
        raise ValueError(f"{model.path}: {len(settings.classes)} classes, {len(settings.palette)} colours, "
                         f"{outputs} outputs")  # fmt: skip
    check_channels(model)
    return settings


def segment_sizes(settings: SegmenterSettings, height: int, width: int) -> list[tuple[int, int]]:
    """The sizes the graph is fed for a ``height`` x ``width`` image: each view's, or in slide mode each window's."""
    sizes = []
    for size, _ in test_views(height, width, settings.img_scale, settings.ratios, False):
        if settings.mode == "slide":
            sizes += [(b - t, r - left) for t, b, left, r in slide_windows(*size, settings.crop_size, settings.stride)]
        else:
            sizes.append(size)
    return list(dict.fromkeys(sizes))


def segment_too_thin(model: OnnxModel, settings: SegmenterSettings, height: int, width: int) -> str | None:
    """Why a ``height`` x ``width`` image is to be skipped, not refused, or None: a view (or window) thinner than the
    smallest segmenter export takes (one pixel above the coarsest stride), as the PyTorch path skips an image with a
    view thinner than the patch. In slide mode the sizes fed are windows of the rescaled views, and named so."""
    change = "rescaled and cut into windows, one of" if settings.mode == "slide" else "rescaled to"
    return _thin_problem(model, segment_sizes(settings, height, width), height, width, change, "segmenter")


def segment_problem(model: OnnxModel, settings: SegmenterSettings, height: int, width: int) -> str | None:
    """Why the graph cannot serve every view (or window) of a ``height`` x ``width`` image, or None: a prediction
    whose arrays would take more memory than an image's may (a view's at its full size beside the scores at the
    image's own size: :func:`~swinlite.seg_views.large_problem`, the PyTorch path's rule: the slide mode's windows
    fit the file's range however large the view), or a size out of that range."""
    problem = large_problem(height, width, settings.img_scale, settings.ratios, settings.flip, len(settings.classes))
    if problem:
        return problem
    for size in segment_sizes(settings, height, width):
        problem = size_problem(model, *size)
        if problem:
            cut = " and cut into slide windows" if settings.mode == "slide" else ""
            return f"rescaled by the test settings{cut}, {problem}"
    return None


def _antialias_weights(size: int, new_size: int) -> np.ndarray:
    """[new_size, size] float32: torch's bilinear ``antialias=True`` weights on CPU (a triangle filter stretched by
    the scale when shrinking, each row normalised to sum 1: PIL's rule), with torch's float32 roundings."""
    f32 = np.float32
    scale = f32(size) / f32(new_size)
    support, invscale = (scale, f32(1 / np.float64(scale))) if scale >= 1 else (f32(1), f32(1))
    weights = np.zeros((new_size, size), dtype=f32)
    for i in range(new_size):
        center = f32(np.float64(scale) * (i + 0.5))
        first = max(int(np.float64(center - support) + 0.5), 0)
        last = min(int(np.float64(center + support) + 0.5), size)
        offsets = (np.arange(first, last).astype(f32) - center).astype(np.float64) + 0.5
        distance = np.abs((offsets * np.float64(invscale)).astype(f32))
        taps = np.where(distance < 1, f32(1) - distance, f32(0))
        total = np.cumsum(taps, dtype=f32)[-1] if len(taps) else f32(0)
        weights[i, first:last] = taps / total if total != 0 else taps
    return weights


def antialiased_resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """image [C, H, W] float32 -> [C, h, w]: ``torch.nn.functional.interpolate(mode="bilinear", antialias=True)``
    (the same weights, sums within float32 rounding)."""
    rows = _antialias_weights(image.shape[1], size[0])  # [h, H]
    cols = _antialias_weights(image.shape[2], size[1])  # [w, W]
    return rows @ (image @ cols.T)


def _logits(model: OnnxModel, image: np.ndarray) -> np.ndarray:
    """One normalised image [3, h, w] through the graph -> logits [K, h, w]."""
    (logits,) = model.session.run(None, {model.input_name: np.ascontiguousarray(image[None], dtype=np.float32)})
    return logits[0].astype(np.float32)


def _slide_logits(model: OnnxModel, image: np.ndarray, settings: SegmenterSettings) -> np.ndarray:
    """Logits [K, h, w] of the sliding windows (:func:`swinlite.seg_views.slide_windows`), averaged where they
    overlap."""
    height, width = image.shape[1:]
    total, count = None, np.zeros((1, height, width), dtype=np.float32)
    for top, bottom, left, right in slide_windows(height, width, settings.crop_size, settings.stride):
        logits = _logits(model, image[:, top:bottom, left:right])
        if total is None:
            total = np.zeros((logits.shape[0], height, width), dtype=np.float32)
        total[:, top:bottom, left:right] += logits
        count[:, top:bottom, left:right] += 1
    return total / count


def _view_scores(
    model: OnnxModel, settings: SegmenterSettings, pixels: np.ndarray, size: tuple[int, int], flip: bool, softmax: bool
) -> np.ndarray:
    """Scores [K, H, W] of one view of normalised ``pixels`` [3, H, W], back at their own size: its logits, or with
    ``softmax`` their softmax (computed in place: one map of the K classes at the image's size)."""
    height, width = pixels.shape[1:]
    x = pixels if size == (height, width) else antialiased_resize(pixels, size)
    x = x[:, :, ::-1] if flip else x
    logits = _slide_logits(model, x, settings) if settings.mode == "slide" else _logits(model, x)
    logits = bilinear_resize(np.ascontiguousarray(logits[:, :, ::-1] if flip else logits), (height, width))
    if softmax:
        logits -= logits.max(axis=0, keepdims=True)
        np.exp(logits, out=logits)
        logits /= logits.sum(axis=0, keepdims=True)
    return logits


def segment_scores(model: OnnxModel, settings: SegmenterSettings, image: Image.Image) -> np.ndarray:
    """Per-class scores [K, H, W] of an RGB image at its own size, as
    :func:`swinlite.segmentation.inference.predict_scores` computes them: logits for one view, the mean softmax over
    several, added into the first view's as they come (at most two maps of the K classes at the image's size).
    ``argmax(0)`` is the label map.

    Raises:
        ValueError: an image that is not RGB (:func:`check_rgb`), or whose views or windows lie outside the sizes the
            graph serves.
    """
    check_rgb(image)
    problem = segment_problem(model, settings, image.height, image.width)
    if problem:
        raise ValueError(problem)
    pixels = normalize(image, settings.mean, settings.std)  # [3, H, W]
    views = test_views(*pixels.shape[1:], settings.img_scale, settings.ratios, settings.flip)
    total = _view_scores(model, settings, pixels, *views[0], softmax=len(views) > 1)
    for size, flip in views[1:]:
        total += _view_scores(model, settings, pixels, size, flip, softmax=True)
    total /= np.float32(len(views))
    return total


def draw_labels(image: Image.Image, labels: np.ndarray, palette: Sequence[Sequence[int]], alpha: float) -> Image.Image:
    """``image`` with each pixel's class colour blended in at ``alpha``: one mask per class present, as
    :func:`swinlite.segmentation.predictor.overlay` draws them."""
    present = np.unique(labels)
    return draw_masks(image, labels[None] == present[:, None, None], alpha, np.asarray(palette)[present])


def draw_masks(
    image: Image.Image, masks: np.ndarray, alpha: float, colours: np.ndarray | Sequence[Sequence[int]]
) -> Image.Image:
    """``image`` with each of ``masks`` [N, H, W] (bool) painted in its colour of ``colours`` [N, 3] at ``alpha``, black
    where two overlap: torchvision's ``draw_segmentation_masks`` with ``colors``, pixel for pixel."""
    pixels = np.asarray(image, dtype=np.uint8)  # [H, W, 3]
    painted = pixels.copy()
    for mask, colour in zip(masks, np.asarray(colours, dtype=np.uint8), strict=True):
        painted[mask] = colour
    painted[masks.sum(axis=0) > 1] = 0
    blended = pixels.astype(np.float32) * np.float32(1 - alpha) + painted.astype(np.float32) * np.float32(alpha)
    return Image.fromarray(blended.astype(np.uint8))
