"""benchmark.py ended by SIGTERM (``kill``, a scheduler's stop) exited on the spot: the temporary photos folder of
--contended's loader rows stayed in the temp folder. SIGTERM now unwinds as Ctrl-C does: the folder is removed, one
"terminated" line, exit code 143, no traceback. Sent to the whole process group (Slurm's ``scancel``), it reaches the
loader's workers too, which leave it to the benchmark (a worker ended at once made the loader raise over the
unwinding, with a traceback)."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# scripts/benchmark.py run as a script, --contended on two pico models and small photos (as the tiny contended test),
# no busy-core process (a second torch import; test_busy_core_orphan ends it by SIGTERM).
DRIVER = """
import os, runpy, sys, timm, torch
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
real_init = contended.loader_worker_init


def marked_init():  # a worker says when it has set its SIGTERM handling up: the test signals after that
    init = real_init()

    def start(worker_id):
        init(worker_id)
        open(os.path.join(os.environ["WORKERS_READY"], str(worker_id)), "w").close()

    return start


contended.loader_worker_init = marked_init
sys.argv = sys.argv[1:]  # the script, its arguments
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture
def temp() -> Iterator[Path]:
    """The benchmark's TMPDIR, short: the loader workers' sockets live there (AF_UNIX paths hold ~100 characters)."""
    with tempfile.TemporaryDirectory(prefix="sigterm-") as folder:
        yield Path(folder)


def test_sigterm_removes_the_photos_folder_and_exits_143(tmp_path: Path, temp: Path):
    ready = tmp_path / "ready"
    ready.mkdir()
    paths = [str(ROOT / "scripts"), str(ROOT / "benchmarks"), *sys.path]
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join(paths),
        "OMP_NUM_THREADS": "1",
        "TMPDIR": str(temp),
        "WORKERS_READY": str(ready),
    }
    argv = [str(ROOT / "scripts" / "benchmark.py"), "--contended", "--precisions", "fp32", "--tasks", "inference"]
    argv += ["--models", "swinlite,timm", "--batch", "1", "--img-size", "32", "--warmup", "0", "--repeats", "100000"]
    bench = subprocess.Popen(
        [sys.executable, "-c", DRIVER, *argv, "--json", str(tmp_path / "b.json")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, the loader's workers in it
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(ready.iterdir())) < 2 and bench.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the loader's two workers have started
        assert list(temp.glob("swinbench-photos-*")), f"no photos folder: {bench.poll()=}"
        os.killpg(bench.pid, signal.SIGTERM)
        _, err = bench.communicate(timeout=30)
    finally:
        bench.kill()
        bench.wait()
    assert bench.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err, err
    assert err.splitlines()[-1] == "terminated", err
    assert not list(temp.glob("swinbench-photos-*"))
