"""Metadata whose task is null or no task name (safetensors files written by hand or by another tool)."""

from pathlib import Path

import pytest
import timm
from pico import PICO
from safetensors.torch import save_file

from swinlite.metadata import read_info
from swinlite.weights import load_model


def _file(tmp_path: Path, task: str) -> Path:
    path = tmp_path / "w.safetensors"
    model = timm.create_model(PICO, num_classes=3)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path), metadata={"task": task})
    return path


def test_null_task_loads_as_plain_weights(tmp_path: Path) -> None:
    path = _file(tmp_path, "null")  # JSON null: records no task, as a file without the key
    assert read_info(path) is None
    assert load_model(path, model=PICO).num_classes == 3


@pytest.mark.parametrize("task", ["5", '""'])
def test_task_not_a_name_is_refused_by_its_value(tmp_path: Path, task: str) -> None:
    with pytest.raises(ValueError, match="metadata task must be a task's name"):
        read_info(_file(tmp_path, task))


def test_convert_checkpoint_reads_a_null_task_as_read_info_does(tmp_path: Path, capsys) -> None:
    """It read "task": null as another task's: the output kept the metadata and said so ("its metadata kept (None)")
    without checking it against --model; a file that records no task and no model is plain weights there too."""
    from scriptkit import run_script

    from swinlite.io import read_metadata

    out = tmp_path / "out.safetensors"
    assert run_script("convert_checkpoint", [_file(tmp_path, "null"), out, "--model", PICO]) == 0
    assert "metadata kept" not in capsys.readouterr().out
    assert "task" not in read_metadata(out)
