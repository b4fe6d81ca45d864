"""A trained Mask R-CNN as one ONNX file for every image size (swinlite.detection.export through
scripts/export_onnx.py) and scripts/detect.py --onnx: PyTorch's detections and masks, without torch. Faster R-CNN,
RetinaNet and FCOS export the same way."""

import json
from functools import partial
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torchvision
from onnxkit import assert_checked_before_output, run_without_torch
from pico import PICO
from PIL import Image
from pycocotools.coco import COCO
from scriptkit import load_script
from torchvision.models.detection._utils import BoxCoder

from swinlite import export, onnx_predict
from swinlite.detection.config import DetModelConfig
from swinlite.detection.evaluation import coco_ap
from swinlite.detection.export import (
    INPUTS,
    OUTPUTS,
    box_difference,
    export_program,
    resize,
    traceable_detector,
    twins,
)
from swinlite.detection.models import build_detector
from swinlite.detection.predictor import load_detector
from swinlite.files import list_images, load_rgb

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(COCO root, checkpoint, ONNX file): the session's Mask R-CNN, exported by scripts/export_onnx.py (its check
    compares the twins' masks too). Faster R-CNN's graph is this one without the mask head: its exported program is
    checked in test_detectors_exported_equal_pytorch, which converts no second two-stage graph to ONNX."""
    coco, run = trained
    checkpoint = run / "best.safetensors"
    path = tmp_path_factory.mktemp("det_onnx") / "d.onnx"
    assert load_script("export_onnx").main(["--checkpoint", str(checkpoint), "--output", str(path)]) < 1e-3
    return coco, checkpoint, path


@pytest.mark.parametrize("classes", [1, 3])  # the RPN's deltas, the box head's per class
def test_traceable_box_decoding_is_torchvisions(classes):
    """The export's BoxCoder.decode (no branch on the number of boxes) against torchvision's, two images' boxes."""
    generator = torch.Generator().manual_seed(0)
    corners = torch.rand(7, 2, 2, generator=generator).sort(dim=1).values * 50  # (7, 2 corners, xy), x1 <= x2
    boxes = [b.flatten(1) for b in corners.split([4, 3])]  # (4, 4) and (3, 4): x1, y1, x2, y2
    deltas = torch.randn(7, 4 * classes, generator=generator)
    coder = BoxCoder(weights=(10.0, 10.0, 5.0, 5.0))
    torchvision_decode = BoxCoder.decode
    expected = coder.decode(deltas, boxes)  # (7, classes, 4)
    with traceable_detector():
        assert BoxCoder.decode is not torchvision_decode  # the export's, in place while exporting
        got = coder.decode(deltas, boxes)
    assert got.shape == (7, classes, 4)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def _stretched_images(coco: Path) -> list[Image.Image]:
    """Each readable val image stretched to two other sizes, odd ones (the detector resizes those by other scales).
    The images at their own 48x48, the test size (a resize by 1): detect.py --onnx against --checkpoint on them in
    test_detect_onnx_without_torch_writes_and_draws_the_pytorch_results, and the export's own check (``exported``)
    at 48x48 to 1e-3 px."""
    images = []
    for path in list_images([coco / "val2017"]):
        try:
            image = load_rgb(path)
        except Exception:  # the corrupt file of the quirky set
            continue
        images += [image.resize((61, 37)), image.resize((40, 70))]
    return images


def _matched(got: tuple[np.ndarray, ...], want: dict[str, torch.Tensor]) -> tuple[int, int]:
    """(ONNX Runtime's detections with a PyTorch twin within 1e-3 px (:func:`twins`), the larger of the two counts)."""
    pairs, _ = twins(got, [want[k].numpy() for k in ("boxes", "scores", "labels")], px=1e-3)
    return len(pairs), max(len(got[0]), len(want["boxes"]))


