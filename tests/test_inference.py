"""swinlite.inference.predict runs the model in eval mode and leaves each of its modules in the mode it was in; the
shorter side the evaluation transform resizes to is timm's."""

from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from pico import PICO
from PIL import Image
from timm.data import create_transform
from torch.utils.data import DataLoader

from swinlite.images import ImageFiles
from swinlite.inference import class_names, eval_resize_shorter, eval_transform, predict
from swinlite.predictions import Prediction, write_csv


def test_predict_leaves_a_training_model_in_training_mode(tmp_path: Path):
    """predict ran ``model.eval()`` and left the model so: a model being trained came back in eval mode (no dropout
    nor drop path in its next steps). Its frozen first stage, which training mode keeps in eval mode, stays so."""
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "a.png")
    model = timm.create_model(PICO, num_classes=3, frozen_stages=1)
    modes = [m.training for m in model.modules()]
    assert model.training and not model.patch_embed.training
    seen = []  # the mode each forward ran in
    model.register_forward_pre_hook(lambda module, args: seen.append(module.training))
    loader = DataLoader(ImageFiles([tmp_path / "a.png"], eval_transform(model)), batch_size=1, collate_fn=list)
    ((done, prediction),) = list(predict(model, loader, 2, torch.device("cpu")))
    assert done == 1 and len(prediction.indices) == 2 and seen == [False]
    assert [m.training for m in model.modules()] == modes


@pytest.mark.parametrize(
    ("config", "shorter"),
    [
        ({"input_size": (3, 224, 224), "crop_pct": 0.875}, 256),
        ({"input_size": (3, 224, 224), "crop_pct": 0.9}, 248),  # floor(248.9)
        ({"input_size": (3, 224, 224), "crop_pct": 1.0}, 224),
        ({"input_size": (3, 224, 224), "crop_pct": None, "crop_mode": None}, 256),  # timm's defaults: 0.875, center
        ({"input_size": (3, 224, 320), "crop_pct": 0.875}, 365),  # floor(320 / 0.875) beside 256: the larger
        ({"input_size": (3, 224, 224), "crop_pct": 0.9, "crop_mode": "squash"}, None),
        ({"input_size": (3, 224, 224), "crop_pct": 0.9, "crop_mode": "border"}, None),
    ],
)
def test_the_evaluation_resize_is_timms(config: dict, shorter: int | None):
    """The shorter side timm's evaluation transform resizes a square image to (the largest any image gets, where the
    input size is not square), which the elongation check bounds; None where the aspect ratio is not kept."""
    assert eval_resize_shorter(config) == shorter
    if shorter is not None:
        resize = create_transform(**config, is_training=False).transforms[0]  # before the centre crop
        assert min(resize(Image.new("RGB", (8, 8))).size) == shorter


def test_class_names_are_the_recorded_ones_of_the_heads_size_else_indices():
    """Names of another count than the head's outputs (ImageNet's beside a head reset to 3) are not the classes."""
    model = timm.create_model(PICO, num_classes=3)
    assert class_names(model) == ["0", "1", "2"]
    model.pretrained_cfg = {**model.pretrained_cfg, "label_names": ["a", "b"]}
    assert class_names(model) == ["0", "1", "2"]
    model.pretrained_cfg = {**model.pretrained_cfg, "label_names": ["a", "b", "c"]}
    assert class_names(model) == ["a", "b", "c"]


def test_the_csv_writes_six_decimals_of_each_probability(tmp_path: Path):
    """predict.py's and its ONNX path's CSVs both come from write_csv: their comparison could not see its precision.
    The temporary file of a write a kill broke off stayed beside the CSV, one more per kill."""
    (tmp_path / ".p.csv.tmpab12cd34").write_text("path,class")
    write_csv([Prediction(Path("x.png"), [1, 0], [0.1234567, 0.5])], ["a", "b"], 2, tmp_path / "p.csv")
    assert [p.name for p in tmp_path.iterdir()] == ["p.csv"]
    assert (tmp_path / "p.csv").read_text().splitlines() == [
        "path,class,prob,class_2,prob_2",
        "x.png,b,0.123457,a,0.500000",
    ]
