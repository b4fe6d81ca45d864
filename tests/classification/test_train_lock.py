"""One run per output folder: a second run is refused with one line; a dead holder's lock is taken over."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from scriptkit import run_script
from trainkit import REPO, tiny_config, tiny_overrides, train

from swinlite.lock import OutputLock

# Another training run holding the lock through swinlite/lock.py, loaded by path (no torch import: starts fast).
HOLD = """import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("lock", sys.argv[1]); lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lock); lock.OutputLock(sys.argv[2], "training run", "--output-dir").acquire()
print("held", flush=True); time.sleep(120)"""


def test_second_run_refused_and_dead_holder_taken_over(tmp_path: Path, folder: Path, capsys):
    out = tmp_path / "out"
    lock_py = REPO / "swinlite" / "lock.py"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock_py), str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert run_script("train", tiny_overrides(folder, out)) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: output folder {out} is in use by another training run")
        assert f"pid {holder.pid} on " in lines[0]
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: the holder cannot clean up
        holder.wait(timeout=30)
    assert (out / ".lock").is_file()  # left behind, but nobody holds it
    lock = OutputLock(out, "training run", "--output-dir")
    lock.acquire()
    assert f"pid {holder.pid} on " in lock.stale
    with pytest.raises(ValueError, match=f"in use by another training run \\(pid {os.getpid()} on "):
        OutputLock(out, "training run", "--output-dir").acquire()
    lock.release()
    assert not (out / ".lock").exists()
    OutputLock(out, "training run", "--output-dir").acquire()  # free again (released at this process's exit)


# The holder forks a child that outlives it (a DataLoader worker orphaned by the run's kill -9) and prints its pid
# once the child runs (its fork handlers, which close its copy of the lock, have run by then: on a busy machine the
# holder was killed before the child was first scheduled, and the lock still held by the child's copy).
HOLD_FORKED = HOLD.replace(
    'print("held", flush=True)',
    "ready, told = os.pipe()\nchild = os.fork()\nif child == 0: os.write(told, b'1'); time.sleep(120); os._exit(0)\n"
    "os.read(ready, 1)\nprint(child, flush=True)",
).replace("import importlib.util", "import os, importlib.util")


def test_lock_ends_with_its_process_not_with_forked_children(tmp_path: Path):
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_FORKED, str(REPO / "swinlite" / "lock.py"), str(out)],
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(holder.stdout.readline())
    try:
        with pytest.raises(ValueError, match=f"in use by another training run \\(pid {holder.pid} on "):
            OutputLock(out, "training run", "--output-dir").acquire()  # the holder's lock stands after the fork
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        lock = OutputLock(out, "training run", "--output-dir")
        lock.acquire()  # while the orphaned child still lives
        assert f"pid {holder.pid} on " in lock.stale
        lock.release()
    finally:
        holder.kill()
        os.kill(child, signal.SIGKILL)


def test_run_releases_its_lock_and_reports_a_stale_one(tmp_path: Path, folder: Path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").write_text("pid 999999 on elsewhere, started 2020-01-01 00:00:00")  # its process is gone
    train(tiny_config(folder, out, **{"train.epochs": 1}))
    assert "was left by a run that ended without releasing it (pid 999999 on elsewhere" in capsys.readouterr().out
    assert not (out / ".lock").exists()
    with pytest.raises(ValueError, match="already holds a run"):  # a refused run releases the lock too
        train(tiny_config(folder, out, **{"train.epochs": 1}))
    assert not (out / ".lock").exists()


def test_output_folder_that_cannot_be_written_fails_before_training(tmp_path: Path, folder: Path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the output folder's parent should be")
    said = f"--output-dir (train.output_dir) {blocker / 'out'}: {blocker} is a file, not a folder"
    with pytest.raises(ValueError, match=re.escape(said)):
        train(tiny_config(folder, blocker / "out"))