def test_onnx_runtime_detections_equal_pytorch(exported):
    """ONNX Runtime's detections are PyTorch's (eager, at one thread; at two where one leaves a detection without its
    twin), all but the few that a tie decides: at most 3 % of an image's detections and 1 % over all. Ties:
    proposals clipped at the image border can have equal boxes and scores, which PyTorch's and ONNX Runtime's top-k
    and NMS order differently (a stretched 61x37 image of this set keeps a 3.1 px-shifted twin of one border box in
    each runtime, PyTorch in float64 agreeing with PyTorch in float32); scores 1e-7 apart at the RPN's top-k cut go
    either way with float rounding (another image's PyTorch detections change when its pixels move by 1e-6). Every
    other detection agrees to 1e-3 px."""
    coco, checkpoint, path = exported
    detector, _, _ = load_detector(checkpoint)
    model = onnx_predict.open_model(path)
    settings = onnx_predict.detector_settings(model)
    matched = total = 0
    for image in _stretched_images(coco):
        got = onnx_predict.detect(model, settings, image)
        pixels = torch.from_numpy(np.array(image)).permute(2, 0, 1).float() / 255
        counts = []
        for threads in (1, 2):
            torch.set_num_threads(threads)  # the autouse one_thread fixture restores it
            with torch.no_grad():
                counts.append(_matched(got, detector([pixels])[0]))
            if counts[0][0] == counts[0][1]:  # every detection has its twin at one thread
                break
        image_matched, image_total = max(counts)
        assert image_matched >= 0.97 * image_total, counts
        matched, total = matched + image_matched, total + image_total
    assert total > 0 and matched >= 0.99 * total, (matched, total)


def test_detect_onnx_without_torch_writes_and_draws_the_pytorch_results(exported, tmp_path):
    """detect.py --onnx without torch: --checkpoint's detections, and drawings whose masks torchvision pasted and
    painted; an INT8 copy of the file is not held to the fp32 check."""
    coco, checkpoint, path = exported
    assert [o.name for o in ort.InferenceSession(str(path)).get_outputs()] == [*OUTPUTS, "masks"]
    common = ["--input", str(coco / "val2017"), "--score-thresh", "0.05"]
    result = run_without_torch("detect.py", "--onnx", str(path), *common, "--output-dir", str(tmp_path / "onnx"))
    assert result.returncode == 0, result.stderr
    assert "06.png: unreadable" in result.stderr  # skipped and named, as without --onnx
    again = run_without_torch("detect.py", "--onnx", str(path), *common, "--output-dir", str(tmp_path / "onnx"))
    assert again.returncode == 2 and "an earlier run's detections.json, images, sources.json: pass" in again.stderr
    pytorch = ["--checkpoint", str(checkpoint), *common, "--output-dir", str(tmp_path / "pt")]
    assert load_script("detect").main(pytorch) == 0
    got, want = (json.loads((tmp_path / d / "detections.json").read_text()) for d in ("onnx", "pt"))
    assert [(e["image"], e["category"]) for e in got] == [(e["image"], e["category"]) for e in want] and got
    for a, b in zip(got, want, strict=True):
        assert np.abs(np.subtract(a["bbox"], b["bbox"])).max() <= 0.0101 and abs(a["score"] - b["score"]) <= 1.1e-4
    drawn = sorted(p.name for p in (tmp_path / "onnx" / "images").iterdir())
    assert drawn == sorted(p.name for p in (tmp_path / "pt" / "images").iterdir())
    assert (tmp_path / "onnx" / "sources.json").read_bytes() == (tmp_path / "pt" / "sources.json").read_bytes()
    for name in drawn:
        a, b = (np.asarray(Image.open(tmp_path / d / "images" / name)) for d in ("onnx", "pt"))
        assert (a != b).any(axis=-1).mean() < 0.01  # the same drawing, but for an edge rounded the other way
    gt = COCO(str(coco / "annotations" / "instances_val2017.json"))
    ids = {info["file_name"]: i for i, info in gt.imgs.items()}
    ap50 = [coco_ap(gt, [e | {"image_id": ids[Path(e["image"]).name]} for e in r], sorted(ids.values())).ap["map50"]
            for r in (got, want)]  # fmt: skip
    assert abs(ap50[0] - ap50[1]) <= 0.5
    detector, _, meta = load_detector(checkpoint)
    int8 = export.quantize_dynamic(path, tmp_path / "int8.onnx")  # export_onnx.py --quantize: the same step
    with pytest.raises(ValueError, match="ONNX Runtime and PyTorch agree on"):
        box_difference(int8, detector, meta["data"])  # INT8 keeps other detections: the fp32 check must not apply
    assert np.isnan(box_difference(int8, detector, meta["data"], quantized=True))  # finite outputs only


