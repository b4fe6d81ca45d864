"""swinlite.inference.predict runs the model in eval mode and leaves each of its modules in the mode it was in."""

from pathlib import Path

import numpy as np
import timm
import torch
from pico import PICO
from PIL import Image
from torch.utils.data import DataLoader

from swinlite.images import ImageFiles
from swinlite.inference import eval_transform, predict


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
