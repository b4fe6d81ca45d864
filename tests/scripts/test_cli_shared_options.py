"""The options several scripts share, each added by one Parser method of scripts/_cli.py: --ema (the run's EMA
weights) and the image inputs (which files of a folder are read); refused or explained before torch loads."""

from itertools import takewhile

import pytest
from scriptkit import run_script

CHECKPOINT_SCRIPTS = (
    "predict", "evaluate", "detect", "evaluate_detection", "segment", "evaluate_segmentation", "export_onnx",
    "extract_features", "visualize",
)  # fmt: skip
# each script's arguments besides the weights: names of nothing (the refusals come before any file is read)
OTHERS = {
    "predict": ["--output", "o.csv", "a.png"],
    "evaluate": ["--data-dir", "data"],
    "detect": ["--input", "a.png", "--output-dir", "out"],
    "evaluate_detection": ["--data-dir", "data"],
    "segment": ["--input", "a.png", "--output-dir", "out"],
    "evaluate_segmentation": ["--data-dir", "data"],
    "export_onnx": ["--output", "m.onnx"],
    "extract_features": ["--input", "a", "--output", "out"],
    "visualize": ["--output", "out"],
}
# (script, weights arguments, the error): the one refusal of predict.py's --ema, in every script that loads a run
ONNX = "--ema does not apply (scripts/export_onnx.py --ema exports"
REFUSALS = [
    *[
        (s, ["--model", "swinlite_tiny_patch4_window7_224"], "--ema selects the EMA weights of a --checkpoint")
        for s in ("predict", "export_onnx", "extract_features", "visualize")
    ],
    *[(s, ["--onnx", "m.onnx"], ONNX) for s in ("predict", "detect", "segment")],
    *[(s, [], "required: --checkpoint") for s in ("evaluate", "evaluate_detection", "evaluate_segmentation")],
]


@pytest.mark.parametrize(("script", "weights", "error"), REFUSALS, ids=[" ".join([s, *w[:1]]) for s, w, _ in REFUSALS])
def test_ema_without_a_checkpoint_is_one_error(script: str, weights: list[str], error: str, capsys):
    """detect.py and segment.py had no --ema (users passed best_ema.safetensors themselves); with --onnx it is
    refused, as predict.py refuses it, naming the way to an ONNX file of the EMA weights."""
    assert run_script(script, [*weights, "--ema", *OTHERS[script]]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and error in lines[0], lines


def _option_help(script: str, invocation: str, capsys) -> str:
    """The help of the argument ``invocation`` (as --help shows it: ``--input INPUT [INPUT ...]``) in ``script``'s
    --help, as one line: its line and those indented under it."""
    assert run_script(script, ["--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {invocation}"))
    block = [
        lines[start].removeprefix(f"  {invocation}"),
        *takewhile(lambda s: s.startswith("   "), lines[start + 1 :]),
    ]
    return " ".join(" ".join(block).split())


def test_every_script_that_loads_a_checkpoint_offers_the_same_ema(capsys):
    helps = {script: _option_help(script, "--ema ", capsys) for script in CHECKPOINT_SCRIPTS}
    assert set(helps.values()) == {"use the run's EMA weights (the file beside --checkpoint)"}, helps


def test_the_image_inputs_say_which_files_of_a_folder_are_read(capsys):
    """segment.py's and detect.py's --help said "(recursive)" alone; predict.py's docstring listed the extensions."""
    from _cli import IMAGE_EXTENSIONS  # on the path: scriptkit puts scripts/ there

    from swinlite.files import IMAGE_EXTENSIONS as READ

    assert IMAGE_EXTENSIONS == READ  # _cli names them for --help without the package
    invocations = {"predict": "PATH ", "detect": "--input INPUT [INPUT ...]", "segment": "--input INPUT [INPUT ...]"}
    helps = {script: _option_help(script, invocation, capsys) for script, invocation in invocations.items()}
    wanted = (
        "images and folders of images; a folder gives its image files (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff "
        ".webp, any case; searched recursively), a file named explicitly is read whatever its extension"
    )
    assert set(helps.values()) == {wanted}, helps
