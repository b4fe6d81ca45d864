"""Warnings under torchrun, with a fake rank: the ones every process meets alike shown once (rank 0's), the ones a
process meets alone shown by it, named by its rank; a single process as before."""

import logging
import warnings

import pytest

from swinlite.engine import rank_warnings
from swinlite.engine.distributed import DistInfo, SharedError
from swinlite.engine.rank_warnings import SharedWarnings, rank_prefixed

RANK_1 = DistInfo(rank=1, world_size=2)


def _warn_and_log(text: str) -> None:
    warnings.warn(text, stacklevel=1)
    logging.lastResort.handle(logging.makeLogRecord({"msg": f"logged {text}", "levelno": logging.WARNING}))


def test_another_rank_shows_only_what_rank_0_did_not_have(capsys, monkeypatch, recwarn):
    """Every process printed the same warnings (a warm-up cut short, timm's logged notes): twice with 2 processes."""
    shared = SharedWarnings(RANK_1)
    with shared:
        _warn_and_log("same on every rank")
        warnings.warn("only rank 1's data lacks a file", stacklevel=1)
    assert len(recwarn) == 0 and capsys.readouterr() == ("", "")  # kept back until settle
    rank_0 = [("UserWarning", "same on every rank"), ("logged", "logged same on every rank")]
    monkeypatch.setattr(rank_warnings, "broadcast_object", lambda obj, info: rank_0)
    shared.settle()
    assert capsys.readouterr().err == "rank 1: warning: only rank 1's data lacks a file\n"


def test_rank_0_shows_its_warnings_as_they_come(capsys):
    with pytest.warns(UserWarning, match="a warm-up cut short"), SharedWarnings(DistInfo(0, 2)) as shared:
        _warn_and_log("a warm-up cut short")
    assert capsys.readouterr().err == "logged a warm-up cut short\n"
    assert shared.kept == [("UserWarning", "a warm-up cut short"), ("logged", "logged a warm-up cut short")]


def test_another_rank_that_fails_shows_what_it_kept_back(capsys):
    with pytest.raises(ValueError, match="no such file"), SharedWarnings(RANK_1):
        warnings.warn("3 images skipped", stacklevel=1)
        raise ValueError("no such file")
    assert capsys.readouterr().err == "rank 1: warning: 3 images skipped\n"


def test_another_rank_that_stops_on_a_problem_another_says_keeps_quiet(capsys):
    """A problem every process met alike (a SharedError: rank 0, or the machine's first process, says it and shows the
    warnings of the same work before it): the others showed what they kept back, then exited quietly."""
    with pytest.raises(SharedError, match="no such file"), SharedWarnings(RANK_1):
        warnings.warn("3 images skipped", stacklevel=1)
        raise SharedError("no such file")
    assert capsys.readouterr().err == ""


def test_warnings_while_training_name_the_rank_that_is_not_rank_0():
    line = warnings.formatwarning("image 7 skipped", UserWarning, "x.py", 1)
    with rank_prefixed(RANK_1):
        assert warnings.formatwarning("image 7 skipped", UserWarning, "x.py", 1) == f"rank 1: {line}"
    with rank_prefixed(DistInfo(0, 2)):
        assert warnings.formatwarning("image 7 skipped", UserWarning, "x.py", 1) == line
