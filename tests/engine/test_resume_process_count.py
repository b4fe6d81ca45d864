"""--resume with another number of processes than the run was saved with: its lr schedule is recounted for the new
global batch, as it should be, and said so; before, every such resume warned of changed settings or an old swinlite."""

from pathlib import Path

import pytest
from enginekit import TASKS, tiny_config

from swinlite.engine import run
from swinlite.engine.checkpoint import load_resume, save_resume

OLD_WORDING = "warning: the lr schedule differs from the saved one (changed settings, or"


@pytest.mark.parametrize("processes", [2, 1])
def test_a_schedule_recounted_for_another_number_of_processes_says_so(processes, folder: Path, tmp_path: Path, capsys):
    out = tmp_path / "run"
    run(TASKS["classification"], tiny_config("classification", folder, out, **{"train.epochs": 1}))
    saved = load_resume(out / "resume.pt")
    scheduler = saved["scheduler"] | {"t_initial": saved["scheduler"]["t_initial"] + 1}  # a schedule counted otherwise
    copies = {"rng": saved["rng"] * processes, "partial": saved["partial"] * processes}  # saved by these processes
    save_resume(out / "resume.pt", saved | copies | {"scheduler": scheduler})
    capsys.readouterr()
    run(TASKS["classification"], tiny_config("classification", folder, out, **{"train.epochs": 1}), resume=True)
    log = capsys.readouterr().out
    recounted = "note: the lr schedule was recounted for 1 process (saved with 2 processes): its steps per epoch"
    assert (recounted in log, OLD_WORDING in log) == (processes == 2, processes == 1), log
