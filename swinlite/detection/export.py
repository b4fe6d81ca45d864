"""A trained Faster R-CNN, Mask R-CNN, RetinaNet or FCOS of ``scripts/train_detection.py`` as one ONNX file for every
image size: normalization, padding, backbone, heads (RPN and RoI heads, or the dense head with its anchors), NMS and
the boxes mapped back to the image, all in the graph.

The graph takes the image already resized by the detector's rule (short side ``test_size``, long side at most
``max_size``: :func:`resize`, torchvision's ``_resize_image_and_masks``), plus the size it had before, and returns
its boxes in that original size. The resize stays out of the graph because its output size is a rounded product
of floats: a graph computing it would make every later size data-dependent (torch.export cannot take the RPN's
top-k then). :mod:`swinlite.onnx_predict` does the same resize in NumPy.

While exporting, :func:`traceable_detector` swaps three torchvision functions for versions without branches on the
number of boxes, which a trace cannot take; each computes what torchvision computes:

- ``batched_nms``: torchvision's coordinate trick (offset each class's boxes apart, one NMS) on every input. Eager
  torchvision runs one NMS per class above 4000 box coordinates (the RPN's proposals): the kept boxes are the same
  unless two boxes' IoU lies within float32 rounding of the threshold after the offset.
- ``_multiscale_roi_align``: counts the RoIs with ``rois.shape[0]`` instead of ``len(rois)``.
- ``BoxCoder.decode``: without its ``if box_sum > 0`` around two reshapes (torch 2.11's export cannot decide it for
  the data-dependent number of proposals that NMS keeps; 2.14's can); the same boxes, (N, classes, 4).

and the count of kept boxes in torchvision's fake (shape-only) ``nms`` starts at 0, not 2 (:func:`_dynamic_size`).

RetinaNet's and FCOS's post-processing (a top-k of the scores above the threshold, per level) traces as torchvision
wrote it. Mask R-CNN's masks leave the graph as they leave its mask head, [N, 1, 28, 28] probabilities within each
box: pasting them into the image makes one map of a data-dependent size per detection, which
:func:`swinlite.onnx_predict.paste_masks` does in NumPy as torchvision's ``paste_masks_in_image`` does.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch._library.fake_impl import FakeImplCtx
from torchvision.models.detection._utils import BoxCoder
from torchvision.models.detection.image_list import ImageList
from torchvision.ops import boxes as box_ops
from torchvision.ops import poolers

from .. import export
from ..models.checks import pad_to_patches
from ..optimize import check_eval_mode
from .models import SwinFasterRCNN, SwinFCOS, SwinMaskRCNN, SwinRetinaNet
from .predictor import load_detector

INPUTS = ("image", "original_size")
OUTPUTS = ("boxes", "scores", "labels")
EXPORTED = (SwinFasterRCNN, SwinMaskRCNN, SwinRetinaNet, SwinFCOS)  # the detectors the graph serves


class DetectorGraph(nn.Module):
    """One resized image -> its detections in the original image: the eval forward of a torchvision detector
    (``GeneralizedRCNN.forward``, ``RetinaNet.forward``, ``FCOS.forward``) without the resize.

    Args:
        detector: a Faster R-CNN, Mask R-CNN, RetinaNet or FCOS (:data:`EXPORTED`) in eval mode.
    """

    def __init__(self, detector: nn.Module) -> None:
        super().__init__()
        self.detector = detector

    def forward(self, image: torch.Tensor, original_size: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """image [3, h, w] (0..1, resized by :func:`resize`), original_size int64 [2] (H, W before the resize)
        -> boxes [N, 4] (x1, y1, x2, y2 in the original image), scores [N], labels [N] (1-based class index), and
        for Mask R-CNN masks [N, 1, M, M] (probabilities within each box, before pasting)."""
        d = self.detector
        divisible = d.transform.size_divisible  # batch_images' zero padding, in integers (no float ceil to trace)
        images = pad_to_patches(d.transform.normalize(image)[None], (divisible, divisible))  # [1, 3, h', w']
        images = ImageList(images, [tuple(image.shape[-2:])])
        features = d.backbone(images.tensors)
        heads = _two_stage if isinstance(d, (SwinFasterRCNN, SwinMaskRCNN)) else _one_stage
        detection = heads(d, images, features)
        # torchvision's resize_boxes: ratios original / resized in float32
        ratios = original_size.to(torch.float32) / torch.tensor(image.shape[-2:], dtype=torch.float32)
        boxes = detection["boxes"] * ratios.flip(0).repeat(2)  # (x, y, x, y) * (rw, rh, rw, rh)
        masks = (detection["masks"],) if "masks" in detection else ()  # [N, 1, M, M] probabilities, in the box
        return boxes, detection["scores"], detection["labels"], *masks


def _two_stage(d: nn.Module, images: ImageList, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Faster R-CNN's detections of one image: proposals by the RPN, then the RoI heads."""
    proposals, _ = d.rpn(images, features)
    (detection,), _ = d.roi_heads(features, proposals, images.image_sizes)
    return detection


