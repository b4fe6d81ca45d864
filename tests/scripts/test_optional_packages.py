"""Scripts without an optional package (a ``pip install -e .`` without the extra): one line naming the extra to
install, or, where the package is not needed, a run as usual (scikit-learn builds the digits demos only)."""

import json
import subprocess
import sys
from pathlib import Path

from pico import PICO
from scriptkit import SCRIPTS, script_env
from trainkit import REPO, make_folder, tiny_overrides

# A fresh interpreter where the packages named in argv[1] are not installed (None in sys.modules: `import` raises
# ModuleNotFoundError, importlib.util.find_spec says None), running each script of argv[2] as
# `python scripts/<name>.py ARGS` would; a hang dumps its stacks.
HARNESS = """
import faulthandler, json, runpy, sys

faulthandler.dump_traceback_later(240, exit=True)
sys.modules.update(dict.fromkeys(sys.argv[1].split(",")))
sys.path.insert(0, SCRIPTS)
for name, argv in json.loads(sys.argv[2]):
    print(f"== {name}", file=sys.stderr, flush=True)
    sys.argv = [f"{SCRIPTS}/{name}.py", *argv]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as e:
        print(json.dumps([name, e.code]), flush=True)
"""


def test_missing_optional_packages_are_one_line_naming_the_extra(tmp_path: Path, initial_weights):
    folder = make_folder(tmp_path / "images")
    runs = [
        ("train", ["--config", str(REPO / "configs" / "demo.yaml"), "--data-dir", str(folder),
                   *tiny_overrides(folder, tmp_path / "run", **{"train.epochs": 1})]),  # no scikit-learn needed
        ("train", [f"data.data_dir={tmp_path / 'digits'}", f"train.output_dir={tmp_path / 'demo'}"]),  # the demo
        ("train_detection", ["--output-dir", str(tmp_path / "det")]),
        ("export_onnx", ["--model", PICO, "--checkpoint", str(initial_weights(PICO)), "--output",
                         str(tmp_path / "m.onnx")]),  # refused before the weights are read or traced
    ]  # fmt: skip
    code = f"SCRIPTS = {str(SCRIPTS)!r}\n" + HARNESS
    result = subprocess.run(
        [sys.executable, "-c", code, "sklearn,pycocotools,onnx", json.dumps(runs)],
        capture_output=True, text=True, env=script_env(), timeout=300,
    )  # fmt: skip
    exits = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("[")]
    assert exits == [["train", 0], ["train", 2], ["train_detection", 2], ["export_onnx", 2]], result.stderr
    parts = result.stderr.split("== ")[1:]
    assert (tmp_path / "run" / "best.safetensors").is_file() and "Traceback" not in parts[0], parts[0]
    for part, (package, extra) in zip(parts[1:], [("sklearn", "train"), ("pycocotools", "detection"),
                                                  ("onnx", "export")], strict=True):  # fmt: skip
        errors = [line for line in part.splitlines() if line.startswith("error: ")]
        assert "Traceback" not in part and len(errors) == 1, part
        assert f'optional package {package!r}: pip install -e ".[{extra}]"' in errors[0], part
    assert "(or pip install scikit-learn)" in parts[1]  # pip's name, not the import name
