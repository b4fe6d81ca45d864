"""Detection's and segmentation's data.mean / data.std defaulted to ImageNet's values, so unset could not be told from
given: a backbone fine-tuned from a classification run's weights file (trained with statistics of 0.5) trained with
ImageNet's and only warned. They are now unset (None) by default, resolved as classification's are: the file's record,
else the model's pretrained config (ImageNet's for a Swin backbone: default runs do not change)."""

from pathlib import Path
from typing import Any

import pytest
from enginekit import TASKS
from pico import PICO
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from weightkit import random_state_dict

from swinlite.engine.checkpoint import save_weights
from swinlite.engine.config import config_diff, dump_yaml, to_dict
from swinlite.engine.preflight import resolve_normalisation
from swinlite.metadata import weights_metadata

HALF = (0.5, 0.5, 0.5)
RECORDED = {"input_size": [3, 32, 32], "interpolation": "bilinear", "mean": list(HALF), "std": list(HALF),
            "crop_pct": 0.95, "crop_mode": "center"}  # fmt: skip
TASK_NAMES = ["detection", "segmentation"]


@pytest.fixture(scope="module")
def classifier_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A classification run's best.safetensors, trained with statistics of 0.5."""
    path = tmp_path_factory.mktemp("run") / "best.safetensors"
    state = random_state_dict(PICO, num_classes=2)
    save_weights(path, state, weights_metadata(PICO, {"num_classes": 2}, ["a", "b"], RECORDED))
    return path


def _config(task: str, *overrides: str) -> Any:
    return TASKS[task].load_config(None, list(overrides))


@pytest.mark.parametrize("task", TASK_NAMES)
def test_defaults_are_unset_and_resolve_to_imagenets(task: str):
    cfg = _config(task)
    assert (cfg.data.mean, cfg.data.std) == (None, None)
    resolved = resolve_normalisation(TASKS[task], cfg).data
    assert (resolved.mean, resolved.std) == (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_a_classification_runs_weights_give_their_statistics_unwarned(task: str, classifier_weights: Path, recwarn):
    resolved = resolve_normalisation(TASKS[task], _config(task, f"model.pretrained={classifier_weights}")).data
    assert (resolved.mean, resolved.std) == (HALF, HALF)
    assert not recwarn.list


@pytest.mark.parametrize("task", TASK_NAMES)
def test_a_resume_of_a_run_that_recorded_imagenets_values_finds_no_change(task: str, tmp_path: Path):
    """A run started when the defaults were ImageNet's values recorded them in config.yaml: a resume compares equal."""
    old = resolve_normalisation(TASKS[task], _config(task, f"train.output_dir={tmp_path}"))
    (tmp_path / "config.yaml").write_text(dump_yaml(to_dict(old)))
    resumed = resolve_normalisation(TASKS[task], _config(task, f"train.output_dir={tmp_path}"), resume=True)
    assert config_diff(TASKS[task].load_config(tmp_path / "config.yaml"), resumed) == []
