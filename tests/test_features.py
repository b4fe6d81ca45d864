"""Feature files: round trip, whole-file detection, embeddings, bad input."""

import errno

import pytest
import torch

from swinlite.features import (
    ImageFeatures,
    is_complete_feature_file,
    load_embeddings,
    load_features,
    save_embeddings,
    save_features,
)


def _features(dtype: torch.dtype = torch.float32) -> ImageFeatures:
    maps = {f"stage{i}": torch.randn(8 * 2**i, 12 // 2**i, 10 // 2**i).to(dtype) for i in range(3)}
    return ImageFeatures(maps, torch.randn(32), "/data/a.jpg", (300, 250), (48, 40), (4, 8, 16), "swinlite_pico")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_round_trip(tmp_path, dtype):
    written = _features(dtype)
    path = tmp_path / "sub" / "a.jpg.safetensors"
    save_features(path, written)
    read = load_features(path)
    assert list(read.maps) == ["stage0", "stage1", "stage2"]
    for name, m in written.maps.items():
        assert read.maps[name].dtype == dtype
        torch.testing.assert_close(read.maps[name], m, rtol=0, atol=0)
    torch.testing.assert_close(read.pooled, written.pooled, rtol=0, atol=0)
    assert (read.source, read.original_size, read.input_size, read.strides, read.model) == (
        "/data/a.jpg",
        (300, 250),
        (48, 40),
        (4, 8, 16),
        "swinlite_pico",
    )
    assert [p.name for p in path.parent.iterdir()] == ["a.jpg.safetensors"]  # no temporary file left


def test_truncated_or_foreign_files_are_not_whole(tmp_path):
    path = tmp_path / "a.safetensors"
    save_features(path, _features())
    assert is_complete_feature_file(path)
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    assert not is_complete_feature_file(path)
    path.write_bytes(b"not a safetensors file")
    assert not is_complete_feature_file(path)
    assert not is_complete_feature_file(tmp_path / "missing.safetensors")
    with pytest.raises(ValueError, match="not a complete swinlite feature file"):
        load_features(path)
    save_embeddings(tmp_path / "e.safetensors", torch.zeros(1, 4), ["x"])  # valid safetensors, not features
    assert not is_complete_feature_file(tmp_path / "e.safetensors")
    with pytest.raises(ValueError, match="missing.safetensors' is not a file: give one of extract_features.py's OUT/"):
        load_features(tmp_path / "missing.safetensors")  # said "not a complete swinlite feature file"


@pytest.mark.parametrize("given", ["folder", "features file", "truncated"])
def test_what_is_not_an_embeddings_file_is_named(tmp_path, given):
    """The output folder (the docs said "path") gave safetensors' "No such device (os error 19)", a feature file
    "File does not contain tensor embeddings"."""
    path = {"folder": tmp_path, "features file": tmp_path / "a.safetensors", "truncated": tmp_path / "e.safetensors"}
    save_features(tmp_path / "a.safetensors", _features())
    save_embeddings(tmp_path / "e.safetensors", torch.zeros(2, 4), ["x", "y"])
    (tmp_path / "e.safetensors").write_bytes((tmp_path / "e.safetensors").read_bytes()[:-4])
    with pytest.raises(ValueError, match="is not a complete swinlite embeddings file: give extract_features.py's OUT/"):
        load_embeddings(path[given])


def test_embeddings_round_trip_and_mismatch(tmp_path):
    vectors, paths = torch.randn(3, 16), ["c.png", "a.png", "b.png"]
    save_embeddings(tmp_path / "embeddings.safetensors", vectors, paths)
    got, got_paths = load_embeddings(tmp_path / "embeddings.safetensors")
    torch.testing.assert_close(got, vectors, rtol=0, atol=0)
    assert got_paths == paths
    with pytest.raises(ValueError, match="3 embeddings but 2 paths"):
        save_embeddings(tmp_path / "x.safetensors", vectors, paths[:2])


def test_a_failing_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "a.safetensors"
    save_features(path, _features())
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")  # as a full disk raises it: no file named

    monkeypatch.setattr("swinlite.io.os.fsync", crash)
    with pytest.raises(OSError, match=f"No space left on device: '{path}'"):  # the error line names the file
        save_features(path, _features())
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.safetensors"]
