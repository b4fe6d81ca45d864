"""evaluate.py checked its output folder before its flags against the checkpoint: --img-size contradicting a
self-describing checkpoint, into a folder holding an earlier evaluation, first asked for --overwrite, and with it
failed on --img-size. The flags, the checkpoint and the data are checked first; nothing is removed before."""

from pathlib import Path

import pytest
from scriptkit import run_script
from trainkit import make_folder, tiny_config, train


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """(data root, run folder) of one tiny epoch at 16 px."""
    root = tmp_path_factory.mktemp("flags_first")
    data = make_folder(root / "data", per_class=4)
    return data, train(tiny_config(data, root / "run", **{"train.epochs": 1, "data.batch_size": 4}))


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["", "overwrite"])
def test_a_contradicting_img_size_is_named_before_the_output_folder(run, tmp_path, capsys, overwrite):
    data, folder = run
    out = tmp_path / "out"
    out.mkdir()
    (out / "eval.json").write_text("{}\n")
    (out / "confusion_matrix.png").write_bytes(b"an earlier evaluation's")
    argv = ["--checkpoint", folder / "best.safetensors", "--data-dir", data, "--img-size", "32", "--num-workers", "0"]
    assert run_script("evaluate", [*argv, "--output-dir", out, *overwrite]) == 2
    error = capsys.readouterr().err
    assert "--img-size 32 contradicts" in error and "--output-dir" not in error
    assert (out / "confusion_matrix.png").read_bytes() == b"an earlier evaluation's"
