"""Fixtures for the detection tests."""

from pathlib import Path

import pytest
import torch
from detkit import make_quirky_coco


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread, as the scripts these tests start: tiny models gain nothing from more, a shared CPU loses
    a lot, and in-process and subprocess runs stay bitwise comparable."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(False)  # runs with train.deterministic=true switch it on


@pytest.fixture
def coco(tmp_path: Path) -> Path:
    return make_quirky_coco(tmp_path / "coco")
