"""A sweep: ``run`` called twice in the same two processes (forked: torch is already imported; they join the process
group and leave it, none trains), on one launch store that keeps its keys (torchrun's agent's). The second run read
the first one's startup reports as its own before: ``optim.lr is 0.001 on rank 0 and 0.002 on rank 1``.

And a sweep that trains, under torchrun with 2 CPU processes (DDP over gloo): train_detection.py, then train.py, in
the same two processes, each run checked as if it were the launch's only one (one launch: the processes' start,
torch, timm and swinlite imported, is most of a launch's time)."""

import contextlib
import csv
import importlib
import json
import os
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from enginekit import SCRIPT, overrides
from rankforks import forked_pair, report_and_exit, torchrun

from swinlite.engine import distributed, handshake
from swinlite.engine.checkpoint import load_resume

LRS = (0.001, 0.002)  # each run's, alike on every process
LATE = 0.5  # seconds rank 0 starts the second run after rank 1: rank 1 finds the first run's reports there

# A torchrun process of the sweep: each (script, argv) of the JSON file it is given, as `python scripts/<script>.py
# ARGV` runs it (scriptkit.run_script), rank 0 saying which starts on stdout; it stops at the first that fails.
SWEEP = """
import json
import os
import sys

from scriptkit import run_script

for script, argv in json.loads(open(sys.argv[1]).read()):
    if os.environ["RANK"] == "0":
        print(f"sweep: {script}", flush=True)
    code = run_script(script, argv)
    if code:
        sys.exit(code)
"""


def _rank(rank: int, port: int, reports: list[Path]) -> None:
    """One process: joins and leaves the group once per run, as ``run`` does, then reports how the runs ended; rank 0
    then stays (it hosts the store) until the other has reported."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, wait_for_workers=False)
    handshake.launch_store = lambda info, timeout: store  # the agent's, for every run
    said = []
    for lr in LRS:
        time.sleep(LATE * (rank == 0 and lr != LRS[0]))
        distributed.run_started()
        try:
            info = handshake.join(torch.device("cpu"), 10.0, {"optim.lr": lr})
            distributed.all_gather_object(None, info)  # the group joined works
            distributed.cleanup(info)
            said.append("joined")
        except Exception as e:
            said.append(f"{type(e).__name__}: {e}")
    report_and_exit(reports, rank, "; ".join(said))


def test_a_sweeps_next_run_reads_its_own_startup_reports(tmp_path: Path):
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    forked_pair(_rank, (reports,), timeout=30)
    assert [r.read_text() if r.exists() else "" for r in reports] == ["joined; joined"] * 2


def test_an_error_after_a_run_posts_nothing_under_the_next_runs_keys(monkeypatch):
    """A process that posted its startup report and then ended its run on an error tells the launch nothing more on
    its way out (the script's ``tell_launch``): the keys moved at the run's end, so it posted a stray report under the
    next run's keys and waited 5 s (bounded at 20) for peers that never answer, delaying torchrun's SIGTERM."""
    run_module = importlib.import_module("swinlite.engine.run")
    monkeypatch.setattr(distributed, "_runs", 0)
    monkeypatch.setattr(distributed, "_started", False, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(handshake, "_posted", f"{handshake._prefix()}/1")  # joined: its report posted

    def refused(task):
        raise ValueError("an error after the join")

    told = []
    monkeypatch.setattr(run_module, "checked_alike", lambda info: contextlib.nullcontext())  # raised as after the join
    monkeypatch.setattr(run_module, "check_task", refused)
    monkeypatch.setattr(handshake, "refuse_with_peers", lambda info, error, wait: told.append(str(error)))
    with pytest.raises(ValueError, match="after the join"):
        run_module.run(None, None)
    handshake.refuse_before_checks("boom", 5.0)
    assert told == []


def test_a_sweep_under_torchrun_trains_each_run_with_ddp(tmp_path: Path, coco: Path, folder: Path):
    """One epoch of each run, logged by rank 0 alone, a resume file with one RNG state per process.

    Detection, with a Swin level the FPN does not take: DDP failed at the second step on that level's output norm.
    Classification, with a BatchNorm model and EMA decay 0 (the EMA is the trained model): its scores must be the
    raw ones; each process averages its own BatchNorm statistics into its EMA copy, and before the fix each val shard
    was scored by a different EMA model. A warm-up longer than the run: warned once (on every rank before)."""
    det, cls = tmp_path / "det", tmp_path / "cls"
    unused_level = {"model.min_level": 1, "model.kwargs.out_norm": True}
    bn_ema = {
        "model.name": "resnet10t",
        "train.ema_decay": 0.0,
        "data.batch_size": 4,
        "train.epochs": 1,
        "schedule.warmup_epochs": 3,  # longer than the run: a warning on every rank
    }
    runs = [  # one after the other in the same processes: a sweep
        (SCRIPT["detection"], overrides("detection", coco, det, **unused_level)),
        (SCRIPT["classification"], overrides("classification", folder, cls, **bn_ema)),
    ]
    (tmp_path / "sweep.py").write_text(SWEEP)
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    args = ["--standalone", "--nproc_per_node=2", str(tmp_path / "sweep.py"), str(tmp_path / "runs.json")]
    result = torchrun(args, tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    _, det_said, cls_said = result.stdout.split("sweep: ")
    for said in (det_said, cls_said):
        assert said.count("epoch 1/1: train loss") == 1, result.stdout  # only rank 0 logs
    det_resume = load_resume(det / "resume.pt")
    assert len(det_resume["rng"]) == 2 and det_resume["step"] == 2  # 5 images (1 file missing): 3 a process, 2 batches
    assert result.stderr.count("warning: schedule.warmup_epochs 3.0 is not shorter than the run") == 1  # was twice
    assert "Cosine annealing scheduler will have no effect" not in result.stderr  # timm's note: the warning says it
    resume = load_resume(cls / "resume.pt")
    assert len(resume["rng"]) == 2  # one RNG state per process
    assert not torch.equal(resume["rng"][0]["torch"], resume["rng"][1]["torch"])  # ranks draw different augmentations
    assert resume["step"] == 3  # 24 images over 2 processes x batch 4: 3 steps per epoch
    rows = list(csv.DictReader(open(cls / "metrics.csv")))
    assert [r["epoch"] for r in rows] == ["1"]
    for row in rows:
        assert (row["val_loss_ema"], row["val_top1_ema"]) == (row["val_loss"], row["val_top1"]), row
