"""swinlite.extract: a list of image paths names each image as a folder input does; one run per output folder."""

import os
from pathlib import Path

import numpy as np
import pytest
import timm
from pico import PICO
from PIL import Image

from swinlite.extract import output_path, read_sources, run_extraction
from swinlite.lock import OutputLock


def test_a_listed_link_keeps_its_name_as_a_folder_input_does(tmp_path: Path):
    """A listed link was resolved to its target's name (features/real/b.png...) where the folder input wrote
    features/b_link.png...: one image under two names by how it was given. A link listed beside its target is
    skipped by list_images' rule, and each image is named once however it is spelled."""
    imgs, real = tmp_path / "imgs", tmp_path / "real"
    for path in (imgs / "a.png", imgs / "sub" / "c.png", real / "b.png"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    os.symlink(real / "b.png", imgs / "b_link.png")  # its target listed nowhere else: kept under the link's name
    os.symlink("a.png", imgs / "a_link.png")  # beside its target: skipped
    listing = imgs / "list.txt"
    listing.write_text("a.png\nb_link.png\nsub/c.png\n./a.png\nsub/../sub/c.png\n")
    with pytest.warns(UserWarning, match=f"skipping linked file {imgs / 'a_link.png'} -> .*the same file as "):
        from_folder = read_sources(imgs)
    assert from_folder == ([imgs / "a.png", imgs / "b_link.png", imgs / "sub" / "c.png"], imgs)
    assert read_sources(listing) == from_folder
    out = tmp_path / "out"
    assert output_path(imgs / "b_link.png", imgs, out) == out / "features" / "b_link.png.safetensors"
    listing.write_text("a_link.png\nb_link.png\na.png\n")
    with pytest.warns(UserWarning, match=f"skipping linked file {imgs / 'a_link.png'} -> .*the same file as "):
        assert read_sources(listing) == ([imgs / "b_link.png", imgs / "a.png"], imgs)


def test_a_run_into_a_folder_another_run_holds_is_refused_before_writing(tmp_path: Path):
    """Two extractions into one --output at once, with different checkpoints, both passed the settings check (no
    features yet) and wrote: the folder held features of two models under one settings.json, and a rerun skipped them
    as whole. A lock left by a run that died is taken over, with a note."""
    imgs, out = tmp_path / "imgs", tmp_path / "out"
    imgs.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(imgs / "a.png")
    model = timm.create_model(PICO)
    held = OutputLock(out, "feature extraction", "--output")
    held.acquire()  # as a live run holds it
    try:
        refusal = f"output folder {out} is in use by another feature extraction \\(pid {os.getpid()} on .*--output$"
        with pytest.raises(ValueError, match=refusal):
            run_extraction(model, PICO, imgs, out, (32, 32), progress=False)
        assert [p.name for p in out.iterdir()] == [".lock"]  # nothing written
    finally:
        held.release()
    out.mkdir()
    (out / ".lock").write_text("feature extraction (pid 999999 on elsewhere, started 2020-01-01 00:00:00)")  # its file
    with pytest.warns(
        UserWarning, match="left by a run that ended without releasing it \\(feature extraction \\(pid 9"
    ):
        assert run_extraction(model, PICO, imgs, out, (32, 32), progress=False).written == 1
    assert not (out / ".lock").exists()
