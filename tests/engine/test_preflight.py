"""The settings a run leaves to the model, resolved once before it starts: data.mean and data.std."""

import pytest
from enginekit import TASKS, tiny_config
from timm.data import IMAGENET_DEFAULT_MEAN as IMAGENET_MEAN
from timm.data import IMAGENET_DEFAULT_STD as IMAGENET_STD

from swinlite.engine.preflight import resolve_normalisation

VIT = {"model.name": "vit_tiny_patch16_224", "model.kwargs": "{img_size: 16, patch_size: 8, depth: 1}"}


@pytest.mark.parametrize("task", list(TASKS))
def test_every_task_gets_numbers_and_swinlite_models_imagenets(task: str, tmp_path):
    """Detection and segmentation build their transforms and detectors from the section: never None there."""
    cfg = tiny_config(task, tmp_path / "data", tmp_path / "out")
    resolved = resolve_normalisation(TASKS[task], cfg)
    assert (resolved.data.mean, resolved.data.std) == (IMAGENET_MEAN, IMAGENET_STD)  # results do not change


def test_unset_values_are_the_models_and_given_ones_stay(tmp_path):
    """data.mean / data.std were ImageNet's whatever the model: a timm ViT whose pretrained config says 0.5 (as timm's
    train.py takes it, resolve_data_config) was trained on ImageNet's statistics without a word."""
    task = TASKS["classification"]
    cfg = tiny_config("classification", tmp_path / "data", tmp_path / "out", **VIT)
    assert (cfg.data.mean, cfg.data.std) == (None, None)  # the default: the model's
    resolved = resolve_normalisation(task, cfg)
    assert (resolved.data.mean, resolved.data.std) == ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    assert cfg.data.mean is None  # the caller's config is left as it was
    given = tiny_config("classification", tmp_path / "data", tmp_path / "out", **VIT, **{"data.mean": "[0.1,0.2,0.3]"})
    resolved = resolve_normalisation(task, given)
    assert (resolved.data.mean, resolved.data.std) == ((0.1, 0.2, 0.3), (0.5, 0.5, 0.5))
