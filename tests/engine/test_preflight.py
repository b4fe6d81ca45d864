"""The settings a run leaves to the model, resolved once before it starts: data.mean, data.std, data.crop_pct and
data.interpolation."""

import re
from pathlib import Path
from typing import Any

import pytest
import timm
import yaml
from enginekit import DATA_FIXTURE, TASKS, tiny_config
from timm.data import IMAGENET_DEFAULT_MEAN as IMAGENET_MEAN
from timm.data import IMAGENET_DEFAULT_STD as IMAGENET_STD
from timm.data import resolve_model_data_config
from trainkit import REPO

from swinlite.engine import run
from swinlite.engine.model import meta_model
from swinlite.engine.preflight import resolve_normalisation

FINETUNE = REPO / "configs" / "finetune_imagefolder.yaml"

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


def _finetune(tmp_path: Path, *overrides: str) -> Any:
    """scripts/train.py --data-dir's config (configs/finetune_imagefolder.yaml) with ``overrides``."""
    return TASKS["classification"].load_config(FINETUNE, [f"train.output_dir={tmp_path / 'out'}", *overrides])


@pytest.mark.parametrize(
    ("overrides", "crop_pct"),
    [
        ((), 0.9),  # swinlite_tiny_patch4_window7_224.ms_in1k: the config said 0.9 for it, any tag took that
        (("model.name=swinlite_base_patch4_window12_384.ms_in1k", "data.img_size=384"), 1.0),
        (("model.name=swinlite_v2_base_window12to24_192to384.ms_in22k_ft_in1k", "data.img_size=384"), 1.0),
    ],
)
def test_unset_crop_and_interpolation_are_the_tags(tmp_path: Path, overrides: tuple[str, ...], crop_pct: float):
    """data.crop_pct and data.interpolation were never the model's, as data.mean and data.std are (timm's train.py
    takes all four from the pretrained config): a 384 tag evaluated at 0.9, a --config file without crop_pct at
    0.875 whatever its tag's."""
    cfg = _finetune(tmp_path, *overrides)
    assert (cfg.data.crop_pct, cfg.data.interpolation) == (None, None)  # --print-config shows them unset
    model = meta_model(cfg.model.name, cfg.model.kwargs)
    assert resolve_model_data_config(model)["crop_pct"] == crop_pct
    resolved = resolve_normalisation(TASKS["classification"], cfg)
    assert (resolved.data.crop_pct, resolved.data.interpolation) == (crop_pct, "bicubic")
    given = _finetune(tmp_path, *overrides, "data.crop_pct=0.95", "data.interpolation=bilinear")
    resolved = resolve_normalisation(TASKS["classification"], given)
    assert (resolved.data.crop_pct, resolved.data.interpolation) == (0.95, "bilinear")


def test_resume_keeps_the_crop_and_interpolation_the_run_recorded(tmp_path: Path):
    """A run started while unset meant 0.875 and bicubic (its config.yaml records the values) keeps them at --resume,
    each key alone: a value the key cannot take is the model's."""
    cfg = _finetune(tmp_path)
    (tmp_path / "out").mkdir()
    recorded = {"crop_pct": 0.875, "interpolation": "bilinear", "mean": [0.5, 0.5, 0.5], "std": "wrong"}
    (tmp_path / "out" / "config.yaml").write_text(yaml.safe_dump({"data": recorded}))
    resolved = resolve_normalisation(TASKS["classification"], cfg, resume=True)
    assert (resolved.data.crop_pct, resolved.data.interpolation) == (0.875, "bilinear")
    assert (resolved.data.mean, resolved.data.std) == ((0.5, 0.5, 0.5), IMAGENET_STD)
    assert resolve_normalisation(TASKS["classification"], cfg).data.crop_pct == 0.9  # a new run: the tag's


@pytest.mark.parametrize(
    ("overlay", "message"),
    [
        ("{crop_pct: 1.5}", "data.crop_pct: swinlite_pico_patch2_window4_32's pretrained config gives 1.5 "
                            "(data.crop_pct=1.5 is out of range: expected 0 < data.crop_pct <= 1); set data.crop_pct"),
        ("{interpolation: box}", "data.interpolation: swinlite_pico_patch2_window4_32's pretrained config gives 'box' "
                                 "(data.interpolation must be one of bilinear, bicubic, nearest, lanczos, got 'box'); "
                                 "set data.interpolation"),
        ("{mean: [0.5]}", "data.mean: swinlite_pico_patch2_window4_32's pretrained config gives [0.5] (config key "
                          "'data.mean': cannot use [0.5], expected a list of 3 values); set data.mean"),
    ],
)  # fmt: skip
def test_a_models_value_its_key_does_not_take_is_one_error(tmp_path: Path, overlay: str, message: str):
    cfg = tiny_config("classification", tmp_path / "data", tmp_path / "out",
                      **{"model.kwargs.pretrained_cfg_overlay": overlay, "data.crop_pct": "null"})  # fmt: skip
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        resolve_normalisation(TASKS["classification"], cfg)


@pytest.mark.parametrize("task", list(TASKS))
def test_the_checks_before_a_run_build_the_model_once(task: str, tmp_path: Path, monkeypatch, request):
    """The model's keywords, classification's input size and the model's data config each built it on the meta
    device: the checks share one build of each (name, kwargs)."""
    cfg = tiny_config(task, request.getfixturevalue(DATA_FIXTURE[task]), tmp_path / "out")
    (tmp_path / "out").write_text("")  # refused after the checks: nothing is read or written
    builds, create = [], timm.create_model

    def counted(name: str, *args: Any, **kwargs: Any) -> Any:
        builds.append(name)
        return create(name, *args, **kwargs)

    monkeypatch.setattr(timm, "create_model", counted)
    with pytest.raises(ValueError, match="out"):
        run(TASKS[task], cfg)
    assert builds == [TASKS[task].model_name(cfg)]
