"""evaluate.py, predict.py and extract_features.py refused an option out of its range in one message naming three
("--batch-size and --img-size must be at least 1, --num-workers at least 0" for --num-workers -1): each now names the
option at fault and the value given."""

import pytest
from scriptkit import load_script


@pytest.mark.parametrize(
    ("script", "given", "said"),
    [
        ("evaluate", ["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        ("evaluate", ["--img-size", "0"], "--img-size must be at least 1, got 0"),
        ("evaluate", ["--num-workers", "-1"], "--num-workers must be at least 0, got -1"),
        ("predict", ["--topk", "0"], "--topk must be at least 1, got 0"),
        ("predict", ["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        ("predict", ["--num-workers", "-1"], "--num-workers must be at least 0, got -1"),
        ("extract_features", ["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        ("extract_features", ["--size", "32", "0"], "--size must be positive, got 32 0"),
        ("extract_features", ["--workers", "-1"], "--num-workers must be at least 0, got -1"),  # its first name
    ],
)
def test_an_option_out_of_range_is_named_alone(script, given, said, capsys):
    required = {
        "evaluate": ["--checkpoint", "w.safetensors", "--data-dir", "d"],
        "predict": ["--model", "m", "--output", "o.csv", "x.png"],
        "extract_features": ["--model", "m", "--input", "x.png", "--output", "o"],
    }
    with pytest.raises(SystemExit):
        load_script(script).parse_args([*required[script], *given])
    assert f"error: {said} (see " in capsys.readouterr().err