def test_images_resized_thinner_than_the_file_serves_are_skipped(exported, tmp_path):
    """An image the resize makes thinner than the file's smallest size is named and skipped, the others detected (it
    stopped the whole run, advising an export with --min-size, which no detector export takes)."""
    _, _, path = exported
    folder = tmp_path / "in"
    folder.mkdir()
    Image.fromarray(np.zeros((40, 400, 3), np.uint8)).save(folder / "thin.png")  # resized to 9x96: below the range
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8)).save(folder / "square.png")
    result = run_without_torch("detect.py", "--onnx", str(path), "--input", str(folder), "--output-dir",
                               str(tmp_path / "out"), "--score-thresh", "0")  # fmt: skip
    assert result.returncode == 0, result.stderr
    thin = "a 40x400 (HxW) image would be resized to 9x96, thinner than d.onnx takes (height from 33, width from 33"
    assert f"warning: skipped {tmp_path / 'in' / 'thin.png'}: {thin}; no detector export takes less): too thin" in (
        result.stderr
    )
    assert "square.png" not in result.stderr and "on 1 images" in result.stdout
    detected = json.loads((tmp_path / "out" / "detections.json").read_text())
    assert {Path(e["image"]).name for e in detected} <= {"square.png"}
    assert [p.name for p in (tmp_path / "out" / "images").iterdir()] == ["00000_square.png"]


def test_export_refuses_what_it_cannot_serve():
    """A range down to 1 px, where the coarsest level is one cell: refused after the trace, for a Faster R-CNN whose
    FPN reads the last Swin level alone (two levels with the pool level: a smaller graph than the run's Mask R-CNN, the
    same assumption; one Swin block a stage); a RetinaNet whose P7 stride leaves the example one cell, before it; a
    model of no exported kind."""
    faster = DetModelConfig(name=PICO, detector="fasterrcnn", fpn_channels=16, min_level=3)
    detector = build_detector(faster, 2, 48, 96, depths=(1, 1, 1, 1)).eval()
    example = resize(torch.rand(3, 48, 60), 48, 96)
    with pytest.raises(ValueError, match=r"fails at s\w+=1: it would compute another function there"):
        export_program(detector, example, (1, 96))  # a map of one cell at the coarsest level: traced otherwise
    retinanet = build_detector(DetModelConfig(name=PICO, detector="retinanet", fpn_channels=16), 2, 48, 96).eval()
    with pytest.raises(ValueError, match=r"coarsest FPN level.s stride \(64 px\), the example is 48x60"):
        export_program(retinanet, example, (65, 96))  # P7's stride: test_size 48 leaves it one cell
    with pytest.raises(ValueError, match="only Faster R-CNN, Mask R-CNN, RetinaNet and FCOS export to ONNX, got Id"):
        export_program(torch.nn.Identity(), example, (33, 96))
    # a detector in training mode was put in eval mode by the export itself (and left so), where the classifier's
    # export refuses one: refused alike, before the trace
    with pytest.raises(ValueError, match=r"export_program expects a model in eval mode; call model\.eval\(\) first"):
        export_program(retinanet.train(), example, (65, 96))
    assert retinanet.training


@pytest.mark.parametrize("size", [28, 14])
def test_paste_masks_equals_torchvision(size):
    """Masks pasted into their boxes, boxes inside, across and beyond the border, of one pixel and of the image."""
    from torchvision.models.detection.roi_heads import paste_masks_in_image

    generator = torch.Generator().manual_seed(0)
    masks = torch.rand(6, 1, size, size, generator=generator)
    boxes = torch.tensor([[3.2, 4.9, 20.7, 31.1], [0.0, 0.0, 40.0, 30.0], [35.5, 25.2, 40.0, 30.0],
                          [10.0, 10.0, 10.4, 10.6], [-3.0, 2.0, 12.0, 44.0], [0.0, 0.0, 39.9, 29.9]])  # fmt: skip
    want = paste_masks_in_image(masks, boxes, (30, 40))[:, 0].numpy()
    got = onnx_predict.paste_masks(masks.numpy(), boxes.numpy(), 30, 40)
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-7)


