"""An --output-dir holding another task's script's outputs, or extract_features.py's or visualize.py's, is refused
before any work, with or without --overwrite, naming them (files.check_output_dir); --overwrite removes only the
task's own outputs, whole. segment.py's folder was accepted by evaluate.py, and evaluate_detection.py --overwrite
there removed segment.py's sources.json and evaluate.py's eval.json and left the label maps beside its results."""

from pathlib import Path

import pytest

from swinlite import files
from swinlite.engine.run import replaced_outputs

SCRIPTS = {script: task for task, scripts in files.OUTPUT_DIR_FILES.items() for script in scripts}
CROSS = [(script, task) for script, theirs in SCRIPTS.items() for task in files.OUTPUT_DIR_FILES if task != theirs]
FOLDER_SETS = {  # what extract_features.py and visualize.py write in their --output (files.FOLDER_FILES)
    "extract_features.py": ("settings.json", "embeddings.safetensors", "failures.txt", "features/a.png.safetensors"),
    "visualize.py": ("bias_stage0.png", "bias_stage1.png", "features.png"),
}


def _write(folder: Path, names) -> dict[Path, bytes]:
    """Write ``names`` in ``folder`` as the scripts do (a drawings folder holds a numbered drawing); return them."""
    for name in names:
        path = folder / name / files.numbered_name(0, "a.png") if name in files.DRAWINGS else folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"{name} of an earlier run".encode())
        if name == files.RECORD:  # the record names the drawings (files.DrawingRecord)
            path.write_bytes(files.json_bytes({files.numbered_name(0, "a.png"): "a.png"}))
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _outputs(script: str) -> tuple[str, ...]:
    return files.OUTPUT_DIR_FILES[SCRIPTS[script]][script]


@pytest.mark.parametrize("overwrite", [False, True], ids=["", "overwrite"])
@pytest.mark.parametrize(("script", "task"), CROSS, ids=[f"{s}-into-{t}" for s, t in CROSS])
def test_another_tasks_outputs_are_refused_even_with_overwrite(tmp_path, script, task, overwrite):
    before = _write(tmp_path, _outputs(script))
    with pytest.raises(ValueError) as refused:
        files.check_output_dir(task, tmp_path, [], overwrite)
    held = ", ".join(name for name in _outputs(script))
    assert f"--output-dir {tmp_path} holds {script}'s outputs ({held}): choose another --output-dir" in str(
        refused.value
    )
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("overwrite", [False, True], ids=["", "overwrite"])
@pytest.mark.parametrize("task", files.OUTPUT_DIR_FILES)
def test_a_mixed_folder_is_refused_naming_every_other_script(tmp_path, task, overwrite):
    """The user's tour: segment.py's and evaluate.py's outputs in one folder, then a script of each task."""
    _write(tmp_path, [*_outputs("segment.py"), *_outputs("evaluate.py")])
    with pytest.raises(ValueError) as refused:
        files.check_output_dir(task, tmp_path, [], overwrite)
    others = [script for script in ("segment.py", "evaluate.py") if SCRIPTS[script] != task]
    assert all(f"{script}'s outputs (" in str(refused.value) for script in others)
    assert (tmp_path / "sources.json").is_file() and (tmp_path / "labels").is_dir()


@pytest.mark.parametrize("overwrite", [False, True], ids=["", "overwrite"])
@pytest.mark.parametrize("task", files.OUTPUT_DIR_FILES)
@pytest.mark.parametrize("script", FOLDER_SETS)
def test_an_extraction_or_visualization_folder_is_refused(tmp_path, script, task, overwrite):
    """extract_features.py then refused to resume there (files.check_folder_alone)."""
    before = _write(tmp_path, FOLDER_SETS[script])
    with pytest.raises(ValueError, match=f"holds {script}'s outputs"):
        files.check_output_dir(task, tmp_path, [], overwrite)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("task", files.OUTPUT_DIR_FILES)
def test_a_lone_eval_json_is_refused_not_removed(tmp_path, task):
    """Every evaluate script writes eval.json and none records its task in it: alone, it may be another task's."""
    (tmp_path / "eval.json").write_text("{}\n")
    with pytest.raises(ValueError, match="holds eval.json beside none of"):
        files.check_output_dir(task, tmp_path, [], overwrite=True)
    assert (tmp_path / "eval.json").read_text() == "{}\n"


@pytest.mark.parametrize("script", [script for script in SCRIPTS if "eval.json" in _outputs(script)])
def test_overwrite_replaces_what_a_full_disk_left_before_eval_json(tmp_path, script):
    """An evaluate script writes eval.json last: a full disk (or a kill) before it leaves its other file alone, which
    is its task's, and --overwrite replaces it (a lone eval.json, written first, refused every rerun)."""
    (first,) = (name for name in _outputs(script) if name != "eval.json")
    _write(tmp_path, [first])
    assert files.check_output_dir(SCRIPTS[script], tmp_path, [], overwrite=True) == [tmp_path / first]


@pytest.mark.parametrize("script", SCRIPTS)
def test_overwrite_removes_the_same_tasks_outputs_whole(tmp_path, script):
    _write(tmp_path, _outputs(script))
    with pytest.raises(ValueError, match="holds an earlier run's"):
        files.check_output_dir(SCRIPTS[script], tmp_path, [], overwrite=False)
    earlier = files.check_output_dir(SCRIPTS[script], tmp_path, [], overwrite=True)
    assert sorted(p.name for p in earlier) == sorted(_outputs(script))


