"""A training script given another task's config key says whose key it is (scripts/_cli.py's other_task_key),
where its "did you mean" suggested an unrelated key of its own task."""

import pytest
from scriptkit import REPO, run_script


@pytest.mark.parametrize(
    ("script", "argv", "message"),
    [
        (
            "train_detection",
            ["train.label_smoothing=0.1"],  # suggested train.best_of
            "train.label_smoothing is a classification setting (scripts/train.py); scripts/train_detection.py has "
            "no such key",
        ),
        (
            "train",
            ["--config", REPO / "configs" / "det_demo.yaml"],  # suggested model.name for model.min_level
            "model.min_level is a detection setting (scripts/train_detection.py); scripts/train.py has no such key",
        ),
        (
            "train",
            ["data.train_images=x"],
            "data.train_images is a detection and segmentation setting (scripts/train_detection.py, "
            "scripts/train_segmentation.py); scripts/train.py has no such key",
        ),
        (
            "train_detection",
            ["data.classes=[a,b]"],
            "data.classes is a segmentation setting (scripts/train_segmentation.py); scripts/train_detection.py has "
            "no such key",
        ),
        ("train", ["optim.lrr=1"], "unknown config key 'optim.lrr'; did you mean 'optim.lr'?"),  # no task has it
        (
            "train",
            ["model.drop_path_rate=0.1"],
            "config key 'model.drop_path_rate' is now 'model.kwargs.drop_path_rate'",
        ),
    ],
)
def test_another_tasks_key_is_named_as_that_tasks(script: str, argv: list, message: str, capsys):
    assert run_script(script, ["--print-config", *argv]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_the_table_of_training_scripts_names_each_scripts_task_and_config():
    import importlib

    import _cli

    from swinlite.classification import ClassificationTask
    from swinlite.detection.task import DetectionTask
    from swinlite.segmentation.task import SegmentationTask

    tasks = {"scripts/train.py": ClassificationTask, "scripts/train_detection.py": DetectionTask,
             "scripts/train_segmentation.py": SegmentationTask}  # fmt: skip
    assert sorted(_cli.TRAIN_SCRIPTS) == sorted(f"scripts/{p.name}" for p in (REPO / "scripts").glob("train*.py"))
    for script, (name, module, config) in _cli.TRAIN_SCRIPTS.items():
        task = tasks[script]
        assert f"import {task.__name__}" in (REPO / script).read_text()
        assert (name, getattr(importlib.import_module(module), config)) == (task.name, task.config)
