"""A fresh run never removes nor replaces its own ``--config`` file; ``--resume`` continues from ``OUT/config.yaml``."""

from pathlib import Path

import pytest
from enginekit import TASKS, overrides, tiny_config

from swinlite.engine import cli, run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

HAND_MADE = "# my recipe, with comments\ntrain:\n  epochs: 1\n"


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_fresh_run_refuses_its_config_file_in_the_output_folder(overwrite: bool, folder: Path, tmp_path: Path):
    """``--config exp1/config.yaml --output-dir exp1`` removed the file as a killed run's leftover (or with
    --overwrite), then wrote the resolved settings over it: the user's file, comments and all, was gone."""
    out = tmp_path / "exp1"
    out.mkdir()
    (out / "config.yaml").write_text(HAND_MADE)
    cfg = tiny_config("classification", folder, out, **{"train.epochs": 1})
    with pytest.raises(ValueError, match=r"is the file the run writes its settings to: keep your config elsewhere"):
        run(TASKS["classification"], cfg, overwrite=overwrite, config=out / "config.yaml")
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml"]  # refused before anything was removed or locked
    assert (out / "config.yaml").read_text() == HAND_MADE


def test_resume_takes_the_config_file_of_the_output_folder(folder: Path, tmp_path: Path):
    """With --resume, ``--config OUT/config.yaml`` is the run's own settings: the natural way to continue."""
    out = tmp_path / "out"
    run(TASKS["classification"], tiny_config("classification", folder, out, **{"train.epochs": 1}))
    cfg = tiny_config("classification", folder, out, **{"train.epochs": 2})
    assert run(TASKS["classification"], cfg, resume=True, config=out / "config.yaml") == out
    assert "epochs: 2" in (out / "config.yaml").read_text()


def test_the_scripts_pass_their_config_file_to_the_check(folder: Path, tmp_path: Path):
    """The scripts' entry (engine.cli.run_from_cli) hands its --config path to run(), which alone sees none."""
    out = tmp_path / "exp1"
    out.mkdir()
    (out / "config.yaml").write_text(HAND_MADE)
    args = overrides("classification", folder, out, **{"train.epochs": 1})
    with pytest.raises(ValueError, match=r"is the file the run writes its settings to"):
        cli.run_from_cli(TASKS["classification"], out / "config.yaml", args)
    assert (out / "config.yaml").read_text() == HAND_MADE
