"""A detect.py / segment.py run killed (kill -9) between its record of the run (sources.json, written before the
first drawing) and its first drawing left sources.json alone in its --output-dir, which a rerun of the same command
refused as "beside none of <task>'s other outputs: it may be another task's": the user had to move it by hand. The
record's first write names its script: the rerun takes it for an earlier run's output (replaced with --overwrite, as
a killed run's drawings), while another task's lone record, one naming no script (an earlier version's) and the
user's own sources.json are refused as before."""

import json
from pathlib import Path

import pytest

from swinlite import files

TASKS = {"detection": "detect.py", "segmentation": "segment.py"}
IMAGES = [Path("in/a.png"), Path("in/b.png")]


def _killed_before_first_drawing(out: Path, task: str) -> None:
    """A run of ``task``'s drawing script into ``out``, killed after its record's first write, before its drawing."""
    files.DrawingRecord(out, files.check_output_dir(task, out, [], overwrite=False), IMAGES, TASKS[task]).add(
        files.numbered_name(0, IMAGES[0])
    )
    assert [p.name for p in out.iterdir()] == [files.RECORD]


@pytest.mark.parametrize("task", TASKS)
def test_a_rerun_takes_its_killed_runs_lone_record_for_an_earlier_output(tmp_path, task):
    _killed_before_first_drawing(tmp_path, task)
    with pytest.raises(ValueError, match="holds an earlier run's sources.json: pass --overwrite to replace it,"):
        files.check_output_dir(task, tmp_path, [], overwrite=False)
    assert files.check_output_dir(task, tmp_path, [], overwrite=True) == [tmp_path / files.RECORD]


@pytest.mark.parametrize("task", TASKS)
def test_the_record_names_its_script_beside_the_drawings(tmp_path, task):
    _killed_before_first_drawing(tmp_path, task)
    record = json.loads((tmp_path / files.RECORD).read_text())
    assert record == {"script": TASKS[task], "00000_a.png": "in/a.png", "00001_b.png": "in/b.png"}
    assert files.recorded_names(tmp_path) == {"00000_a.png", "00001_b.png"}


@pytest.mark.parametrize("task", TASKS)
def test_another_tasks_lone_record_is_refused(tmp_path, task):
    _killed_before_first_drawing(tmp_path, task)
    other = next(t for t in TASKS if t != task)
    for overwrite in (False, True):
        said = f"holds sources.json alone, the record of a {TASKS[task]} run .*, none of {other}'s outputs"
        with pytest.raises(ValueError, match=said):  # it said the record names no task
            files.check_output_dir(other, tmp_path, [], overwrite=overwrite)
    assert (tmp_path / files.RECORD).is_file()


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize(
    "content",
    [
        '{"00000_a.png": "in/a.png"}\n',  # an earlier version's record: it names no script
        '{"script": "evaluate.py"}\n',
        '{"script": ["detect.py", "segment.py"]}\n',
        "the user's notes\n",
    ],
)
def test_a_lone_sources_json_naming_no_drawing_script_is_refused(tmp_path, task, content):
    (tmp_path / files.RECORD).write_text(content)
    with pytest.raises(ValueError, match="holds sources.json beside none of .*: it may be another task's"):
        files.check_output_dir(task, tmp_path, [], overwrite=True)
    assert (tmp_path / files.RECORD).read_text() == content
