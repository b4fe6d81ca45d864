"""The scripts that run on one process, started under torchrun (torchrun --nproc_per_node=2 scripts/evaluate.py ...),
ran the whole work once per process, each writing the same files (two summaries, a race on one folder). They are
refused first, the environment named as the cause: under torchrun (TORCHELASTIC_RUN_ID set) said once, by each
machine's first process (LOCAL_RANK 0), the others exit 2 without a word; a process started by hand in an environment
with a leftover WORLD_SIZE (a Kubernetes PyTorchJob pod) always says it, whatever its LOCAL_RANK. The training scripts
are torchrun's (tests/engine)."""

import subprocess
import sys

import pytest
from scriptkit import SCRIPTS, script_env

ONE_PROCESS = ["evaluate", "evaluate_detection", "evaluate_segmentation", "predict", "detect", "segment",
               "extract_features", "export_onnx", "visualize", "benchmark", "convert_checkpoint"]  # fmt: skip
TORCHRUN_ENV = ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK", "LOCAL_RANK")  # set by each test, never inherited


def _run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / f"{script}.py"), "--help"],
        env={k: v for k, v in script_env().items() if k not in TORCHRUN_ENV} | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _expected(script: str) -> str:
    return (f"error: the environment says this is one of 2 processes (WORLD_SIZE=2, as torchrun sets it): "
            f"{script}.py runs on one: start it with python alone, with WORLD_SIZE unset or 1\n")  # fmt: skip


@pytest.mark.parametrize("script", ONE_PROCESS)
def test_a_one_process_script_under_torchrun_is_refused_once(script):
    torchrun = {"TORCHELASTIC_RUN_ID": "none", "WORLD_SIZE": "2"}
    first = _run(script, RANK="0", LOCAL_RANK="0", **torchrun)
    assert (first.returncode, first.stdout, first.stderr) == (2, "", _expected(script))
    other = _run(script, RANK="1", LOCAL_RANK="1", **torchrun)
    assert (other.returncode, other.stdout, other.stderr) == (2, "", "")


@pytest.mark.parametrize("script", ["predict", "evaluate"])
@pytest.mark.parametrize("local_rank", [None, "0", "1"])
def test_a_leftover_world_size_is_named_by_every_process_started_by_hand(script, local_rank):
    """WORLD_SIZE=2 [LOCAL_RANK=1] python3 scripts/predict.py: no torchrun; each process says why it stops."""
    env = {"WORLD_SIZE": "2"} | ({} if local_rank is None else {"LOCAL_RANK": local_rank})
    done = _run(script, **env)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", _expected(script))


@pytest.mark.parametrize("script", ["evaluate", "detect"])
def test_one_process_of_one_runs(script):
    """torchrun --nproc_per_node=1 (WORLD_SIZE=1) is one process: it runs."""
    done = _run(script, WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", TORCHELASTIC_RUN_ID="none")
    assert done.returncode == 0 and "usage:" in done.stdout
