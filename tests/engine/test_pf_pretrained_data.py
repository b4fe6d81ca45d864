"""A fine-tune from a swinlite run's own weights file took ImageNet's normalisation (the model's pretrained config),
not the statistics, crop and interpolation the file records and its weights were trained with, without a word.
Unset data keys are now the file's; a given one stays (warned of where it differs); a resume keeps its own.
Detection's and segmentation's data.mean / data.std defaulted to ImageNet's values, so unset could not be told from
given: they are unset by default now, resolved as classification's are (ImageNet's for a Swin backbone)."""

from pathlib import Path
from typing import Any

import pytest
import torch
from enginekit import TASKS, tiny_config
from pico import PICO
from safetensors.torch import save_file
from timm.data import IMAGENET_DEFAULT_MEAN as IMAGENET_MEAN
from timm.data import IMAGENET_DEFAULT_STD
from weightkit import random_state_dict

from swinlite.engine.checkpoint import save_weights
from swinlite.engine.config import config_diff, dump_yaml, to_dict
from swinlite.engine.preflight import check_weights_fit, resolve_normalisation
from swinlite.metadata import weights_metadata

HALF = (0.5, 0.5, 0.5)
RECORDED = {"input_size": [3, 32, 32], "interpolation": "bilinear", "mean": list(HALF), "std": list(HALF),
            "crop_pct": 0.95, "crop_mode": "center"}  # fmt: skip


@pytest.fixture(scope="module")
def run_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A classification run's best.safetensors, trained with statistics of 0.5, crop 0.95, bilinear."""
    path = tmp_path_factory.mktemp("run") / "best.safetensors"
    state = random_state_dict(PICO, num_classes=2)
    save_weights(path, state, weights_metadata(PICO, {"num_classes": 2}, ["a", "b"], RECORDED))
    return path


def _resolved(task: str, tmp_path: Path, resume: bool = False, **extra: object) -> Any:
    cfg = tiny_config(task, tmp_path / "data", tmp_path / "out", **extra)
    return resolve_normalisation(TASKS[task], cfg, resume).data


def test_unset_keys_are_the_files_record(run_weights: Path, tmp_path: Path, recwarn):
    data = _resolved("classification", tmp_path, **{"model.pretrained": run_weights, "data.crop_pct": None})
    assert (data.mean, data.std, data.crop_pct, data.interpolation) == (HALF, HALF, 0.95, "bilinear")
    assert not recwarn.list


@pytest.mark.parametrize("task", ["detection", "segmentation"])
def test_a_backbone_from_a_classification_run_takes_its_statistics_where_null(task, run_weights: Path, tmp_path):
    """ImageNet's mean given: kept, with the warning naming the file's."""
    data = _resolved(task, tmp_path, **{"model.pretrained": run_weights, "data.mean": None, "data.std": None})
    assert (data.mean, data.std) == (HALF, HALF)
    imagenet = {"model.pretrained": run_weights, "data.mean": "[0.485,0.456,0.406]"}
    with pytest.warns(UserWarning, match=r"data.mean=\[0.485, 0.456, 0.406\] \(the file's: \[0.5, 0.5, 0.5\]\)"):
        assert _resolved(task, tmp_path, **imagenet).mean == IMAGENET_MEAN


def test_a_given_key_wins_and_is_warned_of_where_it_differs(run_weights: Path, tmp_path: Path):
    """Not data.crop_pct, the evaluation's crop: configs/finetune_384.yaml's 1.0 was warned of on every run from the
    ImageNet recipe's weights (0.875), as if they had been trained with it."""
    given = {"model.pretrained": run_weights, "data.mean": "[0.4,0.4,0.4]", "data.crop_pct": 1.0}
    with pytest.warns(UserWarning) as caught:
        data = _resolved("classification", tmp_path, **given)
    assert (data.mean, data.std, data.crop_pct) == ((0.4, 0.4, 0.4), HALF, 1.0)
    assert [str(w.message) for w in caught] == [
        f"model.pretrained {run_weights} was trained with other data settings than this run's: "
        "data.mean=[0.4, 0.4, 0.4] (the file's: [0.5, 0.5, 0.5]); training with this run's (null takes the file's)"
    ]


def test_a_resume_keeps_its_own_settings_not_the_files(run_weights: Path, tmp_path: Path):
    """Without the key in the run's config.yaml (a run started before unset keys were resolved): the model's."""
    data = _resolved("classification", tmp_path, resume=True, **{"model.pretrained": run_weights})
    assert data.mean == IMAGENET_MEAN


def test_a_one_channel_classifiers_record_leaves_the_misfit_to_the_weights_check(tmp_path: Path):
    """Its one mean is no value data.mean takes: the run said "records mean [0.5] ... set data.mean", which no setting
    fixed; the weights check names what is wrong, the first conv's shapes."""
    path = tmp_path / "gray.safetensors"
    gray = {"input_size": [1, 32, 32], "interpolation": "bicubic", "mean": [0.5], "std": [0.5], "crop_pct": 1.0,
            "crop_mode": "center"}  # fmt: skip
    meta = weights_metadata(PICO, {"in_chans": 1, "num_classes": 2}, ["a", "b"], gray)
    save_weights(path, random_state_dict(PICO, in_chans=1, num_classes=2), meta)
    cfg = tiny_config("classification", tmp_path / "data", tmp_path / "out", **{"model.pretrained": path})
    assert resolve_normalisation(TASKS["classification"], cfg).data.mean == IMAGENET_MEAN
    with pytest.raises(ValueError, match=r"patch_embed.proj.weight \(32, 1, 2, 2\) vs \(32, 3, 2, 2\)"):
        check_weights_fit(TASKS["classification"], cfg)


