"""The autouse fixture the training and detection tests share (imported by their conftest.py files)."""

import contextlib
from collections.abc import Iterator

import pytest
import torch


@contextlib.contextmanager
def one_thread_only() -> Iterator[None]:
    """The autouse ``one_thread`` fixture, for the module and session fixtures, which run before it: one intra-op
    thread, the earlier count restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread, as the scripts these tests start (OMP_NUM_THREADS=1): tiny models gain nothing
    from more, a shared CPU loses a lot, and in-process and subprocess runs stay bitwise comparable."""
    with one_thread_only():
        yield
