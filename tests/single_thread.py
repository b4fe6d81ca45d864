"""The autouse fixture the training and detection tests share (imported by their conftest.py files)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread, as the scripts these tests start (OMP_NUM_THREADS=1): tiny models gain nothing
    from more, a shared CPU loses a lot, and in-process and subprocess runs stay bitwise comparable."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(False)  # runs with train.deterministic=true switch it on
