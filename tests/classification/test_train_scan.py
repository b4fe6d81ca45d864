"""The ImageFolder scan: header-only checks that skip and name broken files, a cache a rerun reuses,
and the class-balance warnings."""

import gzip
import json
import os
import re
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from trainkit import make_folder

from swinlite.classification import data
from swinlite.classification.config import DataConfig
from swinlite.classification.data import ImageFolderDataset, Split, scan_split
from swinlite.classification.scan_cache import CACHE_FILE, cached_scan
from swinlite.classification.task import class_warnings


@pytest.mark.parametrize("processes", [1, 4])
def test_broken_files_skipped_and_named_by_the_scan_or_the_loader(
    folder: Path, processes: int, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(os, "cpu_count", lambda: processes)
    monkeypatch.setattr(data, "POOL_MIN_FILES", 0)  # 4 "cores": the forked pool checks the headers
    empty = folder / "train" / "c0" / "empty.jpg"
    empty.write_bytes(b"")
    garbage = folder / "train" / "c1" / "garbage.png"
    garbage.write_bytes(b"GIF89 certainly not a png")
    good = (folder / "train" / "c2" / "0.png").read_bytes()
    truncated = folder / "train" / "c2" / "truncated.png"  # a good header, the pixel data cut short
    truncated.write_bytes(good[: len(good) // 2])
    with pytest.warns(UserWarning) as record:
        split = scan_split(folder / "train")
    named = {str(w.message).split(":")[0] for w in record}
    assert named == {f"skipping {empty}", f"skipping {garbage}"}
    assert len(split.samples) == 25 and (str(truncated), 2) in split.samples
    dataset = ImageFolderDataset(split.samples)
    with pytest.warns(UserWarning, match=f"{truncated} skipped: unreadable"):
        image, label = dataset[split.samples.index((str(truncated), 2))]
    assert image.size == (16, 16)  # the next image stands in


def test_scan_cached_in_the_output_folder_until_a_class_folder_changes(folder: Path, tmp_path: Path):
    cfg = DataConfig(data_dir=str(folder))
    out = tmp_path / "out"
    (bad := folder / "val" / "c1" / "bad.png").write_bytes(b"nope")
    (link := folder / "val" / "c0" / "t -> u.png").symlink_to(folder / "train" / "c1" / "0.png")  # into train
    with pytest.warns(UserWarning) as record:
        first, from_cache, _ = cached_scan(cfg, out)
    assert not from_cache and (out / CACHE_FILE).is_file()
    said = [str(w.message) for w in record]
    assert [link.message for link in first[1].links] == [m for m in said if m.startswith("skipping linked")]
    assert first[1].links[0].path == str(link) and any(m.startswith(f"skipping {bad}: ") for m in said)
    with pytest.warns(UserWarning) as record:  # still named on a rerun, the link too
        again, from_cache, _ = cached_scan(cfg, out)
    assert from_cache and again == first and [str(w.message) for w in record] == said
    (folder / "train" / "c0" / "0.png").rename(folder / "train" / "c0" / "moved.png")
    os.utime(folder / "train" / "c0", ns=(1, 1))  # the rename's new folder time may equal the old one to the ns
    with pytest.warns(UserWarning):
        third, from_cache, _ = cached_scan(cfg, out)
    assert not from_cache and (str(folder / "train" / "c0" / "moved.png"), 0) in third[0].samples


@pytest.mark.parametrize("change", ["add", "remove", "rename"])
def test_a_file_changed_under_a_folder_time_kept_is_scanned_again(folder: Path, tmp_path: Path, change: str):
    """The cache keyed on folder times alone: a file added, removed or renamed where the folder's time was kept (a
    copy that keeps times, a mount that has none) went unseen: the new image untrained, a removed one read."""
    cfg, out, c1 = DataConfig(data_dir=str(folder)), tmp_path / "out", folder / "train" / "c1"
    cached_scan(cfg, out)
    times = os.stat(c1).st_atime_ns, os.stat(c1).st_mtime_ns
    if change == "add":
        shutil.copy(c1 / "0.png", c1 / "new.png")
    elif change == "remove":
        (c1 / "0.png").unlink()
    else:
        (c1 / "0.png").rename(c1 / "renamed.png")
    os.utime(c1, ns=times)
    (train, _), from_cache, note = cached_scan(cfg, out)
    assert not from_cache and note.startswith("the data folders changed since")
    assert sorted(path for path, _ in train.samples) == sorted(str(p) for p in folder.glob("train/*/*.png"))


def test_a_larger_val_resize_is_scanned_again(folder: Path, tmp_path: Path):
    """The cache keyed on the val resize: a 1x5000 val image kept by a shorter side of 128 (82 M pixels) is too
    elongated at 256 (328 M); no skipped image reads otherwise to tell."""
    Image.fromarray(np.zeros((1, 5000), np.uint8)).save(thin := folder / "val" / "c1" / "thin.png")
    out = tmp_path / "out"
    (_, val), _, _ = cached_scan(DataConfig(data_dir=str(folder), img_size=128, crop_pct=1.0), out)
    assert (str(thin), 1) in val.samples
    with pytest.warns(UserWarning, match=re.escape(f"skipping {thin}: a 1x5000 (HxW) image is too elongated")):
        (_, val), from_cache, note = cached_scan(DataConfig(data_dir=str(folder), img_size=256, crop_pct=1.0), out)
    assert not from_cache and note.startswith("the val resize changed")
    assert [path for path, _ in val.skipped] == [str(thin)]


def test_an_image_repaired_in_place_is_scanned_again(folder: Path, tmp_path: Path):
    """The cache keyed on folder times alone: an image repaired in place (its folder's time unchanged) stayed out,
    still named with its old error, run after run."""
    cfg, out = DataConfig(data_dir=str(folder)), tmp_path / "out"
    (bad := folder / "val" / "c1" / "bad.png").write_bytes(b"nope")
    with pytest.warns(UserWarning, match=f"skipping {bad}"):
        cached_scan(cfg, out)
    times = {p: os.stat(p).st_mtime_ns for p in (folder / "val", folder / "val" / "c1")}
    with open(bad, "r+b") as f:  # in place, as an editor or a re-download writes it
        f.write((folder / "val" / "c1" / "0.png").read_bytes())
    assert {p: os.stat(p).st_mtime_ns for p in times} == times
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (_, val), from_cache, note = cached_scan(cfg, out)
    assert not from_cache and note.startswith(f"{bad}, which the scan skipped, reads otherwise since")
    assert (str(bad), 1) in val.samples and val.skipped == []
    assert cached_scan(cfg, out)[1]  # the new scan is cached


def _unlistable(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """``folder`` refuses to be listed, as one without read permission does (a test run as root reads any folder)."""
    scandir = os.scandir

    def refusing(path: str = ".") -> Iterator[os.DirEntry[str]]:  # what os.walk lists each folder with
        if os.fspath(path) == str(folder):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)


def test_a_folder_that_does_not_list_is_skipped_and_named(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A subfolder without read permission was left out without a word (its images untrained); it is named and
    counted as a file that does not read is, from the cache too, which rescans once it lists. A class folder that does
    not list said it "has no readable images"."""
    sub = folder / "train" / "c1" / "sub"
    sub.mkdir()
    shutil.copy(folder / "train" / "c1" / "0.png", sub / "a.png")
    _unlistable(monkeypatch, sub)
    cfg, out = DataConfig(data_dir=str(folder)), tmp_path / "out"
    reason = f"unreadable (PermissionError: [Errno 13] Permission denied: '{sub}')"
    for cached in (False, True):
        with pytest.warns(UserWarning) as record:
            (train, _), from_cache, _ = cached_scan(cfg, out)
        assert from_cache == cached and train.skipped == [(str(sub), reason)]
        assert [str(w.message) for w in record] == [f"skipping {sub}: {reason}"]
    monkeypatch.undo()
    (train, _), from_cache, note = cached_scan(cfg, out)
    assert not from_cache and note.startswith("the data folders changed") and (str(sub / "a.png"), 1) in train.samples
    _unlistable(monkeypatch, folder / "train" / "c2")
    with pytest.warns(UserWarning, match="c2: unreadable"):  # said before the error
        with pytest.raises(ValueError, match=r"class folder .*c2 is unreadable \(PermissionError: \[Errno 13\]"):
            scan_split(folder / "train")


def test_an_image_in_no_class_folder_is_skipped_and_named(folder: Path, tmp_path: Path):
    """An image file in train/ or val/ itself (no class folder) was left out without a word; a cache of the scan that
    names it is used (it is not rechecked as an image that did not read)."""
    for split in ("train", "val"):
        shutil.copy(folder / split / "c0" / "0.png", folder / split / "loose.png")
    (folder / "train" / "notes.txt").write_text("not an image: no word")
    cfg, out = DataConfig(data_dir=str(folder)), tmp_path / "out"
    said = [
        f"skipping {folder / split / 'loose.png'}: an image in no class folder (expected {split}/<class>/<image files>)"
        for split in ("train", "val")
    ]
    for cached in (False, True):
        with pytest.warns(UserWarning) as record:
            (train, val), from_cache, note = cached_scan(cfg, out)
        assert from_cache == cached, note
        assert [str(w.message) for w in record] == said
        assert [path for path, _ in train.skipped + val.skipped] == [
            str(folder / s / "loose.png") for s in ("train", "val")
        ]


def _cut(folder: Path) -> Path:
    """A training image whose header reads and whose pixel data is cut short (class c2)."""
    good = (folder / "train" / "c2" / "0.png").read_bytes()
    (cut := folder / "train" / "c2" / "cut.png").write_bytes(good[: len(good) // 2])
    return cut


def test_a_cache_of_the_version_before_verify_images_decoded_is_scanned_again(folder: Path, tmp_path: Path):
    """Version 3's data.verify_images=true read headers only (what false does now): its cache kept an image whose
    pixels do not decode, and was reused under true's new meaning, every image decoded."""
    cut, out = _cut(folder), tmp_path / "out"
    cached_scan(DataConfig(data_dir=str(folder)), out)  # headers only: the cut image kept, as version 3's true kept it
    tree = json.loads(gzip.decompress((out / CACHE_FILE).read_bytes()))
    tree["fingerprint"] |= {"version": 3, "verify_images": True}
    (out / CACHE_FILE).write_bytes(gzip.compress(json.dumps(tree).encode()))
    with pytest.warns(UserWarning, match=f"skipping {cut}: "):
        (train, _), from_cache, note = cached_scan(DataConfig(data_dir=str(folder), verify_images=True), out)
    assert not from_cache and note == f"the cache's format changed since {out / CACHE_FILE} was written: scanned again"
    assert (str(cut), 2) not in train.samples


def test_an_image_skipped_for_its_pixels_is_rechecked_as_the_scan_checked_it(folder: Path, tmp_path: Path):
    """The skipped images were rechecked by their headers alone: one skipped under data.verify_images=true for pixels
    that do not decode read fine by its header, and every run scanned the unchanged folders again."""
    cut, out = _cut(folder), tmp_path / "out"
    cfg = DataConfig(data_dir=str(folder), verify_images=True)
    with pytest.warns(UserWarning, match=f"skipping {cut}: "):
        cached_scan(cfg, out)
    with pytest.warns(UserWarning, match=f"skipping {cut}: "):  # still named on a rerun
        _, from_cache, note = cached_scan(cfg, out)
    assert from_cache, note
    _, from_cache, note = cached_scan(DataConfig(data_dir=str(folder)), out)
    assert not from_cache and note.startswith("data.verify_images changed since")


def test_one_class_and_imbalance_warnings(tmp_path: Path):
    make_folder(tmp_path / "one", classes=1, per_class=2, splits=("train",))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = scan_split(tmp_path / "one" / "train")
    assert class_warnings(one) == [
        "the training split has 1 class (c0): every prediction will be that class, so val top-1 is 100% whatever "
        "the model learns; add a folder per class"
    ]
    skewed = Split([("a", 0)] * 2 + [("b", 1)] * 21 + [("c", 2)] * 5, ["cat", "dog", "eel"], [])
    (message,) = class_warnings(skewed)
    assert message.startswith("class imbalance over 10x: 'dog' has 21 training images, 'cat' 2 (10.5x)")
    assert class_warnings(Split([("a", 0)] * 2 + [("b", 1)] * 20, ["cat", "dog"], [])) == []  # 10x exactly: fine


def test_cache_notices_images_added_in_nested_folders(folder: Path, tmp_path: Path):
    cfg, out = DataConfig(data_dir=str(folder)), tmp_path / "out"
    nested = folder / "train" / "c1" / "more"
    nested.mkdir()
    shutil.copy(folder / "train" / "c1" / "0.png", nested / "a.png")
    first, _, _ = cached_scan(cfg, out)
    c1_time = os.stat(folder / "train" / "c1").st_mtime_ns
    shutil.copy(folder / "train" / "c1" / "0.png", nested / "b.png")
    assert os.stat(folder / "train" / "c1").st_mtime_ns == c1_time  # the class folder's own time is unchanged
    again, from_cache, note = cached_scan(cfg, out)
    assert not from_cache and "changed" in note
    assert (str(nested / "b.png"), 1) in again[0].samples and len(again[0].samples) == len(first[0].samples) + 1


@pytest.mark.parametrize("damage", ["not_gzip", "not_json", "wrong_shape"])
def test_damaged_cache_is_rescanned_with_a_note(folder: Path, tmp_path: Path, damage: str):
    cfg, out = DataConfig(data_dir=str(folder)), tmp_path / "out"
    expected, _, _ = cached_scan(cfg, out)
    tree = json.loads(gzip.decompress((out / CACHE_FILE).read_bytes())) | {"train": {"samples": 5}}
    garbage = {"not_gzip": b"not gzip", "not_json": gzip.compress(b"{not json"),
               "wrong_shape": gzip.compress(json.dumps(tree).encode())}[damage]  # fmt: skip
    (out / CACHE_FILE).write_bytes(garbage)
    splits, from_cache, note = cached_scan(cfg, out)
    assert not from_cache and splits == expected and note.startswith(f"{out / CACHE_FILE} is unreadable")
    assert cached_scan(cfg, out)[1]  # replaced by a valid cache


def test_linked_folder_loop_counts_no_other_class_image(folder: Path):
    (folder / "train" / "c0" / "loop").symlink_to(folder / "train", target_is_directory=True)  # c0/loop/c1/...
    (folder / "train" / "c0" / "other").symlink_to(folder / "train" / "c2", target_is_directory=True)
    outside = make_folder(folder.parent / "extra", classes=1, per_class=2, splits=("more",))
    (folder / "train" / "c0" / "extra").symlink_to(outside / "more" / "c0", target_is_directory=True)
    with pytest.warns(UserWarning) as record:
        split = scan_split(folder / "train")
    assert any(re.match("skipping linked folder .*c0/loop -> .*: a loop", str(w.message)) for w in record)
    assert any("c0/other" in str(w.message) and "listed apart" in str(w.message) for w in record)
    labels = [label for _, label in split.samples]
    assert labels.count(0) == 8 + 2 and labels.count(1) == labels.count(2) == 8  # c0's own 8 + the outside 2


def test_class_folder_linked_to_another_class_folder_is_skipped(folder: Path):
    """A top-level link to another class folder became a class of its own: every image of c0 under two labels."""
    (folder / "train" / "c3").symlink_to(folder / "train" / "c0", target_is_directory=True)
    (folder / "train" / "b").symlink_to(folder / "train" / "c1" / "sub", target_is_directory=True)  # into c1
    (folder / "train" / "c1" / "sub").mkdir()
    outside = make_folder(folder.parent / "extra", classes=1, per_class=2, splits=("more",))
    (folder / "train" / "d").symlink_to(outside / "more" / "c0", target_is_directory=True)  # a class of its own
    with pytest.warns(UserWarning) as record:
        split = scan_split(folder / "train")
    messages = sorted(str(w.message) for w in record)
    assert messages == [
        f"skipping linked folder {folder / 'train' / name} -> {os.path.realpath(target)}: the folder "
        f"{os.path.realpath(other)}, listed apart"
        for name, target, other in (("b", folder / "train" / "c1" / "sub", folder / "train" / "c1"),
                                    ("c3", folder / "train" / "c0", folder / "train" / "c0"))
    ]  # fmt: skip
    assert split.classes == ["c0", "c1", "c2", "d"] and len(split.samples) == 3 * 8 + 2


def test_val_image_too_elongated_for_the_centre_crop_is_skipped_and_named(folder: Path, tmp_path: Path):
    """Its resize to the centre crop's scale would take gigabytes: the scan skips it in val (where that resize runs),
    names it, and keeps it in train (whose random-resized crop keeps the output size); the cache keys on the resize."""
    needle = np.zeros((1, 1_200_000, 3), dtype=np.uint8)  # 1 x 1.2 M: at a shorter side of 256, 307 M pixels
    for split in ("train", "val"):
        Image.fromarray(needle).save(folder / split / "c1" / "needle.png")
    cfg, out = DataConfig(data_dir=str(folder)), tmp_path / "out"
    with pytest.warns(UserWarning) as record:
        (train, val), _, _ = cached_scan(cfg, out)
    (message,) = [str(w.message) for w in record]
    needle = folder / "val" / "c1" / "needle.png"
    assert message.startswith(f"skipping {needle}: a 1x1200000 (HxW) image is too elongated")
    assert (str(folder / "train" / "c1" / "needle.png"), 1) in train.samples
    assert [path for path, _ in val.skipped] == [str(folder / "val" / "c1" / "needle.png")]
    assert not cached_scan(DataConfig(data_dir=str(folder), img_size=4, crop_pct=1.0), out)[1]  # another resize
