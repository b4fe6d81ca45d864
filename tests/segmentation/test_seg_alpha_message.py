"""segment.py's and evaluate_segmentation.py's range checks: each refusal names the option at fault alone."""

import pytest
from scriptkit import run_script

ARGV = {
    "segment": ["--checkpoint", "best.safetensors", "--input", "images", "--output-dir", "out"],
    "evaluate_segmentation": ["--checkpoint", "best.safetensors", "--data-dir", "data"],
}


@pytest.mark.parametrize(
    ("script", "options", "message"),
    [
        ("segment", ["--alpha", "2"], "error: --alpha must be in 0..1, got 2.0"),
        ("segment", ["--alpha", "nan"], "error: --alpha must be in 0..1, got nan"),
        ("segment", ["--mode", "slide", "--stride", "0", "8"], "error: --stride must be positive, got 0 8"),
        ("evaluate_segmentation", ["--num-workers", "-1"], "error: --num-workers must be at least 0, got -1"),
        ("evaluate_segmentation", ["--mode", "slide", "--stride", "8", "-2"],
         "error: --stride must be positive, got 8 -2"),
    ],
)  # fmt: skip
def test_a_refusal_names_only_the_option_at_fault(script: str, options: list[str], message: str, capsys):
    """--alpha 2 said "--alpha must be in 0..1, --stride positive" though no --stride was given."""
    assert run_script(script, [*ARGV[script], *options]) == 2
    assert capsys.readouterr().err.startswith(f"{message} (see ")
