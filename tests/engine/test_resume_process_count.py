"""--resume with another number of processes than the run was saved with: its lr schedule is recounted for the new
global batch, as it should be, and said so; before, every such resume warned of changed settings or an old swinlite.
And where torch sees another number of GPUs: each process's CUDA generator comes back on its own device."""

from pathlib import Path

import numpy as np
import pytest
import torch
from enginekit import TASKS, tiny_config

from swinlite.engine import run
from swinlite.engine.checkpoint import load_resume, resume_rng, rng_state, save_resume

OLD_WORDING = "warning: the lr schedule differs from the saved one (changed settings, or"


@pytest.mark.parametrize("processes", [2, 1])
def test_a_schedule_recounted_for_another_number_of_processes_says_so(processes, folder: Path, tmp_path: Path, capsys):
    out = tmp_path / "run"
    run(TASKS["classification"], tiny_config("classification", folder, out, **{"train.epochs": 1}))
    saved = load_resume(out / "resume.pt")
    scheduler = saved["scheduler"] | {"t_initial": saved["scheduler"]["t_initial"] + 1}  # a schedule counted otherwise
    copies = {"rng": saved["rng"] * processes, "partial": saved["partial"] * processes}  # saved by these processes
    save_resume(out / "resume.pt", saved | copies | {"scheduler": scheduler})
    capsys.readouterr()
    run(TASKS["classification"], tiny_config("classification", folder, out, **{"train.epochs": 1}), resume=True)
    log = capsys.readouterr().out
    recounted = "note: the lr schedule was recounted for 1 process (saved with 2 processes): its steps per epoch"
    assert (recounted in log, OLD_WORDING in log) == (processes == 2, processes == 1), log


class _Gpus:
    """The CUDA generators of a machine where torch sees ``count`` GPUs, as torch.cuda's RNG functions show them (on
    the CPU): device i's state is 16 bytes of i until set or seeded (``seeded``: the seed manual_seed_all gave)."""

    def __init__(self, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
        self.states = [torch.full((16,), i, dtype=torch.uint8) for i in range(count)]
        self.seeded: int | None = None
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: self.states[self.index(device)].clone())
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in self.states])
        monkeypatch.setattr(torch.cuda, "set_rng_state", self.set_state)
        monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: setattr(self, "seeded", seed))

    def index(self, device: torch.device | int) -> int:
        index = device if isinstance(device, int) else device.index
        if index >= len(self.states):
            raise IndexError("tuple index out of range")  # torch.cuda.default_generators[index]
        return index

    def set_state(self, state: torch.Tensor, device: torch.device | int) -> None:
        self.states[self.index(device)] = state.clone()


def test_a_cuda_state_comes_back_on_this_process_device_where_fewer_gpus_are_seen(monkeypatch):
    """resume.pt held every visible GPU's state (8), restored onto as many devices: where torch saw 2, the resume died
    in IndexError. A process keeps its own device's state, which comes back on its device now, whatever its index."""
    _Gpus(8, monkeypatch)  # saved by a process on the 6th GPU of a node of 8
    saved = rng_state(torch.device("cuda", 5))
    assert torch.equal(saved["cuda"], torch.full((16,), 5, dtype=torch.uint8))
    here = _Gpus(2, monkeypatch)
    resume_rng([saved, saved], 1, seed=0, step=4, device=torch.device("cuda", 1))
    assert torch.equal(here.states[1], saved["cuda"]) and here.states[0][0] == 0 and here.seeded is None


@pytest.mark.parametrize("index", [1, 3])
def test_an_older_file_of_every_gpu_state_gives_this_device_its_row_or_a_seed(index: int, monkeypatch):
    """A file of an older swinlite ([8, 16]: every visible GPU's state) restores the row of this process's device; a
    device past its rows is seeded as a rank the saved run lacked is (the same file resumed again: the same seed)."""
    every = torch.stack([torch.full((16,), 10 + i, dtype=torch.uint8) for i in range(2)])  # saved where 2 were seen
    saved = rng_state(torch.device("cpu")) | {"cuda": every}
    here = _Gpus(4, monkeypatch)
    resume_rng([saved], 0, seed=7, step=3, device=torch.device("cuda", index))
    if index == 1:
        assert torch.equal(here.states[1], saved["cuda"][1]) and here.seeded is None
    else:
        assert here.seeded == int(np.random.SeedSequence(7, spawn_key=(0, 3)).generate_state(1)[0])
        assert all(state[0] == i for i, state in enumerate(here.states))
    assert torch.equal(torch.get_rng_state(), saved["torch"])  # the CPU's restored all the same


def test_a_cpu_run_on_a_gpu_machine_keeps_no_cuda_state(monkeypatch):
    """train.device=cpu where CUDA exists saved every GPU's state, making a CUDA context (on a busy or
    exclusive-process GPU, an error) for a run that computes on none; resumed, it set them back."""
    _Gpus(2, monkeypatch)
    for name in ("get_rng_state", "get_rng_state_all", "set_rng_state", "manual_seed_all"):
        monkeypatch.setattr(torch.cuda, name, lambda *args, name=name: pytest.fail(f"torch.cuda.{name} called"))
    cpu = torch.device("cpu")
    saved = rng_state(cpu)
    assert "cuda" not in saved
    resume_rng([saved | {"cuda": torch.zeros(2, 16, dtype=torch.uint8)}], 0, seed=0, step=1, device=cpu)
