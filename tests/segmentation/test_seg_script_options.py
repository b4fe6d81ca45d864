"""segment.py's and evaluate_segmentation.py's test options, refused as they are parsed: --ratios that are not
positive finite scales, --stride with --mode whole."""

import pytest
from scriptkit import run_script

ARGV = {
    "segment": ["--checkpoint", "best.safetensors", "--input", "images", "--output-dir", "out"],
    "evaluate_segmentation": ["--checkpoint", "best.safetensors", "--data-dir", "data"],
}


@pytest.mark.parametrize("script", list(ARGV))
@pytest.mark.parametrize("ratios", [["inf"], ["1", "nan"], ["0"], ["-0.5"]])
def test_ratios_must_be_positive_finite_scales(script: str, ratios: list[str], capsys):
    """inf was an OverflowError traceback, nan "error: cannot convert float NaN to integer" (as --alpha nan is
    refused: one line naming the option)."""
    assert run_script(script, [*ARGV[script], "--ratios", *ratios]) == 2
    shown = " ".join(str(float(r)) for r in ratios)
    assert capsys.readouterr().err.startswith(f"error: --ratios must be positive finite scales of the test size, got "
                                              f"{shown} (see ")  # fmt: skip


@pytest.mark.parametrize("script", list(ARGV))
def test_stride_with_mode_whole_is_refused(script: str, capsys):
    """--mode whole --stride 8 8 ignored the stride without a word (it is slide mode's window step)."""
    assert run_script(script, [*ARGV[script], "--mode", "whole", "--stride", "8", "8"]) == 2
    assert capsys.readouterr().err.startswith("error: --stride is the windows' step of --mode slide, and --mode whole")
