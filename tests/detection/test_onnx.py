"""A trained Faster R-CNN as one ONNX file for every image size (swinlite.detection.export through
scripts/export_onnx.py) and scripts/detect.py --onnx: PyTorch's detections, without torch."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from detkit import train
from onnxkit import run_without_torch
from PIL import Image
from pycocotools.coco import COCO
from scriptkit import load_script, run_script

from swinlite import onnx_predict
from swinlite.detection.config import DetModelConfig
from swinlite.detection.evaluation import coco_ap
from swinlite.detection.export import export_program, resize
from swinlite.detection.models import build_detector
from swinlite.detection.predictor import load_detector
from swinlite.files import list_images, load_rgb

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(COCO root, checkpoint, ONNX file): two epochs of a tiny Faster R-CNN, exported by scripts/export_onnx.py."""
    root = tmp_path_factory.mktemp("det_onnx")
    coco, _ = train(root, **{"train.epochs": 2, "model.score_thresh": 0.01})
    checkpoint = root / "run" / "best.safetensors"
    assert load_script("export_onnx").main(["--checkpoint", str(checkpoint), "--output", str(root / "d.onnx")]) < 1e-3
    return coco, checkpoint, root / "d.onnx"


def _images(coco: Path) -> list[Image.Image]:
    """The readable val images, and each stretched to another size (the detector resizes those)."""
    images = []
    for path in list_images([coco / "val2017"]):
        try:
            image = load_rgb(path)
        except Exception:  # the corrupt file of the quirky set
            continue
        images += [image, image.resize((61, 37)), image.resize((40, 70))]
    return images


def _difference(got: tuple[np.ndarray, ...], want: dict[str, torch.Tensor]) -> tuple[float, float]:
    """(largest box difference in px, largest score difference) after pairing each ONNX Runtime detection, best
    first, with the closest unpaired PyTorch detection of its label (scores equal to float rounding may swap two
    detections' order); infinite when the two keep different counts or labels."""
    boxes, scores, labels = got
    free = list(range(len(want["boxes"])))
    if len(boxes) != len(free):
        return math.inf, math.inf
    box_diff = score_diff = 0.0
    for box, score, label in zip(boxes, scores, labels, strict=True):
        same = [j for j in free if want["labels"][j] == label]
        if not same:
            return math.inf, math.inf
        j = min(same, key=lambda j: float((want["boxes"][j] - torch.from_numpy(box)).abs().max()))
        free.remove(j)
        box_diff = max(box_diff, float((want["boxes"][j] - torch.from_numpy(box)).abs().max()))
        score_diff = max(score_diff, abs(float(want["scores"][j]) - float(score)))
    return box_diff, score_diff


def test_onnx_runtime_detections_equal_pytorch(exported):
    """Each image's detections equal eager PyTorch's at one or two threads. Which proposals pass the RPN's top-k can
    hang on scores 1e-7 apart, which float rounding orders either way: eager PyTorch at one thread and at two
    disagree on some images (then on a few detections); ONNX Runtime must then equal one of the two."""
    coco, checkpoint, path = exported
    detector, _, _ = load_detector(checkpoint)
    model = onnx_predict.open_model(path)
    settings = onnx_predict.detector_settings(model)
    counted = 0
    for image in _images(coco):
        got = onnx_predict.detect(model, settings, image)
        pixels = torch.from_numpy(np.array(image)).permute(2, 0, 1).float() / 255
        differences = []
        for threads in (1, 2):
            torch.set_num_threads(threads)  # the autouse one_thread fixture restores it
            with torch.no_grad():
                differences.append(_difference(got, detector([pixels])[0]))
        assert any(box <= 1e-3 and score <= 1e-4 for box, score in differences), differences  # pixels, scores
        counted += len(got[0])
    assert counted > 0


def test_detect_onnx_without_torch_writes_the_pytorch_results(exported, tmp_path):
    coco, checkpoint, path = exported
    images = coco / "val2017"
    common = ["--input", str(images), "--score-thresh", "0.01"]
    result = run_without_torch("detect.py", "--onnx", str(path), *common, "--output-dir", str(tmp_path / "onnx"))
    assert result.returncode == 0, result.stderr
    assert "06.png: unreadable" in result.stderr  # skipped and named, as without --onnx
    pytorch = ["--checkpoint", str(checkpoint), *common, "--output-dir", str(tmp_path / "pt")]
    assert load_script("detect").main(pytorch) == 0
    got, want = (json.loads((tmp_path / d / "detections.json").read_text()) for d in ("onnx", "pt"))
    assert [(e["image"], e["category"]) for e in got] == [(e["image"], e["category"]) for e in want] and got
    for a, b in zip(got, want, strict=True):
        assert np.abs(np.subtract(a["bbox"], b["bbox"])).max() <= 0.0101 and abs(a["score"] - b["score"]) <= 1.1e-4
    drawn = sorted(p.name for p in (tmp_path / "onnx" / "images").iterdir())
    assert drawn == sorted(p.name for p in (tmp_path / "pt" / "images").iterdir())
    for name in drawn:
        a, b = (np.asarray(Image.open(tmp_path / d / "images" / name)) for d in ("onnx", "pt"))
        assert (a != b).any(axis=-1).mean() < 0.01  # the same drawing, but for a box edge rounded the other way
    gt = COCO(str(coco / "annotations" / "instances_val2017.json"))
    ids = {info["file_name"]: i for i, info in gt.imgs.items()}
    ap50 = [coco_ap(gt, [e | {"image_id": ids[Path(e["image"]).name]} for e in r], sorted(ids.values())).ap["map50"]
            for r in (got, want)]  # fmt: skip
    assert abs(ap50[0] - ap50[1]) <= 0.5


def test_images_outside_the_files_sizes_are_an_error_before_any_work(exported, tmp_path):
    _, _, path = exported
    folder = tmp_path / "in"
    folder.mkdir()
    Image.fromarray(np.zeros((4, 300, 3), np.uint8)).save(folder / "thin.png")  # resized to 1x96: below the range
    result = run_without_torch("detect.py", "--onnx", str(path), "--input", str(folder), "--output-dir",
                               str(tmp_path / "out"))  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "thin.png: resized to 1x96 (HxW)" in result.stderr
    assert "height 33..96" in result.stderr and not (tmp_path / "out").exists()


def test_export_refuses_what_it_cannot_serve(exported):
    _, checkpoint, _ = exported
    detector, _, _ = load_detector(checkpoint)
    example = resize(torch.rand(3, 48, 60), 48, 96)
    with pytest.raises(ValueError, match=r"fails at s\w+=1: it would compute another function there"):
        export_program(detector, example, (1, 96))  # a map of one cell at the coarsest level: traced otherwise
    cfg = DetModelConfig(name="swinlite_pico_patch2_window4_32", detector="retinanet", fpn_channels=16)
    with pytest.raises(ValueError, match="only Faster R-CNN detectors export to ONNX, got SwinRetinaNet"):
        export_program(build_detector(cfg, 2, 48, 96).eval(), example, (33, 96))


def test_export_script_refuses_other_detectors_in_one_line(trained, tmp_path, capsys):
    _, run = trained  # Mask R-CNN
    output = tmp_path / "maskrcnn.onnx"
    assert run_script("export_onnx", ["--checkpoint", run / "best.safetensors", "--output", output]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: only Faster R-CNN detectors export to ONNX, got SwinMaskRCNN")
    assert error.count("\n") == 1 and not output.exists()
