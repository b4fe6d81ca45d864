"""The options every training script takes (scripts/_cli.py's add_train_arguments, train_overrides): an empty one is
an error, and key=value arguments apply after them, as --help says."""

import pytest
import yaml
from scriptkit import run_script

SCRIPTS = ("train", "train_detection", "train_segmentation")


@pytest.mark.parametrize(
    ("option", "expected"),
    [("--config", "a YAML file"), ("--data-dir", "a dataset folder"), ("--output-dir", "a folder for the run")],
)
@pytest.mark.parametrize("script", SCRIPTS)
def test_an_empty_option_is_an_error_saying_what_it_expects(script: str, option: str, expected: str, capsys):
    """``--data-dir "$DATA"`` with DATA unset trained the demo: an empty value was taken for the option not given."""
    assert run_script(script, ["--print-config", option, ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: argument {option}: empty; expected {expected} (see ") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("option", "key", "section"),
    [("--output-dir", "train.output_dir", "train"), ("--data-dir", "data.data_dir", "data")],
)
@pytest.mark.parametrize("script", SCRIPTS)
def test_key_value_arguments_apply_after_the_options(script: str, option: str, key: str, section: str, capsys):
    """--output-dir A train.output_dir=B gave A, --data-dir A data.data_dir=B gave B."""
    name = key.split(".")[1]
    for argv in ([option, "A", f"{key}=B"], [f"{key}=B", option, "A"]):
        assert run_script(script, ["--print-config", *argv]) == 0
        assert yaml.safe_load(capsys.readouterr().out)[section][name] == "B"
    assert run_script(script, ["--print-config", option, "A"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)[section][name] == "A"
