"""The scripts that run on one process, started under torchrun (torchrun --nproc_per_node=2 scripts/evaluate.py ...),
ran the whole work once per process, each writing the same files (two summaries, a race on one folder). They are
refused first, said once: by each machine's first process (LOCAL_RANK 0); the others exit 2 without a word. The
training scripts are torchrun's (tests/engine)."""

import subprocess
import sys

import pytest
from scriptkit import SCRIPTS, script_env

ONE_PROCESS = ["evaluate", "evaluate_detection", "evaluate_segmentation", "predict", "detect", "segment",
               "extract_features", "export_onnx", "visualize", "benchmark", "convert_checkpoint"]  # fmt: skip


def _run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / f"{script}.py"), "--help"],
        env=script_env() | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("script", ONE_PROCESS)
def test_a_one_process_script_under_torchrun_is_refused_once(script):
    first = _run(script, WORLD_SIZE="2", RANK="0", LOCAL_RANK="0")
    expected = f"error: {script}.py runs on one process; start it with python, not torchrun (WORLD_SIZE=2)\n"
    assert (first.returncode, first.stdout, first.stderr) == (2, "", expected)
    other = _run(script, WORLD_SIZE="2", RANK="1", LOCAL_RANK="1")
    assert (other.returncode, other.stdout, other.stderr) == (2, "", "")


@pytest.mark.parametrize("script", ["evaluate", "detect"])
def test_one_process_of_one_runs(script):
    """torchrun --nproc_per_node=1 (WORLD_SIZE=1) is one process: it runs."""
    done = _run(script, WORLD_SIZE="1", RANK="0", LOCAL_RANK="0")
    assert done.returncode == 0 and "usage:" in done.stdout
