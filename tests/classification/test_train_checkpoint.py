import random
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from forkkit import forked, killed
from safetensors.torch import save

import swinlite.files
import swinlite.io
from swinlite.engine.checkpoint import load_resume, rng_state, save_resume, save_weights, seed_rng, set_rng_state
from swinlite.io import atomic_write, read_metadata, read_state_dict


def test_weights_round_trip_with_metadata(tmp_path: Path):
    state = {"a.weight": torch.randn(3, 4), "b": torch.arange(5)}
    save_weights(tmp_path / "w.safetensors", state, {"model": "m", "classes": ["x", "y"], "epoch": 3})
    loaded = read_state_dict(tmp_path / "w.safetensors")
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    assert read_metadata(tmp_path / "w.safetensors") == {"model": "m", "classes": ["x", "y"], "epoch": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]  # no temp file left


def test_rng_states_round_trip_through_weights_only_file(tmp_path: Path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    random.gauss(0, 1), np.random.normal()  # leave cached gaussians in the states
    save_resume(tmp_path / "r.pt", {"rng": [rng_state(torch.device("cpu"))], "epoch": 4})
    expected = (random.random(), random.gauss(0, 1), np.random.normal(), np.random.rand(), torch.rand(3))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    saved = load_resume(tmp_path / "r.pt")  # weights_only=True
    set_rng_state(saved["rng"][0], torch.device("cpu"))
    got = (random.random(), random.gauss(0, 1), np.random.normal(), np.random.rand(), torch.rand(3))
    assert got[:4] == expected[:4] and torch.equal(got[4], expected[4]) and saved["epoch"] == 4


def test_every_allowed_seed_seeds_every_rank():
    """A run seeds each process with train.seed + its rank: NumPy refused train.seed=4294967295 (allowed: < 2**32)
    plus rank 1. Every rank is seeded now, each apart from the others; a seed below 2**32 seeds NumPy as before."""

    def draws(seed: int) -> tuple[float, float, float]:
        seed_rng(seed)
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    top = 2**32 - 1
    ranks = [draws(top + rank) for rank in range(3)]
    assert ranks[1] == draws(top + 1) and all(len(set(column)) == 3 for column in zip(*ranks, strict=True))
    assert draws(5)[1] == np.random.RandomState(5).rand()


def test_crash_between_write_and_rename_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "last.safetensors"
    save_weights(path, {"w": torch.zeros(4)}, {})

    def crash(*args):
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(swinlite.io.os, "replace", crash)
    with pytest.raises(ValueError, match=f"cannot write {path}: simulated crash .* last.safetensors is left as it was"):
        save_weights(path, {"w": torch.ones(4)}, {})
    assert torch.equal(read_state_dict(path)["w"], torch.zeros(4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.safetensors"]


def test_sigkill_during_save_never_leaves_a_half_written_file(tmp_path: Path):
    """A process killed while it writes the new "last" file leaves the previous one whole and loadable."""
    path = tmp_path / "last.safetensors"
    save_weights(path, {"w": torch.zeros(1000)}, {"epoch": 1})
    data = save({"w": torch.ones(1000)})

    def slow(f) -> None:
        f.write(data[: len(data) // 2])
        f.flush()
        print("half written", flush=True)
        time.sleep(60)
        f.write(data[len(data) // 2 :])

    # a process of its own (forked: no fresh interpreter importing torch), killed while it writes
    status, output = forked(lambda: swinlite.files.atomic_write(path, slow), kill_after="half written")
    assert killed(status), output
    assert torch.equal(read_state_dict(path)["w"], torch.zeros(1000))
    assert read_metadata(path) == {"epoch": 1}
    leftovers = [p for p in tmp_path.iterdir() if p.name != "last.safetensors"]
    assert leftovers and all(p.name.startswith(".last.safetensors.tmp") for p in leftovers)  # the kill hit mid-write
    atomic_write(path, lambda f: f.write(b"x"))  # a later save still works
    assert path.read_bytes() == b"x"


def test_missing_weights_file_is_value_error(tmp_path: Path):
    with pytest.raises(ValueError, match="does not exist"):
        read_state_dict(tmp_path / "nope.safetensors")
