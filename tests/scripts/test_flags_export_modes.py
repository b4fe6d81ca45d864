"""export_onnx.py options that the chosen export ignored without a word: --out-norm / --no-out-norm without --features
(a classifier, --fpn, a whole detector or segmenter: --no-out-norm on a classifier meant its default), --model and
--num-classes with --fpn (the detection checkpoint's FPN was exported as it records it). Each is one argparse-style
line, exit 2, before any file is read or written; the combinations that mean something still parse."""

import pytest
from pico import PICO
from scriptkit import load_script, run_script

NORMS = "--out-norm/--no-out-norm apply to --features exports (the levels' per-level norms): add --features, or drop"
CASES = {
    "classifier --no-out-norm": (["--checkpoint", "c.safetensors", "--no-out-norm"], f"{NORMS} --no-out-norm"),
    "model --out-norm": (["--model", PICO, "--out-norm"], f"{NORMS} --out-norm"),
    "fpn --no-out-norm": (["--checkpoint", "d.safetensors", "--fpn", "--no-out-norm"], f"{NORMS} --no-out-norm"),
    "fpn --model --num-classes": (
        ["--checkpoint", "d.safetensors", "--fpn", "--model", PICO, "--num-classes", "3"],
        "--model, --num-classes: not for --fpn, whose detection checkpoint records its Swin and has no classifier: "
        "drop them",
    ),
}


@pytest.mark.parametrize(("argv", "error"), CASES.values(), ids=CASES)
def test_a_flag_the_export_ignores_is_one_error(tmp_path, capsys, argv, error):
    assert run_script("export_onnx", [*argv, "--output", tmp_path / "m.onnx"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {error} (see "), lines
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [["--checkpoint", "c.safetensors", "--features", "--no-out-norm"], ["--model", PICO, "--features", "--out-norm"],
     ["--checkpoint", "d.safetensors", "--fpn"], ["--model", PICO, "--num-classes", "3"],
     ["--model", PICO, "--min-size", "3000", "--max-size", "4000"],  # above --max-size's default, given one
     ["--checkpoint", "s.safetensors", "--min-size", "2100"]],  # a segmenter's default may be larger (ADE20K's: 3584)
)  # fmt: skip
def test_the_flags_an_export_takes_still_parse(argv):
    args = load_script("export_onnx").parse_args([*argv, "--output", "m.onnx"])
    assert args.output.name == "m.onnx"
