"""train.amp: false (YAML's false, in a file or on the command line) is train.amp=none: it was refused, naming the
choices, though false reads as what it means."""

from pathlib import Path

import pytest
from enginekit import TASKS


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("value", ["false", "False", "no", "off"])
def test_yaml_false_turns_amp_off_in_a_file_and_on_the_command_line(tmp_path: Path, task: str, value: str):
    (config := tmp_path / "c.yaml").write_text(f"train:\n  amp: {value}\n")
    load = TASKS[task].load_config
    assert load(config).train.amp == "none"
    assert load(None, ["train.amp=bf16", f"train.amp={value}"]).train.amp == "none"


def test_true_is_still_refused_naming_the_choices(tmp_path: Path):
    """Only false is read as a choice (none): true names none of them."""
    (config := tmp_path / "c.yaml").write_text("train:\n  amp: true\n")
    with pytest.raises(ValueError, match="YAML read the boolean True; expected one of none, bf16, fp16"):
        TASKS["classification"].load_config(config)
