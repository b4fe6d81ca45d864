"""Fixtures for the segmentation tests."""

import contextlib
import io
from pathlib import Path

import pytest
from scriptkit import load_script
from segkit import make_seg_folder, tiny_overrides
from single_thread import one_thread, one_thread_only  # noqa: F401 (one_thread: an autouse fixture)


@pytest.fixture
def seg_folder(tmp_path: Path) -> Path:
    return make_seg_folder(tmp_path / "seg")


SETTINGS = {"train.epochs": 2, "train.ema_decay": 0.5, "train.best_of": "raw"}


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """(data root, run folder) of two epochs (with an EMA of the weights) trained through
    scripts/train_segmentation.py, once per session (its output in the run folder's sibling stdout.txt); tests copy
    what they change."""
    root = tmp_path_factory.mktemp("seg")
    data = make_seg_folder(root / "data")
    (root / "defaults.yaml").write_text("{}\n")
    argv = ["--config", str(root / "defaults.yaml"), *tiny_overrides(data, root / "run", **SETTINGS)]
    log = io.StringIO()
    with one_thread_only(), contextlib.redirect_stdout(log):
        assert load_script("train_segmentation").main(argv) == 0
    (root / "stdout.txt").write_text(log.getvalue())
    return data, root / "run"
