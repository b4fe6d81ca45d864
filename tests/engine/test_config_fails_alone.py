"""A process of a launch started by hand whose config file cannot be read, while the others' can: it tells them
through the launch's store (the startup handshake), so that they end at once naming it. With ``--data-dir`` the
script read the file before the handshake and ended alone; the others waited train.dist_timeout (1800 s)."""

import json
from pathlib import Path

import pytest
import torch.distributed as dist
from scriptkit import run_script

from swinlite.engine import handshake

SETTINGS = {"train.epochs": 1}


@pytest.mark.parametrize("script", ["train", "train_detection", "train_segmentation"])
def test_a_config_that_fails_on_one_process_is_told_to_the_others(script: str, tmp_path: Path, capsys, monkeypatch):
    store = dist.HashStore()
    store.set(f"{handshake._prefix()}/0", json.dumps({"problem": None, "settings": SETTINGS}))  # rank 0 loaded its
    monkeypatch.setattr(handshake, "launch_store", lambda info, timeout: store)
    for name, value in {"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    config = tmp_path / "bad.yaml"
    config.write_text("data: {img_size: [16\n")
    assert run_script(script, ["--config", config, "--data-dir", tmp_path]) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"error: config file {config} is not valid YAML"), said
    posted = f"{handshake._prefix()}/1"
    assert store.check([posted]), "rank 1 did not tell the others"  # a get would wait for it
    assert json.loads(store.get(posted))["problem"] == said.removeprefix("error: ").strip()
