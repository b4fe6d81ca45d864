"""The views a segmenter predicts an image from, as sizes and pixel ranges: no torch, so that PyTorch prediction
(:mod:`swinlite.segmentation.inference`) and ONNX Runtime prediction (:mod:`swinlite.onnx_predict`) share one
definition of them.

- :func:`rescaled_size`: mmcv's ``rescale_size`` (keep the aspect ratio, fit (long, short) side limits);
- :func:`test_views`: one rescaled size per test ratio, each also mirrored with ``flip`` (mmsegmentation's
  ``aug_test``);
- :func:`thin_problem`: an image with a view thinner than the backbone's patch (predicted by no model);
- :func:`large_problem`: an image with a view whose full-size tensors in prediction (:func:`view_bytes`; PyTorch's
  or the ONNX path's NumPy arrays) take more than :data:`VIEW_MEMORY_BUDGET`;
- :func:`slide_windows`: the windows of sliding-window prediction (mmsegmentation's ``slide_inference``), every
  ``stride`` pixels: :func:`default_stride` unless set, at most the window (:func:`stride_problem`), given only for
  slide mode (:func:`stride_unused`).
"""

from __future__ import annotations

from collections.abc import Sequence

TEST_MODES = ("whole", "slide")  # the whole image at once, or sliding windows of the crop size
VIEW_MEMORY_BUDGET = 4 * 2**30  # bytes a view's full-size tensors (view_bytes) may take, in PyTorch or ONNX prediction


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
    return [(rescaled_size(height, width, [int(side * r) for side in img_scale]), f) for r in ratios for f in flips]


def thin_problem(
    height: int, width: int, img_scale: Sequence[int], ratios: Sequence[float], min_side: int
) -> str | None:
    """Why a ``height`` x ``width`` image has a view (:func:`test_views`) thinner than ``min_side`` pixels (the
    backbone's patch: no thinner input is defined), or None."""
    for ratio in ratios:
        h, w = rescaled_size(height, width, [int(side * ratio) for side in img_scale])
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


def large_problem(
    height: int,
    width: int,
    img_scale: Sequence[int],
    ratios: Sequence[float],
    num_classes: int,
    option: str = "--ratios",
) -> str | None:
    """Why a ``height`` x ``width`` image has a view (:func:`test_views`) whose full-size tensors (:func:`view_bytes`)
    would take more than :data:`VIEW_MEMORY_BUDGET` (``--ratios 100`` on a 48x40 image took all the memory), or
    None; the message says to lower ``option``, where the ratios come from."""
    for ratio in ratios:
        h, w = rescaled_size(height, width, [int(side * ratio) for side in img_scale])
        need = view_bytes(h, w, num_classes)
        if need > VIEW_MEMORY_BUDGET:
            return (f"a {height}x{width} (HxW) image would be rescaled to {h}x{w} (ratio {ratio}), whose prediction "
                    f"holds {need / 2**30:.1f} GiB at that size (float32: the logits of {num_classes} classes twice, "
                    f"the windows' count, the image and its mirror), more than the {VIEW_MEMORY_BUDGET // 2**30} GiB a "
                    f"view may take: lower {option}")  # fmt: skip
    return None


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
