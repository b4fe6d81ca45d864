"""--resume from another working directory, the paths given absolute, warned ``resuming with a changed setting
data.data_dir: data -> /ABS/data`` (and train.output_dir): config.yaml's relative paths were resolved against the new
directory, not the run's. They resolve against the one resume.pt records now. --resume without repeating
model.pretrained warned ``model.pretrained: PATH -> False``, though a resume takes its weights from resume.pt. --resume
compared with config.yaml, which a resume killed before its first save had rewritten: a change of the settings the
state was trained with went unsaid, and their own values were warned of as changed; it compares with resume.pt's."""

import warnings
from pathlib import Path

import pytest
import timm
import torch
from enginekit import DATA_FIXTURE, TASKS, tiny_config

from swinlite.engine import run
from swinlite.engine.config import dump_yaml, read_yaml
from swinlite.engine.trainer import rooted, saved_config

CHANGED = "warning: resuming with a changed setting "


def changes(printed: str) -> list[str]:
    """The settings a resume warned were changed."""
    return [line.removeprefix(CHANGED) for line in printed.splitlines() if line.startswith(CHANGED)]


@pytest.mark.parametrize("task", ["classification", "detection"])
def test_resume_from_another_directory_with_absolute_paths_warns_of_no_change(
    task: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, capsys
):
    data = request.getfixturevalue(DATA_FIXTURE[task])
    monkeypatch.chdir(data.parent)
    one_step = {"train.max_iters": 1}  # epochs of one step: the paths are compared before training
    run(TASKS[task], tiny_config(task, Path(data.name), Path("runs/k3"), **{"train.epochs": 1, **one_step}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:  # classification's cached scan named images from the old
        warnings.simplefilter("always")  # directory (data/train/...): each was skipped, not found
        cfg = tiny_config(task, data, data.parent / "runs/k3", **{"train.epochs": 2, **one_step})
        out = run(TASKS[task], cfg, resume=True)
    printed = capsys.readouterr().out
    assert changes(printed) == ["train.epochs: 1 -> 2"] and "resumed from" in printed
    assert not [w for w in caught if "No such file" in str(w.message)]
    assert (out / "resume.pt").is_file()


def test_resume_without_model_pretrained_nor_after_a_killed_resume_warns_of_no_change(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    weights = tmp_path / "pico.pth"
    torch.save(timm.create_model("swinlite_pico_patch2_window4_32").state_dict(), weights)
    monkeypatch.chdir(tmp_path)
    settings = {"train.epochs": 1, "train.max_iters": 1, "model.pretrained": weights}  # epochs of one step
    run(TASKS["classification"], tiny_config("classification", folder, Path("run"), **settings))
    capsys.readouterr()

    def resume(**settings: object) -> str:  # with train.epochs=2 once trained: nothing left, resume.pt stays as saved
        cfg = tiny_config(
            "classification", folder, Path("run"), **{"train.epochs": 2, "train.max_iters": 1, **settings}
        )
        run(TASKS["classification"], cfg, resume=True)
        return capsys.readouterr().out

    printed = resume()
    assert changes(printed) == ["train.epochs: 1 -> 2"] and "resumed from" in printed
    # a resume with optim.lr doubled, killed before its first save: config.yaml holds its settings, resume.pt the run's
    recorded = read_yaml(Path("run/config.yaml"))
    lr = recorded["optim"]["lr"]
    Path("run/config.yaml").write_text(dump_yaml({**recorded, "optim": {**recorded["optim"], "lr": 2 * lr}}))
    assert changes(resume(**{"optim.lr": 2 * lr})) == [f"optim.lr: {lr} -> {2 * lr}"]
    assert changes(resume()) == []
    assert read_yaml(Path("run/config.yaml"))["model"]["pretrained"] == str(weights)  # not resume.pt's false


def test_the_run_s_relative_paths_resolve_where_it_was_started():
    settings = {"data.data_dir": "data", "train.output_dir": "/abs/runs", "model.pretrained": True, "train.epochs": 1}
    assert rooted(settings, "/work") == {**settings, "data.data_dir": "/work/data"}
    assert rooted(settings, None) == settings  # a resume file from before it recorded its directory


def test_the_settings_compared_are_those_resume_pt_records_else_config_yaml(tmp_path: Path):
    defaults = tiny_config("classification", Path("data"), tmp_path)
    (tmp_path / "config.yaml").write_text(dump_yaml({"optim": {"lr": 0.5}, "data": {"data_dir": "yaml"}}))
    saved = {"cwd": "/work", "config": {"optim.lr": 0.25, "data.data_dir": "data"}}
    old = saved_config(saved, tmp_path, defaults)
    assert (old.optim.lr, old.data.data_dir) == (0.25, "/work/data")
    old = saved_config({"cwd": "/work"}, tmp_path, defaults)  # a resume file from before it recorded its settings
    assert (old.optim.lr, old.data.data_dir) == (0.5, "/work/yaml")
