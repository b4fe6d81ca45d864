"""An offline Hugging Face hub cache for pretrained-weight tests (nothing is downloaded), the session-wide ONNX
classifier, and the grouping of tests for the two pytest-xdist workers (``-n 2`` in pyproject.toml).

``offline_hub`` is a module's own cache folder, with huggingface_hub pointed at it and offline
(``HF_HUB_OFFLINE=1``) for the module: in-process (the constants huggingface_hub reads at import
time are patched too) and for subprocesses (environment variables). ``no_network`` is the same cache
with ``HF_HUB_OFFLINE`` unset and the hub endpoint unreachable, for one test.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import huggingface_hub.constants
import pytest
import timm
import torch
from safetensors.torch import save_file
from weightkit import random_state_dict

_COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubCache:
    """A folder in the Hugging Face hub cache layout: ``models--<org>--<name>/snapshots/<commit>/<file>``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, repo_id: str, state_dict: Mapping[str, torch.Tensor], filename: str = "model.safetensors") -> Path:
        """Store ``state_dict`` as ``filename`` of hub repo ``repo_id`` (e.g. ``timm/swin_tiny_...ms_in1k``)."""
        folder = self.root / f"models--{repo_id.replace('/', '--')}"
        snapshot = folder / "snapshots" / _COMMIT
        snapshot.mkdir(parents=True, exist_ok=True)
        path = snapshot / filename
        if filename.endswith(".safetensors"):
            save_file({k: v.contiguous() for k, v in state_dict.items()}, path)
        else:
            torch.save(dict(state_dict), path)
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(_COMMIT)
        return path

    def add_timm(self, model_name: str, seed: int = 0, **kwargs: Any) -> dict[str, torch.Tensor]:
        """Cache random weights of timm's ``model_name`` (``arch.tag``) under its hub id; returns them."""
        state_dict = random_state_dict(model_name, seed, **kwargs)
        self.add(timm.models.get_pretrained_cfg(model_name).hf_hub_id, state_dict)
        return state_dict


@pytest.fixture(scope="module")
def offline_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubCache]:
    """A module's own hub cache, offline, for the whole module (so that cached files and models can be shared)."""
    cache = HubCache(tmp_path_factory.mktemp("hf_hub_cache"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_HUB_CACHE", str(cache.root))
        mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        mp.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache.root))
        yield cache


@pytest.fixture
def no_network(offline_hub: HubCache, monkeypatch: pytest.MonkeyPatch) -> HubCache:
    """The module's hub cache, HF_HUB_OFFLINE unset, the endpoint unreachable (a closed port: refused at once)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    return offline_hub


@pytest.fixture
def stub_inputs() -> Callable[[Any, Any], None]:
    """``stub_inputs(task, cfg)`` creates the files and folders the run reads (``task.inputs(cfg)``), empty: the
    preflight finds them (its existence checks pass) and reading them fails."""

    def stub(task: Any, cfg: Any) -> None:
        for path in task.inputs(cfg):
            if path.suffix:  # an annotation file
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            else:
                path.mkdir(parents=True, exist_ok=True)

    return stub


@pytest.fixture(scope="session")
def onnx_classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(checkpoint, ONNX file) of a pico classifier (onnxkit.write_classifier), exported once per session by
    scripts/export_onnx.py for every height and width in 2..512 (its check against eager passing at three sizes);
    the tests that read it never change it."""
    from onnxkit import write_classifier
    from scriptkit import load_script

    folder = tmp_path_factory.mktemp("onnx_classifier")
    checkpoint = write_classifier(folder / "best.safetensors")
    path = folder / "model.onnx"
    argv = ["--checkpoint", str(checkpoint), "--output", str(path), "--max-size", "512"]
    assert load_script("export_onnx").main(argv) <= 1e-4
    return checkpoint, path


def pytest_configure(config: pytest.Config) -> None:
    """One intra-op thread per pytest-xdist worker (and the scripts it starts): two workers share two cores instead
    of four threads spinning on them. Inductor compiles in the worker's own process too: its pool of compile
    processes (one per core by default) imports torch in each, which cost more than it saved (on a cold inductor
    cache, as CI's, the compiling tests took 1.5x the time with it)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        torch._inductor.config.compile_threads = 1


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One ``xdist_group`` per set of test files joined by a session fixture of this suite (``--dist loadgroup``):
    a worker runs a whole file, so no module fixture is built twice, and every file that uses a session fixture
    (a trained model, an exported file) runs on the worker that built it."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    for item in items:
        for name in item.fixturenames:
            for fixture in item._fixtureinfo.name2fixturedefs.get(name, ()):
                if fixture.scope == "session" and fixture.baseid.startswith("tests"):
                    parent[root(f"{fixture.baseid}::{name}")] = root(item.nodeid.split("::")[0])
    groups = {item.nodeid: root(item.nodeid.split("::")[0]) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    # The groups a session fixture joins (a trained run, an exported file, and every file reading it) are the
    # longest: dealt to the workers first, so that the short ones even the workers out at the end instead of one
    # worker running a long group alone. Within a group the order is the files' own.
    files: dict[str, set[str]] = {}  # a group's files: how long it runs, roughly
    for nodeid, group in groups.items():
        files.setdefault(group, set()).add(nodeid.split("::")[0])
    position = {group: i for i, group in enumerate(files)}  # the groups in the order they were collected
    items.sort(key=lambda item: (-len(files[groups[item.nodeid]]), position[groups[item.nodeid]]))
