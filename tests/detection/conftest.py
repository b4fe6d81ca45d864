"""Fixtures for the detection tests."""

from pathlib import Path

import pytest
import torch
from detkit import make_quirky_coco, tiny_overrides
from scriptkit import run_script
from single_thread import one_thread  # noqa: F401 (an autouse fixture)


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
            assert run_script("train_detection", argv) == 0
    finally:
        torch.set_num_threads(threads)
    return coco, root / "run"
