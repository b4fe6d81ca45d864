"""What --resume refuses, each with one error line and before anything is written: a folder of another task (before
its settings are compared and before the data scan)."""

from pathlib import Path

import pytest
from enginekit import TASKS, overrides, script_main

from swinlite.engine.checkpoint import RESUME_KEYS, save_resume
from swinlite.engine.config import dump_yaml, to_dict

TASK = TASKS["classification"]


@pytest.fixture
def scans(monkeypatch) -> list[int]:
    """One entry per data scan (the task's ``build_datasets``) from now on."""
    calls, build_datasets = [], TASK.build_datasets

    def scanned(self):
        calls.append(1)
        return build_datasets(self)

    monkeypatch.setattr(TASK, "build_datasets", scanned)
    return calls


def refused(folder: Path, out: Path, capsys, **settings: object) -> str:
    """The one error line of a --resume into ``out`` with ``settings``; every file of the folder left as it was."""
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert script_main("classification", ["--resume", *overrides("classification", folder, out, **settings)]) == 2
    printed = capsys.readouterr()
    lines = printed.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), printed.err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    return lines[0] + printed.out


def test_a_folder_of_another_task_is_named_before_its_settings_and_the_data_scan(folder, tmp_path, capsys, scans):
    """A detection run resumed by scripts/train.py warned that its config.yaml could not be compared ("unknown config
    key 'model.detector'"), scanned the data, and only then said whose run it was."""
    out = tmp_path / "detection_run"
    out.mkdir()
    save_resume(out / "resume.pt", dict.fromkeys(RESUME_KEYS, 0) | {"task": "detection"})
    (out / "config.yaml").write_text(dump_yaml(to_dict(TASKS["detection"].config())))
    said = refused(folder, out, capsys)
    assert said.startswith(f"error: {out / 'resume.pt'} holds a detection run, not a classification run; choose its")
    assert "warning" not in said and scans == []
