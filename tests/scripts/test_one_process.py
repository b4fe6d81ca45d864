"""The scripts that run on one process, started under torchrun (torchrun --nproc_per_node=2 scripts/evaluate.py ...),
ran the whole work once per process, each writing the same files (two summaries, a race on one folder). They are
refused first, the environment named as the cause: under torchrun (TORCHELASTIC_RUN_ID set) said once, by each
machine's first process (LOCAL_RANK 0), the others wait without a word for torchrun to end them; a process started by
hand in an environment with a leftover WORLD_SIZE (a Kubernetes PyTorchJob pod) always says it, whatever its
LOCAL_RANK. The training scripts are torchrun's (tests/engine)."""

import signal
import subprocess
import sys
import time

import pytest
from scriptkit import SCRIPTS, script_env

from swinlite import script as runner

ONE_PROCESS = ["evaluate", "evaluate_detection", "evaluate_segmentation", "predict", "detect", "segment",
               "extract_features", "export_onnx", "visualize", "benchmark", "convert_checkpoint"]  # fmt: skip
TORCHRUN_ENV = ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK", "LOCAL_RANK")  # set by each test, never inherited
TORCHRUN = {"TORCHELASTIC_RUN_ID": "none", "WORLD_SIZE": "2"}  # a process of torchrun --nproc_per_node=2


def _command(script: str) -> list[str]:
    return [sys.executable, str(SCRIPTS / f"{script}.py"), "--help"]


def _env(**env: str) -> dict[str, str]:
    return {k: v for k, v in script_env().items() if k not in TORCHRUN_ENV} | env


def _run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(_command(script), env=_env(**env), capture_output=True, text=True, timeout=120)


def _expected(script: str) -> str:
    return (f"error: the environment says this is one of 2 processes (WORLD_SIZE=2, as torchrun sets it): "
            f"{script}.py runs on one: start it with python alone, with WORLD_SIZE unset or 1\n")  # fmt: skip


@pytest.mark.parametrize("script", ONE_PROCESS)
def test_a_one_process_script_under_torchrun_is_refused_once(script):
    first = _run(script, RANK="0", LOCAL_RANK="0", **TORCHRUN)
    assert (first.returncode, first.stdout, first.stderr) == (2, "", _expected(script))


def test_the_other_processes_under_torchrun_wait_for_its_sigterm_and_end_without_a_word():
    """LOCAL_RANK 1 exited 2 at once: torchrun then ended local rank 0 (SIGTERM), maybe before it said the error,
    and named this quiet process as the root cause. It waits now, until torchrun's SIGTERM once local rank 0 exited."""
    start = time.monotonic()
    _run("predict", RANK="0", LOCAL_RANK="0", **TORCHRUN)
    alone = time.monotonic() - start  # a process's start, refusal and exit
    other = subprocess.Popen(_command("predict"), env=_env(RANK="1", LOCAL_RANK="1", **TORCHRUN), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    with pytest.raises(subprocess.TimeoutExpired):
        other.wait(timeout=alone + 2)
    other.send_signal(signal.SIGTERM)  # torchrun's, once local rank 0 exited
    out, err = other.communicate(timeout=30)
    assert (other.returncode, out, err) == (-signal.SIGTERM, "", "")


@pytest.mark.parametrize("torchrun", [True, False])
def test_a_process_whose_error_another_says_waits_under_torchrun_alone(monkeypatch, torchrun: bool):
    """Processes started by hand (the tests' forked ranks) have no torchrun to end them: they exit at once."""
    monkeypatch.setattr(runner, "SAID_ELSEWHERE_WAIT", 0.5)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    if torchrun:
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    start = time.monotonic()
    assert runner.said_elsewhere() == 2
    assert (time.monotonic() - start >= 0.5) == torchrun


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
