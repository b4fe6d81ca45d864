"""The views a segmenter predicts an image from, as sizes and pixel ranges: no torch, so that PyTorch prediction
(:mod:`swinlite.segmentation.inference`) and ONNX Runtime prediction (:mod:`swinlite.onnx_predict`) share one
definition of them.

- :func:`rescaled_size`: mmcv's ``rescale_size`` (keep the aspect ratio, fit (long, short) side limits);
- :func:`test_views`: one rescaled size per test ratio, each also mirrored with ``flip`` (mmsegmentation's
  ``aug_test``);
- :func:`thin_problem`: an image with a view thinner than the backbone's patch (predicted by no model);
- :func:`large_problem`: an image whose prediction (PyTorch's tensors or the ONNX path's NumPy arrays) would take
  more than :func:`memory_budget` (half the machine's memory, at least 4 GiB): a view's at its full size
  (:func:`view_bytes`) beside the scores at the image's own size (:func:`image_bytes`);
- :func:`slide_windows`: the windows of sliding-window prediction (mmsegmentation's ``slide_inference``), every
  ``stride`` pixels: :func:`default_stride` unless set, at most the window (:func:`stride_problem`), given only for
  slide mode (:func:`stride_unused`).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence

TEST_MODES = ("whole", "slide")  # the whole image at once, or sliding windows of the crop size
MIN_MEMORY_BUDGET = 4 * 2**30  # the bytes memory_budget allows on any machine


@functools.cache
def memory_budget() -> int:
    """Bytes an image's prediction (:func:`view_bytes` + :func:`image_bytes`, in PyTorch or ONNX) may take here: half
    the machine's physical memory, at least :data:`MIN_MEMORY_BUDGET`; that alone where the memory is unknown
    (``os.sysconf`` is Linux's and macOS's, not Windows'). A fixed 4 GiB refused a 12-megapixel photo of 150 classes
    (6.9 GiB at one view), which runs on a 16 GiB machine; 4 GiB was meant to refuse absurd views (``--ratios 100``
    took all the memory), which half of any machine's memory still refuses."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no os.sysconf (Windows), or no such name
        return MIN_MEMORY_BUDGET
    return max(MIN_MEMORY_BUDGET, physical // 2)


def rescaled_size(height: int, width: int, scale: Sequence[float]) -> tuple[int, int]:
    """The size of an image rescaled, keeping its aspect ratio, as large as fits ``scale`` (long side, short side)
    in either orientation: mmcv's ``rescale_size`` (sides rounded to the nearest pixel), but never below one pixel
    (mmcv's rounds a 3x2000 image to 0x256 at (256, 64), and its resize fails)."""
    factor = min(max(scale) / max(height, width), min(scale) / min(height, width))
    return max(int(height * factor + 0.5), 1), max(int(width * factor + 0.5), 1)


def test_views(
    height: int, width: int, img_scale: Sequence[int], ratios: Sequence[float], flip: bool
) -> list[tuple[tuple[int, int], bool]]:
    """(rescaled size, mirrored) of each view of a ``height`` x ``width`` image: ``img_scale`` times each ratio,
    each unmirrored, then mirrored with ``flip``."""
    flips = (False, True) if flip else (False,)
    return [(view_size(height, width, img_scale, r), f) for r in ratios for f in flips]


def view_size(height: int, width: int, img_scale: Sequence[int], ratio: float) -> tuple[int, int]:
    """The size of a ``height`` x ``width`` image's view at ``ratio``: rescaled to ``img_scale`` times it."""
    return rescaled_size(height, width, [int(side * ratio) for side in img_scale])


def thin_problem(
    height: int, width: int, img_scale: Sequence[int], ratios: Sequence[float], min_side: int
) -> str | None:
    """Why a ``height`` x ``width`` image has a view (:func:`test_views`) thinner than ``min_side`` pixels (the
    backbone's patch: no thinner input is defined), or None."""
    for ratio in ratios:
        h, w = view_size(height, width, img_scale, ratio)
        if min(h, w) < min_side:
            return (f"a {height}x{width} (HxW) image would be rescaled to {h}x{w} (ratio {ratio}), thinner than the "
                    f"backbone's {min_side}-pixel patch: too thin")  # fmt: skip
    return None


def view_bytes(height: int, width: int, num_classes: int) -> int:
    """Bytes PyTorch prediction of one image (``swinlite.segmentation.inference.predict_scores``) holds at the full
    size of a ``height`` x ``width`` view, all float32: two maps of the ``num_classes`` logits (the model's or the
    windows' sum, then its mirror or their average), the windows' count, and the rescaled image with its mirror. The
    model's own activations (at a quarter of the view's resolution, or of one window's) come on top."""
    return 4 * height * width * (2 * num_classes + 1 + 2 * 3)


def image_bytes(height: int, width: int, num_classes: int, views: int) -> int:
    """Bytes prediction of a ``height`` x ``width`` image through ``views`` views holds at the image's own size, where
    the scores are counted (``predict_scores``, ``segment_scores``): one float32 map of the ``num_classes`` scores
    for one view, two for several (their running sum and the view being added), the normalised image (3 float32
    channels) and its label map (int64). No ratio makes them smaller."""
    return 4 * height * width * ((1 if views == 1 else 2) * num_classes + 3 + 2)


def large_problem(
    height: int,
    width: int,
    img_scale: Sequence[int],
    ratios: Sequence[float],
    flip: bool,
    num_classes: int,
    option: str = "--ratios",
) -> str | None:
    """Why predicting a ``height`` x ``width`` image would take more than :func:`memory_budget`, or None: its largest
    view's full-size tensors (:func:`view_bytes`; ``--ratios 100`` on a 48x40 image took all the memory) beside the
    scores at the image's own size (:func:`image_bytes`; a 6000x8000 photo's 150 classes took 27 GiB at one view).
    The message names the budget, says to lower ``option`` (where the ratios come from) where the views are at fault,
    and to downscale the image (to the size that fits beside its largest view) where its own size is."""
    views = len(test_views(height, width, img_scale, ratios, flip))
    sizes = [(view_size(height, width, img_scale, r), r) for r in ratios]
    (h, w), ratio = max(sizes, key=lambda size: size[0][0] * size[0][1])
    view, own = view_bytes(h, w, num_classes), image_bytes(height, width, num_classes, views)
    budget = memory_budget()  # looked up at each call, so that tests can set it
    if view + own <= budget:
        return None
    gib = 1 / 2**30
    limit = f"the {f'{budget * gib:.1f}'.removesuffix('.0')} GiB an image's prediction may take"
    if budget > MIN_MEMORY_BUDGET:
        limit += " here (half this machine's memory)"
    scores = f"the scores of {num_classes} classes {'once' if views == 1 else 'twice'}, the image and its labels"
    downscale = "downscale the image"
    if view < budget:  # the size that fits beside the view: the views' sizes depend on the aspect ratio alone
        factor = math.sqrt((budget - view) / own)
        downscale += f" to at most {int(height * factor)}x{int(width * factor)} (HxW; its mask too, nearest-neighbour)"
    if own < budget:  # smaller views make it fit
        fits = f"lower {option}" + (f", or {downscale}" if view < budget else "")
        return (f"a {height}x{width} (HxW) image would be rescaled to {h}x{w} (ratio {ratio}), whose prediction "
                f"holds {view * gib:.1f} GiB at that size (float32: the logits of {num_classes} classes twice, the "
                f"windows' count, the image and its mirror) and {own * gib:.1f} GiB at the image's own size "
                f"({scores}), more than {limit}: {fits}")  # fmt: skip
    fits = downscale if view < budget else f"{downscale} and lower {option}"
    return (f"a {height}x{width} (HxW) image's prediction holds {own * gib:.1f} GiB at the image's own size, where it "
            f"is scored (float32: {scores}), and {view * gib:.1f} GiB at its {h}x{w} view (ratio {ratio}), more than "
            f"{limit}, whatever {option}: the image is too large for {num_classes} classes at full "
            f"resolution; {fits}")  # fmt: skip


def default_stride(crop: Sequence[int]) -> tuple[int, int]:
    """The window step when none is set: 2/3 of the window, rounded (mmsegmentation's 341 for its 512 crops), so that
    a changed crop size keeps windows that overlap."""
    return max(round(2 * crop[0] / 3), 1), max(round(2 * crop[1] / 3), 1)


def stride_unused(
    stride: Sequence[int] | None,
    mode: str,
    recorder: str | None,
    stride_name: str = "--stride",
    slide: str = "pass --mode slide",
) -> str | None:
    """Why a given window ``stride`` would be ignored, or None: the test ``mode`` predicts each image whole.
    ``recorder`` names what recorded that mode (the checkpoint, an ONNX file), None where the user gave it;
    ``stride_name`` names the stride as the user gave it and ``slide`` says how to ask for slide mode (the scripts'
    options, or a training config's ``data.test_stride`` and ``set data.test_mode=slide``)."""
    if not stride or mode != "whole":
        return None
    whole = "the test mode is whole" if recorder is None else f"{recorder} records test mode whole"
    return (f"{stride_name} is the windows' step of slide mode, and {whole} (each image predicted whole): drop "
            f"{stride_name}, or {slide}")  # fmt: skip


def stride_problem(
    crop: Sequence[int], stride: Sequence[int], crop_name: str = "crop_size", stride_name: str = "stride"
) -> str | None:
    """Why windows of ``crop`` every ``stride`` pixels would leave pixels between them unpredicted, or None: a step
    longer than the window in either dimension."""
    if stride[0] <= crop[0] and stride[1] <= crop[1]:
        return None
    return (f"{stride_name} {list(stride)} is longer than {crop_name} {list(crop)}: the pixels between the sliding "
            f"windows would get no prediction; expected {stride_name} <= {crop_name} in each dimension "
            f"(height, width), e.g. {list(default_stride(crop))}")  # fmt: skip


def slide_windows(
    height: int, width: int, crop: Sequence[int], stride: Sequence[int]
) -> list[tuple[int, int, int, int]]:
    """(top, bottom, left, right) of the windows of ``crop`` every ``stride`` pixels over a ``height`` x ``width``
    image, row by row, the last ones flush with the border; a side shorter than the window is one window of its own
    size.

    Raises:
        ValueError: a stride longer than the window (:func:`stride_problem`), which would leave gaps.
    """
    problem = stride_problem(crop, stride)
    if problem:
        raise ValueError(problem)
    rows = max(height - crop[0] + stride[0] - 1, 0) // stride[0] + 1
    cols = max(width - crop[1] + stride[1] - 1, 0) // stride[1] + 1
    windows = []
    for r in range(rows):
        for c in range(cols):
            bottom, right = min(r * stride[0] + crop[0], height), min(c * stride[1] + crop[1], width)
            windows.append((max(bottom - crop[0], 0), bottom, max(right - crop[1], 0), right))
    return windows
