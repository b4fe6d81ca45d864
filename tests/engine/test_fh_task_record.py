"""task_files.json (swinlite.files.TASK_RECORD): what --overwrite removes, so read only as the engine writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from enginekit import overrides, script_main
from test_fd_new_task import ColourTask, evaluated, train

from swinlite.files import TASK_RECORD, record_task_files, recorded_task_files


def test_a_run_into_a_folder_holding_a_record_not_the_engines_is_refused(folder: Path, tmp_path: Path, capsys):
    """The record was trusted from any source: a fresh classification run rewrote it (keeping "x"), and its
    --overwrite then deleted the user's x."""
    out = tmp_path / "ow2"
    out.mkdir()
    (out / TASK_RECORD).write_text('{"files": ["x"], "mine": true}')
    (out / "x").write_text("hi")
    tiny = overrides("classification", folder, out, **{"train.epochs": 1})
    assert script_main("classification", tiny) != 0
    assert "is no record of a run's task files" in capsys.readouterr().err
    assert script_main("classification", ["--overwrite", *tiny]) != 0
    assert "is no record of a run's task files" in capsys.readouterr().err
    assert (out / "x").read_text() == "hi"
    assert json.loads((out / TASK_RECORD).read_text()) == {"files": ["x"], "mine": True}


@pytest.mark.parametrize(
    "text",
    [
        '{"files": ["x"], "mine": true}',
        '{"files": ["x"]}',  # one line: not as the engine writes it
        "not json",
        "[]",
        '{\n "files": []\n}',
        '{\n "files": [\n  "y",\n  "x"\n ]\n}',
        '{\n "files": [\n  "../x"\n ]\n}',
        '{\n "files": [\n  "sub/x"\n ]\n}',
        '{\n "files": [\n  ".."\n ]\n}',
        '{\n "files": [\n  ".lock"\n ]\n}',
        '{\n "files": [\n  "best.safetensors"\n ]\n}',
        '{\n "files": [\n  "config.yaml"\n ]\n}',
        '{\n "files": [\n  "resume.pt"\n ]\n}',
        '{\n "files": [\n  "scan.json.gz"\n ]\n}',
        '{\n "files": [\n  "task_files.json"\n ]\n}',
    ],
)
def test_a_record_not_as_the_engine_writes_it_is_refused(tmp_path: Path, text: str):
    (tmp_path / TASK_RECORD).write_text(text)
    with pytest.raises(ValueError, match=r"task_files\.json is no record of a run's task files \(") as e:
        recorded_task_files(tmp_path)
    assert "\n" not in str(e.value)


def test_a_symlinked_record_is_refused(tmp_path: Path):
    (tmp_path / "real").mkdir()
    (tmp_path / "out").mkdir()
    record_task_files(tmp_path / "real", ["x"])
    (tmp_path / "out" / TASK_RECORD).symlink_to(tmp_path / "real" / TASK_RECORD)
    with pytest.raises(ValueError, match="expected a regular file"):
        recorded_task_files(tmp_path / "out")


def test_the_engines_record_reads_back(tmp_path: Path):
    record_task_files(tmp_path, ["b.csv", "a.json", "b.csv"])
    assert recorded_task_files(tmp_path) == ["a.json", "b.csv"]
    record_task_files(tmp_path, [])
    assert not (tmp_path / TASK_RECORD).exists()


def test_overwrite_removes_a_recorded_name_only_where_it_is_a_regular_file(tmp_path: Path):
    """A symlink (or a folder) of a recorded name is the user's: --overwrite keeps it, and its target."""
    out = train(ColourTask, tmp_path / "out")
    evaluated(out)
    (out / "errors.csv").unlink()
    target = tmp_path / "mine.csv"
    target.write_text("the user's own file")
    (out / "errors.csv").symlink_to(target)
    train(ColourTask, out, overwrite=True)
    assert (out / "errors.csv").is_symlink() and target.read_text() == "the user's own file"
    assert not (out / "eval.json").exists()


class FailsBuildingData(ColourTask):
    def build_datasets(self):
        raise ValueError("no data today")


def test_a_fresh_run_after_one_that_ended_before_its_first_save_keeps_its_record(tmp_path: Path):
    """A run ended before its first save left its record (and its files): the next fresh run was refused as into a
    folder holding a run's outputs, though nothing was saved to resume or replace."""
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="no data today"):
        train(FailsBuildingData, out)
    (out / "colour_stats.json").write_text("{}")  # what the task wrote before it failed
    assert recorded_task_files(out) == ["colour_stats.json", "errors.csv"]  # eval.json: a shipped table's
    train(ColourTask, out)
    assert recorded_task_files(out) == ["colour_stats.json", "errors.csv"]  # eval.json: a shipped table's
    assert (out / "best.safetensors").is_file()