def test_draw_masks_equals_torchvision():
    from torchvision.utils import draw_segmentation_masks

    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8))
    masks = np.zeros((3, 30, 40), dtype=bool)
    masks[0, 2:20, 3:30], masks[1, 10:28, 20:39], masks[2, 0:5, 0:5] = True, True, True  # 0 and 1 overlap
    colours = [(128, 0, 0), (0, 128, 0), (255, 214, 0)]
    want = draw_segmentation_masks(torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1),
                                   torch.from_numpy(masks), alpha=0.4, colors=colours)  # fmt: skip
    got = np.asarray(onnx_predict.draw_masks(image, masks, 0.4, colours))
    np.testing.assert_array_equal(got, want.permute(1, 2, 0).numpy())


@pytest.mark.parametrize("kind, runtime", [("fasterrcnn", "program"), ("retinanet", "program"), ("fcos", "onnx")])
def test_detectors_exported_equal_pytorch(kind, runtime, tmp_path):
    """Faster R-CNN, RetinaNet and FCOS: the graph's detections are the detector's own (its eager forward,
    torchvision's resize included) on images of five sizes, with a threshold that keeps three in the first image and
    other counts in the others (the post-processing's per-level top-k and NMS take data-dependent counts). FCOS's in
    ONNX Runtime; Faster R-CNN's and RetinaNet's in the exported program, whose ONNX ops Mask R-CNN's file (the
    ``exported`` fixture: Faster R-CNN's graph and a mask head) and FCOS's convert: two ONNX conversions less. The
    FPN starts two Swin levels above the default (three levels, not five: a smaller graph to trace and convert, the
    same per-level code), on a Swin of one block a stage (pico's third stage has two: the same blocks, one fewer)."""
    torch.manual_seed(0)
    config = DetModelConfig(name=PICO, detector=kind, fpn_channels=32, min_level=2 if kind == "fasterrcnn" else 3)
    detector = build_detector(config, 2, 96, 128, depths=(1, 1, 1, 1)).eval()  # one block a stage: a smaller graph
    scored = detector.roi_heads if kind == "fasterrcnn" else detector  # where the score threshold is kept
    if kind != "fasterrcnn":
        with torch.no_grad():
            for parameter in detector.head.parameters():
                parameter.normal_(0, 0.05)  # distinct scores: the head's prior initialisation scores anchors alike
    generator = torch.Generator().manual_seed(0)
    sizes = ((48, 60), (100, 90), (40, 70), (130, 70), (64, 64))
    images = [torch.rand(3, h, w, generator=generator) for h, w in sizes]
    scored.score_thresh = 0.0
    with torch.no_grad():
        scores = detector([images[0]])[0]["scores"]
        scored.score_thresh = float(scores[2] + scores[3]) / 2
        want = [detector([image])[0] for image in images]
    size_range = (detector.backbone.strides[-1] + 1, 128)  # P7's stride + 1 .. max_size
    program = export_program(detector, resize(torch.rand(3, 96, 120), 96, 128), size_range)
    if runtime == "onnx":
        with traceable_detector():
            path = export.export_onnx(program, tmp_path / f"{kind}.onnx", OUTPUTS, None, INPUTS)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        detect = partial(session.run, None)
    else:
        graph = program.module()

        def detect(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
            return [t.numpy() for t in graph(*(torch.from_numpy(a) for a in inputs.values()))]

    counts = []
    for image, expected in zip(images, want, strict=True):
        inputs = {"image": resize(image, 96, 128).numpy(), "original_size": np.array(image.shape[-2:])}
        with torch.no_grad():
            matched, total = _matched(detect(inputs), expected)
        assert matched == total == len(expected["boxes"]), (image.shape, matched, total)
        counts.append(total)
    assert counts[0] == 3 and len(set(counts)) > 1, counts


def test_exported_nms_keeps_any_number_of_boxes():
    """An exported program's NMS assumes nothing about how many boxes it keeps (torchvision's fake assumed at least
    two, and the program raised on an image with one detection); outside the export, torchvision's fake is back."""

    class Keep(torch.nn.Module):
        def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            return torchvision.ops.nms(boxes, scores, 0.5)

    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 10.0, 10.0], [20.0, 20.0, 30.0, 30.0]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    count = torch.export.Dim("count", min=1, max=100)

    def program() -> torch.export.ExportedProgram:
        return torch.export.export(Keep(), (boxes, scores), dynamic_shapes=({0: count}, {0: count}))

    def assumptions(p: torch.export.ExportedProgram) -> list[str]:
        return sorted(str(n.args[0].meta["val"]) for n in p.graph.nodes if "assert_scalar" in str(n.target))

    before = assumptions(program())
    with traceable_detector():
        traced = program()
    for n in (1, 2, 3):  # keeps 1, 1, 2
        want = torchvision.ops.nms(boxes[:n], scores[:n], 0.5)
        torch.testing.assert_close(traced.module()(boxes[:n], scores[:n]), want)
    assert assumptions(program()) == before


