"""--data-dir with --config (scripts/_cli.py's train_overrides): it sets data.dataset to the task's own layout only
where the file sets none or the task's built-in demo; a dataset the file names stays (train_segmentation.py
--config FILE --data-dir DIR with the file's data.dataset: folder trained ade20k, then refused data.classes)."""

import dataclasses
import importlib
from pathlib import Path

import _cli
import pytest
import yaml
from scriptkit import REPO, run_script

# script -> (its --data-dir dataset, its demo config, the config class)
TASKS = {
    "train": ("folder", "demo.yaml", "swinlite.classification.config.Config"),
    "train_detection": ("coco", "det_demo.yaml", "swinlite.detection.config.DetConfig"),
    "train_segmentation": ("ade20k", "seg_demo.yaml", "swinlite.segmentation.config.SegConfig"),
}


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump({"data": data} if data else {"train": {"epochs": 1}}))
    return path


def _dataset(script: str, argv: list[object], capsys) -> str:
    assert run_script(script, ["--print-config", *argv]) == 0, capsys.readouterr().err
    return yaml.safe_load(capsys.readouterr().out)["data"]["dataset"]


@pytest.mark.parametrize("script", TASKS)
def test_the_table_names_each_tasks_demo(script: str):
    """DEMO_DATASETS[the --data-dir dataset] is what the script's demo config trains, and a dataset of its task."""
    dataset, demo, cls = TASKS[script]
    module, name = cls.rsplit(".", 1)
    data = getattr(importlib.import_module(module), name)().data
    choices = next(f.metadata["choices"] for f in dataclasses.fields(data) if f.name == "dataset")
    assert _cli.DEMO_DATASETS[dataset] == yaml.safe_load((REPO / "configs" / demo).read_text())["data"]["dataset"]
    assert {dataset, _cli.DEMO_DATASETS[dataset]} <= set(choices)


@pytest.mark.parametrize("script", TASKS)
def test_data_dir_replaces_the_demo_and_a_file_without_a_dataset(script: str, tmp_path: Path, capsys):
    dataset, demo, _ = TASKS[script]
    for config in (REPO / "configs" / demo, _write(tmp_path / "none.yaml", {})):
        assert _dataset(script, ["--config", config, "--data-dir", tmp_path], capsys) == dataset


@pytest.mark.parametrize("script", TASKS)
def test_data_dir_keeps_a_dataset_the_file_names(script: str, tmp_path: Path):
    """A data.dataset that is neither the demo nor --data-dir's gets no data.dataset override."""
    dataset, _, _ = TASKS[script]
    config = _write(tmp_path / "mine.yaml", {"dataset": "mine"})
    args = _cli.Parser(None)
    _cli.add_train_arguments(args, "", "")
    overrides = _cli.train_overrides(args.parse_args(["--config", str(config), "--data-dir", "D"]), dataset)
    assert overrides == ["data.data_dir=D"]
    demo = _write(tmp_path / "demo.yaml", {"dataset": _cli.DEMO_DATASETS[dataset]})
    overrides = _cli.train_overrides(args.parse_args(["--config", str(demo), "--data-dir", "D", "a.b=1"]), dataset)
    assert overrides == ["data.data_dir=D", f"data.dataset={dataset}", "a.b=1"]


def test_segmentation_folder_config_with_data_dir_trains_the_folder(tmp_path: Path, capsys):
    """The reported case: the file's data.dataset: folder and data.classes, and --data-dir."""
    config = _write(tmp_path / "mine.yaml", {"dataset": "folder", "classes": ["background", "road"]})
    assert _dataset("train_segmentation", ["--config", config, "--data-dir", tmp_path], capsys) == "folder"


def test_a_config_file_that_cannot_be_read_is_one_error(tmp_path: Path, capsys):
    assert run_script("train_segmentation", ["--config", tmp_path / "absent.yaml", "--data-dir", tmp_path]) == 2
    assert capsys.readouterr().err == f"error: config file {tmp_path / 'absent.yaml'} does not exist\n"
