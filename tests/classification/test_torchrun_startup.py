"""scripts/train.py in 2 CPU processes whose processes do not start alike: one fails its startup checks (under
torchrun), or they run different settings (forked processes: the refusal comes before any training). Before, the
other process waited in the process group's C++ join (deaf to torchrun's SIGTERM) or in its first collective, up to
train.dist_timeout, and said misleading things."""

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from rankforks import torchrun, two_ranks
from trainkit import REPO, tiny_overrides

TIMEOUT = 120  # train.dist_timeout: the old hang lasted this long (then a SIGKILL 30 s later)


# Rank 0 under torchrun: its imports alongside rank 1's, then scripts/train.py (as `python scripts/train.py ARGS`
# runs it) only once rank 1 has posted its startup report, i.e. waits in the join (a fixed delay of 8 s before); a
# rank 0 slow to say its error (2 s), as one on a busy machine may be.
LATE = """
import os
import runpy
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the script's runner sets it before torch loads
import swinlite.classification  # noqa: F401
import swinlite.script
from swinlite.engine.distributed import launched
from swinlite.engine.handshake import _prefix, launch_store

say = swinlite.script.fail
swinlite.script.fail = lambda message: (time.sleep(2.0), say(message))

launch_store(launched(), 60.0).wait([f"{_prefix()}/1"])  # rank 1 passed its checks: it waits for rank 0's report
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _torchrun(tmp_path: Path, overrides: list[str], extra: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    """Run train.py on 2 processes, rank 0 with the ``extra`` overrides added, and started once rank 1 waits in the
    join; the result and its wall time."""
    (tmp_path / "late.py").write_text(LATE)
    wrapper = tmp_path / "wrap.sh"
    quoted = " ".join(f"'{item}'" for item in extra)
    late = f"{sys.executable} {tmp_path / 'late.py'}"
    wrapper.write_text(f'#!/bin/sh\nif [ "$RANK" = 0 ]; then shift; exec {late} "$@" {quoted}; fi\nexec "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    args = ["--standalone", "--nproc_per_node=2", "--no-python", str(wrapper), sys.executable,
            str(REPO / "scripts" / "train.py"), *overrides]  # fmt: skip
    start = time.monotonic()
    result = torchrun(args, tmp_path, timeout=240)
    return result, time.monotonic() - start


def _errors(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if "error:" in line]


def _field(summary: str, name: str) -> str:
    """A field's value in torchrun's failure summary (``  rank      : 0 (local_rank: 0)``), its first in ``summary``."""
    return next(line.split(":", 1)[1].strip() for line in summary.splitlines() if line.split(":")[0].strip() == name)


def test_rank_0_alone_failing_its_checks_ends_both_at_once(tmp_path: Path, folder: Path):
    """Rank 0's data folder missing (rank 1's found), rank 0's script started once rank 1 waits in the join: rank 1
    hung there, deaf to torchrun's SIGTERM, and was SIGKILLed 30 s later (before, bounded only by
    train.dist_timeout)."""
    missing = tmp_path / "nowhere"
    overrides = tiny_overrides(folder, tmp_path / "out", **{"train.epochs": 1, "train.dist_timeout": TIMEOUT})
    result, seconds = _torchrun(tmp_path, overrides, [f"data.data_dir={missing}"])
    assert seconds < 45, (seconds, result.stderr)  # at once; ~63 s before (the SIGKILL's 30 s wait)
    assert "SIGKILL" not in result.stderr, result.stderr
    (line,) = _errors(result)
    assert str(missing) in line and "rank 0 failed" not in line, line  # rank 0 says its own error, as raised
    # rank 1 waits for torchrun's SIGTERM: rank 0, which says the error, is the first to exit (rank 1 exited 2 at
    # once before: torchrun ended rank 0, here before it said the error, and named rank 1 as the root cause)
    root = result.stderr.split("Root Cause (first observed failure):")[1]
    assert _field(root, "rank") == "0 (local_rank: 0)" and _field(root, "exitcode").split()[0] == "2", result.stderr


def test_processes_started_with_different_settings_are_refused_before_training(tmp_path: Path, folder: Path):
    """train.epochs=1 on rank 0, 2 on rank 1: rank 0 finished and rank 1 failed later (different data folders hung
    for train.dist_timeout); each process stepped its own schedule."""
    out = tmp_path / "out"
    overrides = tiny_overrides(folder, out, **{"train.epochs": 1, "train.dist_timeout": TIMEOUT})
    codes, said, seconds = two_ranks("train", [overrides, [*overrides, "train.epochs=2"]], tmp_path)
    assert seconds < 60, (seconds, said)
    assert codes == [2, 2], said
    errors = [line for text in said for line in text.splitlines() if "error:" in line]
    assert errors == [
        "error: the processes were started with different settings: train.epochs is 1 on rank 0 and 2 on rank 1; "
        "start every process with the same config, overrides and command line"
    ], said
    assert not (out / "resume.pt").exists() and not os.path.exists(out / "config.yaml")
