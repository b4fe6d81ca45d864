"""Under torchrun, rank 0 killed (SIGKILL: it says nothing) and the others ended by torchrun's SIGTERM: one of them
says the last checkpoint is kept and how to continue it, once for the run."""

import os
import signal
import time

import pytest
from enginekit import TASKS, overrides

from swinlite.engine import cli
from swinlite.lock import LOCK_FILE, OutputLock


def terminated_on(rank: str, out, folder, monkeypatch, capsys) -> tuple[int, list[str]]:
    """Exit code and stderr lines of process ``rank`` of two, ended by SIGTERM in its run."""

    def sigterm(*args, **kwargs):
        raise cli.Terminated

    monkeypatch.setattr(cli, "run", sigterm)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    code = cli.run_from_cli(TASKS["classification"], None, overrides("classification", folder, out))
    return code, capsys.readouterr().err.strip().splitlines()


def test_rank_1_says_how_to_continue_when_rank_0_was_killed(folder, tmp_path, monkeypatch, capsys):
    """Rank 0's lock on the folder left behind (its file stays; the OS freed the lock): rank 1 exited 143 without a
    word of the resume file."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "resume.pt").write_bytes(b"")
    (out / LOCK_FILE).write_text("training run (pid 1 on host, started now)")
    code, lines = terminated_on("1", out, folder, monkeypatch, capsys)
    assert code == 128 + signal.SIGTERM
    assert lines == [
        f"terminated as rank 0 ended without a word (killed?); continue from {out}/resume.pt with --resume"
    ]
    assert terminated_on("2", out, folder, monkeypatch, capsys) == (143, [])  # the lock was claimed: said once


@pytest.mark.parametrize("held", [True, False])
def test_rank_1_leaves_the_hint_to_a_rank_0_that_runs_on(held, folder, tmp_path, monkeypatch, capsys):
    """Rank 0 alive (the lock held) or ended its run (the lock released): rank 0 says the hint, rank 1 nothing."""
    out = tmp_path / "out"
    lock = OutputLock(out, "training run", "--output-dir")
    lock.acquire()
    (out / "resume.pt").write_bytes(b"")
    if not held:
        lock.release()
    assert terminated_on("1", out, folder, monkeypatch, capsys) == (143, [])
    assert os.path.exists(out / LOCK_FILE) == held
    lock.release()


def test_a_lock_left_by_an_earlier_launch_is_not_taken_for_rank_0s(folder, tmp_path, monkeypatch, capsys):
    """A lock file left by a killed run before this launch, rank 1 ended before rank 0 took the lock (a scancel at
    start-up): rank 1 said rank 0 had ended without a word beside rank 0's own hint, and removed the file, whose
    dead holder the next run names."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "resume.pt").write_bytes(b"")
    (out / LOCK_FILE).write_text("training run (pid 1 on host, started an hour ago)")
    hour_ago = time.time() - 3600
    os.utime(out / LOCK_FILE, (hour_ago, hour_ago))
    assert terminated_on("1", out, folder, monkeypatch, capsys) == (143, [])
    assert (out / LOCK_FILE).exists()


@pytest.mark.parametrize("saved", [True, False])
def test_a_stalled_rank_error_says_how_to_continue(saved, folder, tmp_path, monkeypatch, capsys):
    """Rank 0 names the stalled rank, and (as for every other end of a run) the resume file or that none was saved
    yet: it said the rank alone."""

    def stalled(*args, **kwargs):
        raise cli.StalledRankError("rank 1 stopped progressing (a collective waited train.dist_timeout=15 s for it)")

    out = tmp_path / "out"
    out.mkdir()
    if saved:
        (out / "resume.pt").write_bytes(b"")
    monkeypatch.setattr(cli, "run", stalled)
    assert cli.run_from_cli(TASKS["classification"], None, overrides("classification", folder, out)) == 1
    hint = f"continue from {out}/resume.pt with --resume" if saved else "before the first save; nothing to resume"
    err = capsys.readouterr().err
    assert err.startswith("error: rank 1 stopped progressing (a collective waited train.dist_timeout=15 s for it)")
    assert hint in err