def _one_stage(d: nn.Module, images: ImageList, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """RetinaNet's or FCOS's detections of one image, as their eval forward: the head's outputs and the anchors
    split per level (RetinaNet has A anchors per cell, FCOS one), then the detector's post-processing."""
    maps = list(features.values())
    outputs = d.head(maps)
    anchors = d.anchor_generator(images, maps)
    cells = [m.shape[-2] * m.shape[-1] for m in maps]  # per level
    per_cell = outputs["cls_logits"].shape[1] // sum(cells)  # anchors per cell
    sizes = [c * per_cell for c in cells]
    split = {name: list(output.split(sizes, dim=1)) for name, output in outputs.items()}
    (detection,) = d.postprocess_detections(split, [list(a.split(sizes)) for a in anchors], images.image_sizes)
    return detection


def resize(image: torch.Tensor, test_size: int, max_size: int) -> torch.Tensor:
    """image [3, H, W] resized as the detector's eval transform resizes it (torchvision ``_resize_image_and_masks``:
    scale ``min(test_size / short side, max_size / long side)``, each side rounded down, bilinear)."""
    h, w = image.shape[-2:]
    scale = min(test_size / min(h, w), max_size / max(h, w))
    size = (int(h * scale), int(w * scale))  # floor, as interpolate's recompute_scale_factor
    return F.interpolate(image[None], size=size, mode="bilinear", align_corners=False)[0]


def _batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou: float) -> torch.Tensor:
    """torchvision's ``batched_nms`` by its coordinate trick, on any number of boxes (none: the offset is 1)."""
    largest = torch.cat([boxes.new_zeros(1), boxes.flatten()]).max()  # boxes are clipped to the image: >= 0
    offsets = idxs.to(boxes) * (largest + 1)
    return box_ops.nms(boxes + offsets[:, None], scores, iou)


def _multiscale_roi_align(x_filtered, boxes, output_size, sampling_ratio, scales, mapper) -> torch.Tensor:
    """torchvision's ``_multiscale_roi_align`` (several levels), the RoIs counted by their shape."""
    rois = poolers._convert_to_roi_format(boxes)
    levels = mapper(boxes)
    result = rois.new_zeros((rois.shape[0], x_filtered[0].shape[1], *output_size))
    for level, (feature, scale) in enumerate(zip(x_filtered, scales, strict=True)):
        index = torch.where(levels == level)[0]
        pooled = torchvision.ops.roi_align(feature, rois[index], output_size, scale, sampling_ratio)
        result = result.index_put((index,), pooled)
    return result


