"""A path a script reads that is not there (or a file where a folder is read, a folder where a file is) is said right
after the arguments are parsed, before torch, timm or swinlite load (it took 6-7 s of imports), in the words the
script's later check uses, and before anything is written (detect.py's and segment.py's output folder)."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest
from scriptkit import load_script

HEAVY = ("torch", "timm", "torchvision", "swinlite")  # swinlite.files loads by _cli.package_module, not by import

# script -> argv ({m}: missing, {f}: a file, {d}: a folder of images, {o}: the output) and the error the script gives
CASES = {
    "predict-image": ("predict", "--checkpoint {f} --output {o}.csv {d} {m}",
                      "'{m}' does not exist (expected an image file or a folder of images)"),
    "predict-checkpoint": ("predict", "--checkpoint {m} --output {o}.csv {d}", "checkpoint '{m}' does not exist"),
    "extract_features-input": ("extract_features", "--checkpoint {f} --input {m} --output {o}",
                               "input must be an image folder, an image file or a text file of image paths, got '{m}'"),
    "extract_features-checkpoint": ("extract_features", "--checkpoint {d} --input {d} --output {o}",
                                    "checkpoint '{d}' is not a file"),
    "detect-input": ("detect", "--checkpoint {f} --input {m} --output-dir {o}",
                     "'{m}' does not exist (expected an image file or a folder of images)"),
    "detect-checkpoint": ("detect", "--checkpoint {m} --input {d} --output-dir {o}",
                          "--checkpoint '{m}' does not exist"),
    "segment-checkpoint": ("segment", "--checkpoint {d} --input {d} --output-dir {o}",
                           "--checkpoint '{d}' is not a file"),
    "evaluate-data": ("evaluate", "--checkpoint {f} --data-dir {m}",
                      "--data-dir {m} does not exist; expected a folder holding val/<class>/*"),
    "evaluate-data-file": ("evaluate", "--checkpoint {f} --data-dir {f} --split test",
                           "--data-dir {f} is a file; expected a folder holding test/<class>/*"),
    "evaluate-checkpoint": ("evaluate", "--checkpoint {m} --data-dir {d}", "checkpoint '{m}' does not exist"),
    "evaluate_detection": ("evaluate_detection", "--checkpoint {m} --ann {f} --images {d}",
                           "checkpoint '{m}' does not exist"),
    "evaluate_segmentation": ("evaluate_segmentation", "--checkpoint {d} --images {d} --masks {d}",
                              "checkpoint '{d}' is not a file"),
    "export_onnx": ("export_onnx", "--checkpoint {m} --output {o}", "checkpoint '{m}' does not exist"),
    "convert_checkpoint": ("convert_checkpoint", "{m} {o}.safetensors", "checkpoint '{m}' does not exist"),
    "visualize": ("visualize", "--checkpoint {m} --output {o}", "checkpoint '{m}' does not exist"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_a_missing_input_is_said_before_torch_loads(case: str, tmp_path: Path, monkeypatch, capsys) -> None:
    name, argv, expected = CASES[case]
    paths = {"m": tmp_path / "none", "f": tmp_path / "file.bin", "d": tmp_path / "folder", "o": tmp_path / "out"}
    paths["f"].write_bytes(b"never read")
    paths["d"].mkdir()
    (paths["d"] / "a.png").write_bytes(b"never read")  # a folder of images: the later listing passes it
    script = load_script(name)  # its own imports (_cli: the standard library) are not the run's
    seen, real_import = [], builtins.__import__

    def spy(module: str, *args, **kwargs):
        seen.append(module)
        return real_import(module, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", spy)
    try:
        code = script.run(script.main, argv.format(**paths).split())
    except SystemExit as e:  # the runner's user error
        code = e.code
    monkeypatch.undo()
    assert code == 2
    assert capsys.readouterr().err == f"error: {expected.format(**paths)}\n"
    assert not [m for m in seen if m.split(".")[0] in HEAVY], seen
    assert not paths["o"].exists() and not Path(f"{paths['o']}.safetensors").exists()