KILLED = {"detect.py": ("images", files.RECORD), "segment.py": ("labels", "overlays", files.RECORD)}  # before its end
LEFT = {script: _outputs(script) for script in SCRIPTS} | {f"killed {script}": KILLED[script] for script in KILLED}
PREFIXES = [(left, removed) for left, names in LEFT.items() for removed in range(len(names) + 1)]


@pytest.mark.parametrize(("left", "removed"), PREFIXES, ids=[f"{left}-{removed}" for left, removed in PREFIXES])
def test_overwrite_killed_while_removing_leaves_what_the_rerun_removes(tmp_path, left, removed):
    """--overwrite removes an earlier run's outputs one by one (files.remove_outputs): a kill after the first
    ``removed`` left evaluate_detection.py's eval.json, or detect.py's finished record (naming no script), alone,
    which every later run refused, --overwrite too. A run killed before its end left its first record, naming it."""
    script = left.removeprefix("killed ")
    _write(tmp_path, LEFT[left])
    if left != script:  # files.DrawingRecord's first write
        record = {files.RECORD_SCRIPT: script, files.numbered_name(0, "a.png"): "a.png"}
        (tmp_path / files.RECORD).write_bytes(files.json_bytes(record))
    earlier = files.check_output_dir(SCRIPTS[script], tmp_path, [], overwrite=True)
    files.remove_outputs(files.removal_order(earlier)[:removed])
    files.remove_outputs(files.check_output_dir(SCRIPTS[script], tmp_path, [], overwrite=True))
    assert not any(tmp_path.iterdir())


RUN = ("config.yaml", "metrics.csv", "best.safetensors", "resume.pt")  # a training run's own files
TRAINED = {  # what a drawing task's scripts write, each name once
    task: tuple(dict.fromkeys(name for written in scripts.values() for name in written))
    for task, scripts in files.OUTPUT_DIR_FILES.items()
    if files.drawing_script(task)
}
RUN_PREFIXES = [(task, removed) for task, names in TRAINED.items() for removed in range(len(names) + 1)]


@pytest.mark.parametrize(("task", "removed"), RUN_PREFIXES, ids=[f"{task}-{removed}" for task, removed in RUN_PREFIXES])
def test_train_overwrite_killed_while_removing_leaves_what_the_rerun_removes(tmp_path, task, removed):
    """train.py --overwrite removes what detect.py or segment.py and the task's evaluation left in the run folder
    (engine.run.replaced_outputs): a kill after the drawings were removed left the finished record beside the
    script's other files, which the rerun kept (no drawings folder: the user's), and every script refused after."""
    _write(tmp_path, (*RUN, *TRAINED[task]))
    earlier = replaced_outputs(tmp_path, overwrite=True)
    assert sorted(p.name for p in earlier) == sorted(TRAINED[task])
    files.remove_outputs(files.removal_order(earlier)[:removed])
    files.remove_outputs(replaced_outputs(tmp_path, overwrite=True))
    left = {p.name for p in tmp_path.iterdir()} - set(RUN)
    assert left <= {"classes.csv"}  # a name of segment.py's alone (its record removed) is kept as the user's
    for other in files.OUTPUT_DIR_FILES:
        files.check_output_dir(other, tmp_path, [], overwrite=True)


@pytest.mark.parametrize(
    "record", [{"train": "a.png"}, {files.RECORD_SCRIPT: "detect.py", files.numbered_name(0, "a.png"): "a.png"}]
)
def test_train_overwrite_keeps_a_sources_json_that_is_no_record_of_the_files_beside_it(tmp_path, record):
    """Beside segment.py's classes.csv, a sources.json whose keys are no drawings' names (the user's), or one that
    names detect.py as its writer, is no record of segment.py's run: train.py --overwrite keeps both files."""
    _write(tmp_path, (*RUN, "classes.csv"))
    (tmp_path / files.RECORD).write_bytes(files.json_bytes(record))
    assert replaced_outputs(tmp_path, overwrite=True) == []


@pytest.mark.parametrize("task", files.OUTPUT_DIR_FILES)
def test_an_evaluation_beside_a_training_runs_checkpoint_is_fine(tmp_path, task):
    """The evaluate scripts write beside the checkpoint by default: a run's own files are no script's outputs."""
    for name in ("config.yaml", "metrics.csv", "best.safetensors", "resume.pt", *files.TASK_FILES[task]):
        (tmp_path / name).write_bytes(b"the run's")
    assert files.check_output_dir(task, tmp_path, [tmp_path / "best.safetensors"], overwrite=False) == []
    _write(tmp_path, files.EVALUATIONS_BY_TASK[task])  # an earlier evaluation of the run's weights
    earlier = files.check_output_dir(task, tmp_path, [tmp_path / "best.safetensors"], overwrite=True)
    assert sorted(p.name for p in earlier) == sorted(files.EVALUATIONS_BY_TASK[task])


@pytest.mark.parametrize("task", files.OUTPUT_DIR_FILES)
def test_an_empty_or_new_folder_is_fine(tmp_path, task):
    assert files.check_output_dir(task, tmp_path, [], overwrite=False) == []
    assert files.check_output_dir(task, tmp_path / "new", [], overwrite=True) == []
