"""A process of a launch started by hand (no torchrun to end the others) that ends on an error before the startup
handshake (its command line mistyped, a user error of the script): the runner tells the others through the launch's
store, so that they end at once naming it; before, they waited train.dist_timeout (1800 s) for it."""

from __future__ import annotations

import argparse
import json

import pytest
import torch.distributed as dist
from scriptkit import run_script

from swinlite import script
from swinlite.engine import handshake

SETTINGS = {"train.epochs": 1}


class CountingStore:
    """The launch's store, counting the reports this process posts."""

    def __init__(self) -> None:
        self.store, self.sets = dist.HashStore(), 0
        self.store.set(f"{handshake._prefix()}/0", json.dumps({"problem": None, "settings": SETTINGS}))  # rank 0's

    def set(self, key: str, value: str) -> None:
        self.sets += 1
        self.store.set(key, value)

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    def problem(self) -> str | None:
        """What rank 1 posted (None: nothing); a get would wait for it."""
        key = f"{handshake._prefix()}/1"
        return json.loads(self.store.get(key))["problem"] if self.store.check([key]) else None


@pytest.fixture
def store(monkeypatch) -> CountingStore:
    """Rank 1 of 2 started by hand, rank 0 waiting in its handshake."""
    launch = CountingStore()
    monkeypatch.setattr(handshake, "launch_store", lambda info, timeout: launch)
    monkeypatch.setattr(handshake, "_posted", None, raising=False)  # no report posted by this process yet
    for name, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    return launch


def argparse_refuses(argv: list[str] | None) -> None:
    argparse.ArgumentParser().parse_args(["--data-dri", "X"])


def value_error(argv: list[str] | None) -> None:
    raise ValueError("data.data_dir X does not exist")


@pytest.mark.parametrize(
    ("main", "told"),
    [
        (argparse_refuses, "it exited with code 2 before its startup checks (its own output says why)"),
        (value_error, "data.data_dir X does not exist"),
    ],
)
def test_an_error_before_the_handshake_is_told_to_the_others(main, told: str, store: CountingStore, capsys):
    with pytest.raises(SystemExit) as exit:
        script.run(main, [])
    assert exit.value.code == 2
    assert store.problem() == told
    assert store.sets == 1


def test_a_mistyped_option_of_a_training_script_is_told_with_its_message(store: CountingStore, capsys):
    assert run_script("train", ["--data-dri", "X"]) == 2
    said = capsys.readouterr().err
    assert said.startswith("error: unrecognized arguments: --data-dri"), said
    assert store.problem() == said.removeprefix("error: ").strip()


def test_an_error_the_handshake_told_is_not_posted_again(store: CountingStore, capsys):
    def refused_in_handshake(argv: list[str] | None) -> None:
        handshake.refuse_with_peers(handshake.launched(), ValueError("no images in X"), 5.0)

    with pytest.raises(SystemExit):
        script.run(refused_in_handshake, [])
    assert store.problem() == "no images in X"
    assert store.sets == 1


def test_one_process_alone_posts_nothing(store: CountingStore, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(SystemExit):
        script.run(value_error, [])
    assert store.problem() is None
