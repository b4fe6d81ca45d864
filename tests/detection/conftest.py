"""Fixtures for the detection tests."""

import sys
from pathlib import Path

import pytest
import torch
from detkit import REPO, load_script, make_quirky_coco, tiny_overrides
from single_thread import one_thread  # noqa: F401 (an autouse fixture)

sys.path.insert(0, str(REPO / "scripts"))  # the scripts import their shared _cli.py as `python scripts/x.py` would


@pytest.fixture
def coco(tmp_path: Path) -> Path:
    return make_quirky_coco(tmp_path / "coco")


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """(data root, run folder) of one Mask R-CNN epoch trained through scripts/train_detection.py (once per session;
    tests copy what they change)."""
    root = tmp_path_factory.mktemp("det")
    coco = make_quirky_coco(root / "coco")
    (root / "defaults.yaml").write_text("{}\n")
    argv = ["--config", str(root / "defaults.yaml"), "--data-dir", str(coco), "--output-dir", str(root / "run")]
    argv += tiny_overrides(coco, root / "run", **{"model.detector": "maskrcnn"})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the autouse one_thread fixture, which a session fixture runs before
    try:
        with pytest.warns(UserWarning):  # the file's quirks; test_data checks those
            assert load_script("train_detection").main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    return coco, root / "run"
