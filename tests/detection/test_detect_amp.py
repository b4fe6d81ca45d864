"""detect.py --amp, as evaluate_detection.py's: bf16 autocast runs on the CPU and finds the boxes fp32 does (each
confident fp32 box has a bf16 box of its category
matching it at COCO's IoU 0.5, but for a few: a one-epoch detector's slivers move with bf16's rounding), and the
summary line names it."""

import json
from pathlib import Path

import pytest
import torch
from scriptkit import run_script
from torchvision.ops import box_iou

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the data's quirks warn; test_data checks those


def _boxes(path: Path, score: float) -> dict[str, list[tuple[int, list[float]]]]:
    """Each image's (category, [x0, y0, x1, y1]) of detections scoring at least ``score``."""
    found: dict[str, list] = {}
    for d in json.loads(path.read_text()):
        if d["score"] >= score:
            x, y, w, h = d["bbox"]
            found.setdefault(d["image"], []).append((d["category_id"], [x, y, x + w, y + h]))
    return found


def test_bf16_detects_as_fp32_and_is_named(trained, tmp_path, capsys):
    coco, run = trained
    detect = ["--checkpoint", run / "best.safetensors", "--device", "cpu", "--score-thresh", "0.05"]
    detect += ["--input", *sorted((coco / "val2017").glob("*.png"))[:3]]
    assert run_script("detect", [*detect, "--output-dir", tmp_path / "fp32"]) == 0
    assert "--amp" not in capsys.readouterr().out
    assert run_script("detect", [*detect, "--output-dir", tmp_path / "bf16", "--amp", "bf16"]) == 0
    assert " images (--amp bf16): " in capsys.readouterr().out
    full, half = _boxes(tmp_path / "fp32" / "detections.json", 0.3), _boxes(tmp_path / "bf16" / "detections.json", 0.1)
    matched = [_matched(box, [b for c, b in half.get(path, []) if c == category])
               for path, boxes in full.items() for category, box in boxes]  # fmt: skip
    assert matched and sum(matched) >= 0.8 * len(matched), f"{sum(matched)} of {len(matched)} boxes found again"
    drawn = sorted(p.name for p in (tmp_path / "bf16" / "images").iterdir())
    assert drawn == sorted(p.name for p in (tmp_path / "fp32" / "images").iterdir()) and len(drawn) == 3


def _matched(box: list[float], others: list[list[float]]) -> bool:
    """Whether a box of ``others`` matches ``box`` at COCO's IoU 0.5."""
    return bool(others) and box_iou(torch.tensor([box]), torch.tensor(others)).max().item() >= 0.5


def test_amp_does_not_apply_to_onnx(tmp_path, capsys):
    argv = ["--onnx", tmp_path / "x.onnx", "--amp", "bf16", "--input", tmp_path, "--output-dir", tmp_path / "out"]
    assert run_script("detect", argv) == 2
    assert "--onnx runs the exported file in ONNX Runtime on the CPU: --amp does not apply" in capsys.readouterr().err
