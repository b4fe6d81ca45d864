"""scripts/train_detection.py under torchrun (2 CPU processes) whose processes read different data under the same
settings (another machine's files at the same path; here each process in its own folder): each stepped its own
schedule and shard and waited in collectives the others never made, up to train.dist_timeout."""

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

from detkit import REPO, make_quirky_coco, tiny_overrides
from scriptkit import script_env


def test_processes_that_read_different_data_are_refused_at_once(tmp_path: Path):
    for name in ("a", "b"):
        make_quirky_coco(tmp_path / name / "coco")
    annotations = tmp_path / "b" / "coco" / "annotations" / "instances_train2017.json"
    tree = json.loads(annotations.read_text())
    dropped = tree["images"].pop(0)["id"]  # one train image fewer on rank 1
    tree["annotations"] = [a for a in tree["annotations"] if a["image_id"] != dropped]
    annotations.write_text(json.dumps(tree))
    wrapper = tmp_path / "wrap.sh"  # the relative data.data_dir is each process's own folder's
    folders = f'if [ "$RANK" = 1 ]; then cd {tmp_path / "b"}; else cd {tmp_path / "a"}; fi'
    wrapper.write_text(f'#!/bin/sh\n{folders}\nexec "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    overrides = tiny_overrides(Path("coco"), tmp_path / "out", **{"train.dist_timeout": 60})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "--no-python",
           str(wrapper), sys.executable, str(REPO / "scripts" / "train_detection.py"), *overrides]  # fmt: skip
    start = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, env=script_env(), timeout=240)
    assert time.monotonic() - start < 50, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert errors == [
        "error: the processes read different data: rank 0 5 train / 5 val samples, rank 1 4 train / 5 val; give every "
        "process (every machine) the same data"
    ], result.stderr
    assert "exitcode  : 2" in result.stderr and not (tmp_path / "out" / "resume.pt").exists()
