"""Several runs of torch-free scripts (``scripts/<script> ARGV``, as onnxkit.run_without_torch runs one) in one fresh
interpreter in which importing torch, torchvision or timm fails: the interpreter's start-up and imports are paid once.
Each run's exit code and everything written to file descriptor 2 (Python's stderr and native libraries' alike) are
kept apart; warning filters are reset between runs, as a fresh process starts with its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from onnxkit import REFUSE_TORCH
from scriptkit import REPO, script_env

# One run after another, each as `python scripts/x.py ARGV` runs: __main__, its stderr (fd 2) a file of its own.
DRIVER = (
    REFUSE_TORCH
    + """
import json, os, runpy, tempfile, traceback, warnings
results, runs = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, os.path.dirname(runs[0][0]))
out = []
for script, argv in runs:
    sys.argv = [script, *argv]
    with tempfile.TemporaryFile("w+") as err, warnings.catch_warnings():
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else print(e.code, file=sys.stderr) or 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        out.append([code, err.read()])
with open(results, "w") as f:
    json.dump(out, f)
"""
)


def run_many_without_torch(runs: list[tuple[str, list[str]]], results: Path) -> list[tuple[int, str]]:
    """(exit code, stderr) of each ``(script, argv)`` of ``runs``, run in order in one torch-free interpreter;
    ``results`` is the file the interpreter hands them back in."""
    payload = json.dumps([[str(REPO / "scripts" / script), [str(a) for a in argv]] for script, argv in runs])
    done = subprocess.run([sys.executable, "-c", DRIVER, str(results), payload], env=script_env(), text=True,
                          capture_output=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [(code, err) for code, err in json.loads(results.read_text())]
