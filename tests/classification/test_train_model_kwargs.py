"""model.kwargs a classifier cannot train with are refused with the config, before anything is read or written."""

from pathlib import Path

from scriptkit import run_script
from trainkit import tiny_overrides


def test_features_only_is_refused_before_the_data_is_scanned(folder: Path, tmp_path: Path, capsys):
    """model.kwargs.features_only=true passed every check, scanned the data, then the first step failed with
    "AttributeError: 'list' object has no attribute 'float'", leaving config.yaml and scan.json.gz behind."""
    out = tmp_path / "out"
    argv = [*tiny_overrides(folder, out), "model.kwargs.features_only=true"]
    assert run_script("train", argv) == 2
    assert capsys.readouterr().err == (
        "error: model.kwargs has features_only=true: a classifier trains on the model's logits, and features_only "
        "gives its feature maps (for feature extraction: scripts/extract_features.py); drop it\n"
    )
    assert not out.exists()
    assert run_script("train", [*argv, "--print-config"]) == 2  # refused with the config itself
