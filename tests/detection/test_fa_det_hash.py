"""extract_features.py on a detection run's weights hashes the file, then its backbone reads it again by its path:
a file replaced in between (as a training run replaces its best.safetensors) is refused, rather than settings.json
recording the hash of weights the features are not of."""

import os
import shutil
from pathlib import Path

from scriptkit import run_script

import swinlite.features_of_runs
import swinlite.io


def test_weights_replaced_after_hashing_refused(trained, tmp_path: Path, monkeypatch, capsys):
    coco, run = trained
    weights, newer = tmp_path / "best.safetensors", tmp_path / "newer.safetensors"
    shutil.copy(run / "best.safetensors", weights)
    shutil.copy(run / "last.safetensors", newer)
    hash_file = swinlite.io.file_sha256

    def hash_then_replace(path: str | os.PathLike) -> str:
        digest = hash_file(path)
        if newer.exists():  # a training run saving its new best, once
            os.replace(newer, weights)
        return digest

    monkeypatch.setattr(swinlite.io, "file_sha256", hash_then_replace)
    monkeypatch.setattr(swinlite.features_of_runs, "file_sha256", hash_then_replace, raising=False)
    image = coco / "val2017" / "01.png"
    argv = ["--checkpoint", weights, "--input", image, "--output", tmp_path / "f", "--no-progress"]
    assert run_script("extract_features", argv) != 0
    assert f"{weights} changed while it was read" in capsys.readouterr().err
    assert not (tmp_path / "f" / "settings.json").exists()
