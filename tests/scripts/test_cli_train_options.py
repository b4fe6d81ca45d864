"""The options every training script takes (scripts/_cli.py's add_train_arguments, train_overrides): an empty one is
an error, key=value arguments apply after them, as --help says, and --print-config needs only the config."""

import sys

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


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_option_is_not_taken_by_its_prefix(script: str, capsys):
    """``--output X`` (a file, to other scripts) was taken as --output-dir X."""
    assert run_script(script, ["--print-config", "--output", "X"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unrecognized arguments: --output") and err.count("\n") == 1


@pytest.mark.parametrize("script", SCRIPTS)
def test_print_config_needs_no_extra_of_the_tasks_data(script: str, monkeypatch, capsys):
    """train_detection.py --print-config failed without pycocotools (the [detection] extra): it imported the task,
    whose data and evaluation read COCO, to print a config that needs none of it."""
    for name in ("pycocotools", "pycocotools.coco", "pycocotools.cocoeval", "pycocotools.mask"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of it fails, as where it is not installed
    for name in [m for m in sys.modules if m.startswith("swinlite.") and m.endswith(".task")]:
        package, _, leaf = name.rpartition(".")
        monkeypatch.setattr(sys.modules[package], leaf, sys.modules[name])  # restored after, as sys.modules' entry
        monkeypatch.delitem(sys.modules, name)  # imported again if a script imports it, as in a fresh process
    assert run_script(script, ["--print-config", "train.epochs=3"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["train"]["epochs"] == 3


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--resume", "--overwrite"], "--resume continues the run in the output folder and --overwrite replaces it; "
                                      "pass one"),
        (["--resume"], "--print-config prints a new run's settings, not a resumed one's: {out} holds those the run "
                       "resumes with"),
    ],
    ids=["resume-overwrite", "resume"],
)  # fmt: skip
@pytest.mark.parametrize("script", SCRIPTS)
def test_print_config_refuses_what_it_cannot_show(script: str, options: list[str], said: str, tmp_path, capsys):
    """--print-config --resume printed a new run's settings (data.mean: null), while the resume takes the run's own
    from its config.yaml; with --overwrite too, which a run refuses ("pass one"). A new run's, --overwrite's, prints."""
    assert run_script(script, ["--print-config", "--output-dir", str(tmp_path), *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + said.format(out=tmp_path / "config.yaml")) and err.count("\n") == 1, err
    assert run_script(script, ["--print-config", "--output-dir", str(tmp_path), "--overwrite"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["train"]["output_dir"] == str(tmp_path)


def test_the_readme_says_to_repeat_the_overrides_on_resume():
    """It said '--resume takes the overrides the run was started with', as if they were remembered: they are not
    (resuming without data.data_dir=... warns, then trains on the demo's data), as docs/training.md says."""
    from scriptkit import REPO

    readme, training = ((REPO / name).read_text() for name in ("README.md", "docs/training.md"))
    assert "repeat the overrides the run was started with" in " ".join(training.split())
    assert "`--resume` does not remember the run's options and overrides: repeat them" in " ".join(readme.split())


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_printed_config_given_back_prints_the_same(script: str, tmp_path, capsys):
    """detection's default decay_epochs (8, 11) printed as 8 and 11, read back as floats and printed 8.0, 11.0."""
    assert run_script(script, ["--print-config"]) == 0
    printed = capsys.readouterr().out
    (tmp_path / "config.yaml").write_text(printed)
    assert run_script(script, ["--print-config", "--config", str(tmp_path / "config.yaml")]) == 0
    assert capsys.readouterr().out == printed
