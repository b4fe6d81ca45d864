"""swinlite.extract.read_sources: a list of image paths names each image as a folder input does."""

import os
from pathlib import Path

import pytest

from swinlite.extract import output_path, read_sources


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