def _decode(self: BoxCoder, rel_codes: torch.Tensor, boxes: list[torch.Tensor]) -> torch.Tensor:
    """torchvision's ``BoxCoder.decode`` without a branch on the number of boxes: rel_codes (N, 4k) for the N boxes
    of all images -> (N, k, 4)."""
    concat_boxes = torch.cat(boxes, dim=0)  # (N, 4)
    return self.decode_single(rel_codes, concat_boxes).unflatten(1, (rel_codes.shape[1] // 4, 4))


def _dynamic_size(self: FakeImplCtx, *, min: int = 0, max: int | None = None) -> torch.SymInt:
    """``FakeImplCtx.create_unbacked_symint`` as its successor ``new_dynamic_size``: a count from 0 up.
    torchvision's fake ``nms`` sizes its kept indices with the deprecated one, whose minimum is 2, and the exported
    program then asserted that NMS keeps at least two boxes (ONNX drops the assertion; the program's ``module()``
    raised on an image with 0 or 1 detections)."""
    return self.new_dynamic_size(min=min, max=max)


@contextmanager
def traceable_detector() -> Iterator[None]:
    """torchvision's detection functions swapped for their traceable versions (module docstring), while exporting."""
    with (
        mock.patch.object(box_ops, "batched_nms", _batched_nms),
        mock.patch.object(poolers, "_multiscale_roi_align", _multiscale_roi_align),
        mock.patch.object(BoxCoder, "decode", _decode),
        mock.patch.object(FakeImplCtx, "create_unbacked_symint", _dynamic_size),
    ):
        yield


def outputs_of(detector: nn.Module) -> tuple[str, ...]:
    """The graph's output names: :data:`OUTPUTS`, and ``masks`` for Mask R-CNN."""
    return OUTPUTS + (("masks",) if isinstance(detector, SwinMaskRCNN) else ())


def export_program(
    detector: nn.Module, example: torch.Tensor, size_range: tuple[int, int]
) -> torch.export.ExportedProgram:
    """``torch.export`` of :class:`DetectorGraph` with a symbolic image size in ``size_range`` (resized images).

    Raises:
        ValueError: not one of :data:`EXPORTED`; a module of it in training mode
            (:func:`~swinlite.optimize.check_eval_mode`, as the classifier's export refuses it: it was put in eval mode
            here, left so); an example no larger than the coarsest level's stride; a graph that assumes something that
            fails at some size of the range.
    """
    name = type(detector).__name__
    if type(detector) not in EXPORTED:
        raise ValueError(f"only Faster R-CNN, Mask R-CNN, RetinaNet and FCOS export to ONNX, got {name}")
    check_eval_mode(detector, "swinlite.detection.export.export_program")
    stride = detector.backbone.strides[-1]
    if min(example.shape[-2:]) <= stride:  # a map of one cell there: the trace cannot serve both
        h, w = example.shape[-2:]
        raise ValueError(
            f"{name} exports for resized images larger than its coarsest FPN level's stride ({stride} px), "
            f"the example is {h}x{w}: export a detector whose data.test_size is above {stride}"
        )
    graph = DetectorGraph(detector).eval()
    height = torch.export.Dim("height", min=size_range[0], max=size_range[1])
    width = torch.export.Dim("width", min=size_range[0], max=size_range[1])
    original = torch.tensor(example.shape[-2:])
    with export._inference_graph(graph), export.symbolic_sizes(), traceable_detector():
        program = torch.export.export(
            graph,
            (example, original),
            dynamic_shapes=({1: height, 2: width}, None),
            strict=False,
            prefer_deferred_runtime_asserts_over_guards=True,
        )
    export.check_assumptions(program)
    return program


def export_detector(checkpoint: Path, output: Path, quantize: str | None = None, check: bool = True) -> float | None:
    """Export a detection checkpoint (:data:`EXPORTED`) to ``output`` (``scripts/export_onnx.py``) for every resized
    image size from one pixel more than the coarsest level's stride (the pool level, or P7) to the detector's
    ``max_size``; check it; return the largest box difference (px) between ONNX Runtime and PyTorch on random images,
    or None without ``check``. The file is written and checked at a hidden path beside ``output`` and becomes
    ``output`` once it passes (:func:`swinlite.export.checked_output`): a refused file leaves ``output`` as it was."""
    detector, categories, meta = load_detector(checkpoint)
    data = meta["data"]
    size_range = (detector.backbone.strides[-1] + 1, data["max_size"])
    example = resize(torch.rand(3, data["test_size"], data["test_size"] * 5 // 4), data["test_size"], data["max_size"])
    program = export_program(detector, example, size_range)
    metadata = {
        "task": "detection",
        "model": meta["detector"].get("name"),
        "category_ids": categories.ids,
        "classes": categories.names,
        "data": {k: data[k] for k in ("test_size", "max_size", "mean", "std")},
        "input_sizes": {"height": list(size_range), "width": list(size_range)},
        "weights": meta.get("weights", "raw"),
        **export.versions(meta),
    }
    outputs = outputs_of(detector)
    with export.checked_output(output) as path:  # renamed to output once its check passes
        with traceable_detector():
            export.write_onnx(program, path, outputs, {k: json.dumps(v) for k, v in metadata.items()}, quantize, INPUTS)
        difference = box_difference(path, detector, data, quantize is not None) if check else None
    print(f"wrote {output} (inputs image [3, h, w] resized, original_size [2]; outputs {', '.join(outputs)})")
    return difference


def twins(
    got: Sequence[np.ndarray], want: Sequence[np.ndarray], px: float = 1e-2
) -> tuple[list[tuple[int, int]], float]:
    """(Pairs (index in ``got``, index in ``want``) of twin detections, the largest box difference of a twin in px).

    ``got`` and ``want`` start with boxes [N, 4], scores [N], labels [N]. A twin has the same label, a score within
    1e-4 and a box within ``px``; each detection is the twin of one at most. Near-equal scores may order two
    runtimes' detections differently (boxes clipped at the border tie; so may the last ones kept), so they are
    paired, not compared in order."""
    boxes, scores, labels = got[:3]
    free = list(range(len(boxes)))
    pairs, largest = [], 0.0
    for i, (box, score, label) in enumerate(zip(*want[:3], strict=True)):
        for j in free:
            difference = float(np.abs(boxes[j] - box).max())
            if labels[j] == label and difference <= px and abs(float(scores[j]) - float(score)) <= 1e-4:
                free.remove(j)
                pairs.append((j, i))
                largest = max(largest, difference)
                break
    return pairs, largest


def box_difference(path: Path, detector: nn.Module, data: dict, quantized: bool = False) -> float:
    """Largest |ONNX Runtime - PyTorch| box coordinate (px) of the detections both keep (:func:`twins`) on a few
    random resized images of other shapes; Mask R-CNN's masks of those twins are compared too. An INT8 file
    (``quantized``) keeps other detections: only its outputs' finiteness is checked, and NaN is returned.

    Raises:
        ValueError: NaN or inf in ONNX Runtime's outputs; unless ``quantized``, on an image more than 3 % of the
            detections lack a twin, or a twin's mask differs by more than 1e-3.
    """
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(0)
    graph = DetectorGraph(detector).eval()
    largest, masks, matched, total = 0.0, 0.0, 0, 0
    for height, width in ((data["test_size"], data["test_size"]), (data["test_size"] * 3 // 4 + 5, data["max_size"])):
        image = resize(torch.rand(3, height, width, generator=generator), data["test_size"], data["max_size"])
        original = torch.tensor([height, width])
        with torch.no_grad():
            want = [t.numpy() for t in graph(image, original)]
        got = session.run(None, {"image": image.numpy(), "original_size": original.numpy()})
        if not all(np.isfinite(output).all() for output in got):
            raise ValueError(f"ONNX Runtime's outputs hold NaN or inf at {height}x{width}: the file is broken")
        if quantized:  # other detections than fp32's: counted, not paired
            matched, total = matched + len(got[0]), total + len(want[0])
            continue
        pairs, difference = twins(got, want)
        size = max(len(got[0]), len(want[0]))
        if len(pairs) < 0.97 * size:
            raise ValueError(f"ONNX Runtime and PyTorch agree on {len(pairs)} of {size} detections at {height}x{width}")
        if len(want) > 3:  # Mask R-CNN
            masks = max([masks] + [float(np.abs(got[3][j] - want[3][i]).max()) for j, i in pairs])
            if masks > 1e-3:
                raise ValueError(f"ONNX Runtime's and PyTorch's masks differ by {masks:.3g} at {height}x{width}")
        largest, matched, total = max(largest, difference), matched + len(pairs), total + size
    if quantized:
        print(f"INT8 on random images: {matched} detections (PyTorch fp32: {total}), outputs finite")
        return float("nan")
    if total == 0:  # a trained detector may find nothing in noise: then nothing was compared
        warnings.warn(
            "the export check compared no boxes: neither runtime detected anything on random images; compare the "
            "file on real images (scripts/detect.py --onnx against --checkpoint)",
            stacklevel=2,
        )
        return largest
    mask_note = f", masks within {masks:.3g}" if isinstance(detector, SwinMaskRCNN) else ""
    print(
        f"ONNX Runtime vs PyTorch on random images: {matched} of {total} detections agree (label, score), "
        f"boxes within {largest:.3g} px{mask_note}"
    )
    return largest