def test_an_export_check_that_compared_no_box_says_so(monkeypatch):
    """A detector that finds nothing in the check's random images (the demo's, trained for minutes): the check
    printed "0 of 0 detections agree" as if it had passed."""
    import swinlite.detection.export as det_export

    empty = (np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))

    class Nothing(torch.nn.Module):  # both runtimes: no detection
        def forward(self, image, original_size):
            return tuple(torch.from_numpy(a) for a in empty)

    monkeypatch.setattr(det_export, "DetectorGraph", lambda detector: Nothing())
    monkeypatch.setattr(ort, "InferenceSession", lambda *args, **kwargs: type("S", (), {"run": lambda *a: empty})())
    with pytest.warns(UserWarning, match="the export check compared no boxes: .* compare the file on real images"):
        assert box_difference(Path("d.onnx"), torch.nn.Identity(), {"test_size": 48, "max_size": 96}) == 0.0


def test_twins_pair_detections_in_any_order():
    """Two runtimes' detections are paired by label, score and box, whatever their order."""
    boxes = np.array([[0.0, 0.0, 10.0, 10.0], [5.0, 5.0, 20.0, 20.0]], np.float32)
    want = (boxes, np.array([0.9, 0.9], np.float32), np.array([1, 2]))
    got = (boxes[::-1] + np.array([[0.5], [0.0]], np.float32), want[1], want[2][::-1])  # swapped, label 2's box moved
    assert twins(got, want, px=1e-3) == ([(1, 0)], 0.0)  # (index in got, index in want)
    assert twins(got, want, px=1.0) == ([(1, 0), (0, 1)], 0.5)
    assert twins((got[0], got[1], np.array([2, 2])), want, px=1.0) == ([(0, 1)], 0.5)  # label 1 has no twin


def test_a_detector_file_is_checked_before_it_becomes_the_output(tmp_path, monkeypatch):
    """export_detector wrote its file at the output and checked it there: a refused file took the place of a good
    earlier one (then was removed, the earlier one lost), and a kill during the check left it there unchecked. Now
    the check reads a hidden file beside the output while the output keeps its earlier file, and a refusal leaves it
    so. (The export and the check themselves: test_onnx_runtime_detections_equal_pytorch.)"""
    import swinlite.detection.export as det_export

    data = {"test_size": 48, "max_size": 96, "mean": [0.5] * 3, "std": [0.2] * 3}
    loaded = (torch.nn.Module(), type("C", (), {"ids": [1], "names": ["a"]}), {"data": data, "detector": {}})
    loaded[0].backbone = type("B", (), {"strides": [4, 8, 16, 32]})
    monkeypatch.setattr(det_export, "load_detector", lambda checkpoint: loaded)
    monkeypatch.setattr(det_export, "export_program", lambda *args: None)
    monkeypatch.setattr(export, "write_onnx", lambda program, path, *args: path.write_bytes(b"new"))
    output = tmp_path / "d.onnx"
    assert_checked_before_output(
        output,
        lambda: det_export.export_detector(Path("det.safetensors"), output),
        lambda check: monkeypatch.setattr(det_export, "box_difference", check),
        "ONNX Runtime and PyTorch agree on 0 of 3 detections",
    )
