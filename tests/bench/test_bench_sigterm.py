"""benchmark.py ended by SIGTERM (``kill``, a scheduler's stop) exited on the spot: the temporary photos folder of
--contended's loader rows stayed in the temp folder. SIGTERM now unwinds as Ctrl-C does: the folder is removed, one
"terminated" line, exit code 143, no traceback."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# scripts/benchmark.py run as a script, --contended on two pico models and small photos (as the tiny contended test),
# no busy-core process (a second torch import; test_busy_core_orphan ends it by SIGTERM).
DRIVER = """
import runpy, sys, timm, torch
from contextlib import nullcontext
from dataclasses import asdict
from swinbench import contended
from swinbench.swin import machine_info

def small_start(cfg, tasks):
    models = {name: timm.create_model("swinlite_pico_patch2_window4_32") for name in cfg.models}
    result = dict(config=asdict(cfg), machine=machine_info("cpu"), max_output_difference={})
    result["gflop_per_image"] = {task: 0.01 for task in tasks}
    return models, torch.randn(cfg.batch, 3, cfg.img_size, cfg.img_size), result

contended.start_run = small_start
contended.busy_core = lambda: nullcontext(lambda active: None)
contended.PHOTO_SIZE = (40, 60)
contended.LOADER_BATCHES = 1
sys.argv = sys.argv[1:]  # the script, its arguments
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_sigterm_removes_the_photos_folder_and_exits_143(tmp_path):
    temp = tmp_path / "temp"
    temp.mkdir()
    paths = [str(ROOT / "scripts"), str(ROOT / "benchmarks"), *sys.path]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1", "TMPDIR": str(temp)}
    argv = [str(ROOT / "scripts" / "benchmark.py"), "--contended", "--precisions", "fp32", "--tasks", "inference"]
    argv += ["--models", "swinlite,timm", "--batch", "1", "--img-size", "32", "--warmup", "0", "--repeats", "100000"]
    bench = subprocess.Popen(
        [sys.executable, "-c", DRIVER, *argv, "--json", str(tmp_path / "b.json")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(temp.glob("swinbench-photos-*")) and bench.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert list(temp.glob("swinbench-photos-*")), f"no photos folder: {bench.poll()=}"
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=30)
    finally:
        bench.kill()
        bench.wait()
    assert bench.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err, err
    assert err.splitlines()[-1] == "terminated", err
    assert not list(temp.glob("swinbench-photos-*"))