def test_a_task_that_is_no_name_is_refused_as_load_model_refuses_it(tmp_path: Path):
    path = tmp_path / "t5.safetensors"
    save_file(random_state_dict(PICO, num_classes=2), str(path), metadata={"task": "5"})
    with pytest.raises(ValueError, match="metadata task must be a task's name"):
        _resolved("classification", tmp_path, **{"model.pretrained": path})


def test_a_runs_resume_file_takes_the_settings_of_the_config_beside_it(tmp_path: Path, recwarn):
    """A classification run's resume.pt loads as its raw weights: it trained with ImageNet's statistics, without a
    word, where the run's best.safetensors gave its own."""
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"task": "classification", "model": random_state_dict(PICO, num_classes=2), "optimizer": {}},
               run / "resume.pt")  # fmt: skip
    (run / "config.yaml").write_text("data:\n  mean: [0.5, 0.5, 0.5]\n  std: [0.5, 0.5, 0.5]\n  crop_pct: null\n")
    data = _resolved("classification", tmp_path, **{"model.pretrained": run / "resume.pt"})
    assert (data.mean, data.std) == (HALF, HALF) and not recwarn.list


@pytest.mark.parametrize("record", ["data", "preprocessing"])
@pytest.mark.parametrize("task", ["classification", "segmentation"])
def test_a_contributors_task_records_its_statistics_as_the_shipped_tasks_do(task, record, tmp_path: Path, recwarn):
    """A run of a task swinlite does not ship (here "brightness") records them under data or preprocessing, as
    detection's and segmentation's do: the tasks' names were a table, and such weights gave ImageNet's, unwarned."""
    path = tmp_path / "bright.safetensors"
    save_weights(path, random_state_dict(PICO), {"task": "brightness", record: {"mean": list(HALF), "std": [0.25] * 3}})
    data = _resolved(task, tmp_path, **{"model.pretrained": path, "data.mean": None, "data.std": None})
    assert (data.mean, data.std) == (HALF, (0.25, 0.25, 0.25)) and not recwarn.list


@pytest.mark.parametrize("task", ["classification", "segmentation"])
def test_a_backbone_converted_from_a_run_gives_the_runs_statistics(task: str, tmp_path: Path, recwarn):
    """convert_checkpoint.py's backbone of a detection or segmentation run (a model record) recorded no mean and std: a
    run started from it took ImageNet's where started from the run's own file it took the run's."""
    path = tmp_path / "backbone.safetensors"
    record = {"model": PICO, "model_args": {"num_classes": 0}, "preprocessing": {"mean": list(HALF), "std": [0.25] * 3}}
    save_weights(path, random_state_dict(PICO, num_classes=0), record)
    data = _resolved(task, tmp_path, **{"model.pretrained": path, "data.mean": None, "data.std": None})
    assert (data.mean, data.std) == (HALF, (0.25, 0.25, 0.25)) and not recwarn.list


def _config(task: str, *overrides: str) -> Any:
    return TASKS[task].load_config(None, list(overrides))


@pytest.mark.parametrize("task", ["detection", "segmentation"])
def test_defaults_are_unset_and_resolve_to_imagenets(task: str):
    cfg = _config(task)
    assert (cfg.data.mean, cfg.data.std) == (None, None)
    resolved = resolve_normalisation(TASKS[task], cfg).data
    assert (resolved.mean, resolved.std) == (IMAGENET_MEAN, IMAGENET_DEFAULT_STD)


@pytest.mark.parametrize("task", ["detection", "segmentation"])
def test_a_classification_runs_weights_give_their_statistics_unwarned(task: str, run_weights: Path, recwarn):
    resolved = resolve_normalisation(TASKS[task], _config(task, f"model.pretrained={run_weights}")).data
    assert (resolved.mean, resolved.std) == (HALF, HALF)
    assert not recwarn.list


@pytest.mark.parametrize("task", ["detection", "segmentation"])
def test_a_resume_of_a_run_that_recorded_imagenets_values_finds_no_change(task: str, tmp_path: Path):
    """A run started when the defaults were ImageNet's values recorded them in config.yaml: a resume compares equal."""
    old = resolve_normalisation(TASKS[task], _config(task, f"train.output_dir={tmp_path}"))
    (tmp_path / "config.yaml").write_text(dump_yaml(to_dict(old)))
    resumed = resolve_normalisation(TASKS[task], _config(task, f"train.output_dir={tmp_path}"), resume=True)
    assert config_diff(TASKS[task].load_config(tmp_path / "config.yaml"), resumed) == []
