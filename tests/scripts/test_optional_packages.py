"""Scripts without an optional package (a ``pip install -e .`` without the extra): one line naming the extra to
install, or, where the package is not needed, a run as usual (scikit-learn builds the digits demos only)."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import timm
import torch
from pico import PICO
from safetensors.torch import save_file
from scriptkit import SCRIPTS, script_env
from trainkit import REPO, make_folder, tiny_overrides

from swinlite.weights import weights_metadata

# A fresh interpreter running, phase by phase, each script of a phase as `python scripts/<name>.py ARGS` would, where
# the packages the phase names are not installed (None in sys.modules: `import` raises ModuleNotFoundError,
# importlib.util.find_spec says None), then importing the phase's modules; a hang dumps its stacks.
HARNESS = """
import atexit, faulthandler, importlib, json, os, runpy, sys

faulthandler.dump_traceback_later(240, exit=True)
sys.path.insert(0, SCRIPTS)
previous = []
for phase, (missing, runs, modules) in enumerate(json.loads(sys.argv[1])):
    for name in previous:
        del sys.modules[name]  # the previous phase's missing packages: installed again
    sys.modules.update(dict.fromkeys(missing))
    previous = missing
    for name, argv in runs:
        print(f"== {name}", file=sys.stderr, flush=True)
        sys.argv = [f"{SCRIPTS}/{name}.py", *argv]
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as e:
            print(json.dumps([name, e.code]), flush=True)
    for module in modules:
        importlib.import_module(module)
    print(f"phase {phase} imported", flush=True)
atexit._run_exitfuncs()  # then no second of tearing torch and timm down
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""

PRE = {"input_size": [3, 16, 16], "interpolation": "bicubic", "mean": [0.5] * 3, "std": [0.25] * 3}
PRE |= {"crop_pct": 1.0, "crop_mode": "center"}


def _classifier(path: Path) -> Path:
    """A self-describing 2-class pico checkpoint (classes c0, c1)."""
    torch.manual_seed(0)
    state = timm.create_model(PICO, num_classes=2).state_dict()
    meta = weights_metadata(PICO, {"num_classes": 2}, ["c0", "c1"], PRE)
    save_file(state, path, {k: json.dumps(v) for k, v in meta.items()})
    return path


def test_missing_optional_packages_are_one_line_naming_the_extra(tmp_path: Path, initial_weights):
    """After ``pip install -e .`` (no extras), in one interpreter:

    - without scikit-learn, matplotlib and pycocotools: predict.py needs none of them; evaluate.py says which extra it
      needs, evaluate_detection.py and train_detection.py the [detection] one (it holds [train]: one round of
      installs); the modules of detect.py, segment.py and the detector's and segmenter's export load without [train]
      or [detection], and so do the classification package, its config and data (it imported its task, whose
      evaluation draws with matplotlib). The detection scripts run first, before another script loaded the modules
      they share.
    - without scikit-learn, pycocotools and onnx: train.py trains (no scikit-learn needed) but its digits demo needs
      scikit-learn, train_detection.py needs pycocotools, export_onnx.py onnx (refused before the weights are read or
      traced)."""
    folder = make_folder(tmp_path / "images")
    ckpt, val = _classifier(tmp_path / "best.safetensors"), make_folder(tmp_path / "data", 2, 2, splits=("val",))
    light = [
        ("evaluate_detection", ["--checkpoint", str(ckpt), "--data-dir", str(val)]),
        ("train_detection", ["--output-dir", str(tmp_path / "det0")]),
        ("predict", ["--checkpoint", str(ckpt), "--output", str(tmp_path / "p.csv"), "--no-progress",
                     str(val / "val")]),
        ("evaluate", ["--checkpoint", str(ckpt), "--data-dir", str(val), "--num-workers", "0"]),
    ]  # fmt: skip
    modules = [
        f"swinlite.{task}.{module}" for task in ("detection", "segmentation") for module in ("predictor", "export")
    ] + ["swinlite.classification", "swinlite.classification.data"]  # (its task's evaluation draws: loaded on use)
    runs = [
        ("train", ["--config", str(REPO / "configs" / "demo.yaml"), "--data-dir", str(folder),
                   *tiny_overrides(folder, tmp_path / "run", **{"train.epochs": 1})]),  # no scikit-learn needed
        ("train", [f"data.data_dir={tmp_path / 'digits'}", f"train.output_dir={tmp_path / 'demo'}"]),  # the demo
        ("train_detection", ["--output-dir", str(tmp_path / "det")]),
        ("export_onnx", ["--model", PICO, "--checkpoint", str(initial_weights(PICO)), "--output",
                         str(tmp_path / "m.onnx")]),  # refused before the weights are read or traced
    ]  # fmt: skip
    phases = [
        (["sklearn", "matplotlib", "pycocotools"], light, modules),
        (["sklearn", "pycocotools", "onnx"], runs, []),
    ]
    code = f"SCRIPTS = {str(SCRIPTS)!r}\n" + HARNESS
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(phases)], capture_output=True, text=True, env=script_env(), timeout=300
    )
    exits = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("[")]
    assert exits == [["evaluate_detection", 2], ["train_detection", 2], ["predict", 0], ["evaluate", 2],
                     ["train", 0], ["train", 2], ["train_detection", 2], ["export_onnx", 2]], result.stderr  # fmt: skip
    assert [line for line in result.stdout.splitlines() if line.startswith("phase")] == [
        "phase 0 imported",
        "phase 1 imported",
    ], result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    parts = result.stderr.split("== ")[1:]
    with open(tmp_path / "p.csv", encoding="utf-8") as fh:
        assert len(list(csv.DictReader(fh))) == 4, parts[2]
    assert (tmp_path / "run" / "best.safetensors").is_file(), parts[4]
    hints = {  # the part of each run's stderr (the others: none) -> its error line's words
        0: "optional package 'pycocotools': pip install -e \".[detection]\"",
        1: "optional package 'pycocotools': pip install -e \".[detection]\"",
        3: 'pip install -e ".[train]"',
        5: "optional package 'sklearn': pip install -e \".[train]\"",
        6: "optional package 'pycocotools': pip install -e \".[detection]\"",
        7: "optional package 'onnx': pip install -e \".[export]\"",
    }
    for i, part in enumerate(parts):
        errors = [line for line in part.splitlines() if line.startswith("error: ")]
        assert len(errors) == (i in hints) and (i not in hints or hints[i] in errors[0]), part
    assert "(or pip install scikit-learn)" in parts[5]  # pip's name, not the import name
