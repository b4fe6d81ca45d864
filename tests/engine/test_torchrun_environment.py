"""What torchrun leaves in the environment, and what it does not: a restart (--max-restarts) joins its process group
afresh, and an environment that describes no process's place is one clear error.

torchrun's agent keeps its rendezvous store across restarts: the restarted processes joined under the same prefix,
read the dead attempt's addresses and failed to connect (gloo's connectFullMesh), then hung deaf to SIGTERM. A
WORLD_SIZE left from another launch, without RANK, ended in a KeyError traceback."""

from pathlib import Path

import pytest
from rankforks import torchrun
from scriptkit import run_script

from swinlite.engine.distributed import launched

PROBE = """
import importlib.util
import os
import sys
import types
from pathlib import Path

import torch

# swinlite and swinlite.engine as bare packages: the two engine modules the probe runs need torch alone, and the
# packages' __init__ load timm and the tasks (5 s of CPU a process, four processes)
root = Path(importlib.util.find_spec("swinlite").origin).parent
for name, path in (("swinlite", root), ("swinlite.engine", root / "engine")):
    sys.modules[name] = types.ModuleType(name)
    sys.modules[name].__path__ = [str(path)]

from swinlite.engine.distributed import all_gather_object
from swinlite.engine.handshake import join

info = join(torch.device("cpu"), 60.0, {"settings": "alike"})
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
if attempt == "0" and info.rank == 1:
    os._exit(1)  # a process that dies once joined: torchrun restarts the whole group
print(f"rank {info.rank} attempt {attempt} sees {all_gather_object(info.rank, info)}", flush=True)
torch.distributed.destroy_process_group()
os._exit(0)  # not the second of torch's interpreter teardown: the processes' ends are not what is tested here
"""


def test_a_restarted_group_joins_afresh(tmp_path: Path):
    (tmp_path / "probe.py").write_text(PROBE)
    restarts = ["--max-restarts=1", "--monitor-interval=0.2"]
    result = torchrun(["--standalone", "--nproc_per_node=2", *restarts, str(tmp_path / "probe.py")], tmp_path, 180)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in (0, 1):  # the two processes print into one file: their lines may interleave
        assert result.stdout.count(f"rank {rank} attempt 1 sees [0, 1]") == 1, result.stdout
    assert "attempt 0 sees" not in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"WORLD_SIZE": "2"}, "the environment sets WORLD_SIZE=2 but not RANK: start the processes with torchrun"),
        ({"WORLD_SIZE": "two"}, "the environment sets WORLD_SIZE='two': expected a whole number"),
        ({"WORLD_SIZE": "2", "RANK": ""}, "the environment sets RANK='': expected a whole number"),
    ],
)
def test_an_environment_that_places_no_process_is_one_error(monkeypatch, capsys, tmp_path: Path, env, said):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=said):
        launched()
    assert run_script("train", ["--output-dir", str(tmp_path / "out")]) == 2
    assert f"error: {said}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
