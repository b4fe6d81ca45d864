"""A task of your own, outside swinlite/ and this repository: its script's errors are one ``error:`` line and exit
code 2 (``swinlite.script.run``), and the scripts' tables of the shipped tasks give it clear messages, not a KeyError
or a "did you mean" among unrelated keys."""

import argparse
import runpy
import sys
from dataclasses import dataclass

import _cli
import pytest
import torch

from swinlite.engine import RunConfig
from swinlite.engine.config import load_config
from swinlite.io import save_safetensors
from swinlite.metadata import read_info

SCRIPT = """
import sys
from dataclasses import dataclass

from swinlite.engine import RunConfig, Task
from swinlite.engine.cli import run_from_cli
from swinlite.script import run


@dataclass
class ColourConfig(RunConfig):
    pass


class ColourTask(Task):
    name = "colour_regression"
    config = ColourConfig
    metric = "val_neg_mse"


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    config = args[0] if args and args[0].endswith(".yaml") else None
    return run_from_cli(ColourTask, config, [a for a in args if "=" in a])


if __name__ == "__main__":
    sys.exit(run(main))
"""


@dataclass
class ColourConfig(RunConfig):
    """A config of no shipped task."""


def test_a_script_outside_the_repo_says_a_user_error_in_one_line(tmp_path, monkeypatch, capsys):
    """Its run(main) turns the engine's refusal into one error line and exit 2 (a traceback before): the script run
    in this process as ``python train_colours.py ARGS`` runs it, from its own folder, as ``__main__``."""
    script = tmp_path / "train_colours.py"
    script.write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script), "train.label_smoothing=0.1"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(script), run_name="__main__")
    line = ("error: train.label_smoothing is a classification setting (scripts/train.py); the config "
            "__main__.ColourConfig has no such key")  # fmt: skip
    err = capsys.readouterr().err
    assert (exit_.value.code, err.splitlines()) == (2, [line]), err


def test_a_key_of_a_shipped_task_is_named_for_a_config_of_your_own(capsys):
    def main(argv: list[str] | None) -> None:
        load_config(ColourConfig(), None, ["train.label_smoothing=0.1"])

    with pytest.raises(SystemExit) as exit_:
        _cli.run(main, [])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"error: train.label_smoothing is a classification setting (scripts/train.py); the config "
        f"{__name__}.ColourConfig has no such key\n"
    )


@pytest.mark.parametrize(("written", "expected"), [("data:\n  dataset: mine\n", None), ("model: {}\n", "colours")])
def test_data_dir_with_a_config_of_a_task_without_a_demo(tmp_path, written, expected):
    config = tmp_path / "colours.yaml"
    config.write_text(written)
    args = argparse.Namespace(data_dir="data", config=str(config), output_dir=None, overrides=[])
    dataset = [f"data.dataset={expected}"] if expected else []
    assert _cli.train_overrides(args, "colours") == ["data.data_dir=data", *dataset]


def test_a_checkpoint_of_a_task_of_your_own_is_not_sent_to_unnamed_scripts(tmp_path):
    path = tmp_path / "best.safetensors"
    save_safetensors(path, {"w": torch.zeros(1)}, {"task": "colour_regression", "model": "m"})
    with pytest.raises(ValueError) as error:
        read_info(path)
    assert str(error.value) == (
        f"{path} is a colour_regression checkpoint, not a classifier's; swinlite's scripts read classification, "
        "detection, segmentation checkpoints only: read it with the code of the task that wrote it"
    )
