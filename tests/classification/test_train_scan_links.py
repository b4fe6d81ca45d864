"""The ImageFolder scan and linked files: each image under its own class folder's label, once."""

import os
import shutil
from pathlib import Path

import pytest
from trainkit import make_folder

from swinlite.classification.config import DataConfig
from swinlite.classification.data import scan_data_dir, scan_split


def test_a_file_linked_into_a_class_folder_is_not_counted_again(folder: Path):
    """A link to another class's image put it under two labels, a link to an image of the same class counted it
    twice (evaluate.py scored more images than predict.py on the same folder); a link to an image outside the class
    folders is an image of the class it is linked from."""
    train = folder / "train"
    (train / "c1" / "from_c0.png").symlink_to(train / "c0" / "1.png")
    (train / "c0" / "0_alias.png").symlink_to(train / "c0" / "0.png")
    outside = make_folder(folder.parent / "extra", classes=1, per_class=1, splits=("more",))
    (train / "c2" / "extra.png").symlink_to(outside / "more" / "c0" / "0.png")
    with pytest.warns(UserWarning) as record:
        split = scan_split(train)
    assert sorted(str(w.message) for w in record) == [
        f"skipping linked file {train / 'c0' / '0_alias.png'} -> {os.path.realpath(train / 'c0' / '0.png')}: the "
        f"same file as {train / 'c0' / '0.png'}, listed under its own name",
        f"skipping linked file {train / 'c1' / 'from_c0.png'} -> {os.path.realpath(train / 'c0' / '1.png')}: the "
        f"folder {os.path.realpath(train / 'c0')}, listed apart",
    ]
    labels = [label for _, label in split.samples]
    assert labels.count(0) == labels.count(1) == 8 and labels.count(2) == 9
    assert (str(train / "c2" / "extra.png"), 2) in split.samples


def test_a_file_outside_linked_from_two_class_folders_keeps_one_label(folder: Path):
    """Links from two class folders to one image outside them trained it under both labels, without a word."""
    train = folder / "train"
    outside = make_folder(folder.parent / "extra", classes=1, per_class=1, splits=("more",))
    target = outside / "more" / "c0" / "0.png"
    (train / "c1" / "ext_a.png").symlink_to(target)
    (train / "c2" / "ext_b.png").symlink_to(target)
    with pytest.warns(UserWarning) as record:
        split = scan_split(train)
    assert [str(w.message) for w in record] == [
        f"skipping linked file {train / 'c2' / 'ext_b.png'} -> {os.path.realpath(target)}: the same file as "
        f"{train / 'c1' / 'ext_a.png'}, in another class folder"
    ]
    assert (str(train / "c1" / "ext_a.png"), 1) in split.samples
    assert all(path != str(train / "c2" / "ext_b.png") for path, _ in split.samples)


def test_a_link_into_the_other_split_is_skipped(folder: Path):
    """A linked folder in a train class leading into val trained val's images under that class, the val split then
    scoring them (evaluate.py --split train counted them too), without a word: only links into the split's own other
    class folders were skipped."""
    train, val = folder / "train", folder / "val"
    (train / "c1" / "to_val").symlink_to(val)
    (val / "c0" / "from_train.png").symlink_to(train / "c2" / "0.png")
    with pytest.warns(UserWarning) as record:
        scanned_train, scanned_val = scan_data_dir(DataConfig(data_dir=str(folder)))
    said = [str(w.message) for w in record]
    assert f"skipping linked folder {train / 'c1' / 'to_val'} -> {os.path.realpath(val)}: the folder " in said[0]
    assert any(m.startswith(f"skipping linked file {val / 'c0' / 'from_train.png'}") for m in said), said
    assert not any("to_val" in path for path, _ in scanned_train.samples)
    assert not any("from_train" in path for path, _ in scanned_val.samples)


def test_a_val_class_folder_linked_into_train_is_skipped(folder: Path):
    """A val class folder that is a link to train's (``ln -s ../train/c0 val/c0``) scored training images as val's,
    without a word: the folders kept apart left out train/, which holds the class folder's own real path."""
    train, val = folder / "train", folder / "val"
    shutil.rmtree(val / "c0")
    (val / "c0").symlink_to(train / "c0")
    with pytest.warns(UserWarning) as record:
        _, scanned_val = scan_data_dir(DataConfig(data_dir=str(folder)))
    message = (
        f"skipping linked folder {val / 'c0'} -> {os.path.realpath(train / 'c0')}: the folder "
        f"{os.path.realpath(train)}, listed apart"
    )
    assert message in [str(w.message) for w in record]
    assert [link.message for link in scanned_val.links] == [message]
    assert {label for _, label in scanned_val.samples} == {1, 2}
    assert not any(os.path.realpath(path).startswith(os.path.realpath(train)) for path, _ in scanned_val.samples)


@pytest.mark.parametrize("linked", ["val", "train"])
def test_a_split_folder_linked_to_the_other_is_refused(folder: Path, linked: str):
    """``ln -s train val`` scored the 24 training images as the val split, without a word: a split that shares its
    files with the other is refused, naming both."""
    other = "train" if linked == "val" else "val"
    shutil.rmtree(folder / linked)
    (folder / linked).symlink_to(other)
    real = os.path.realpath(folder / other)
    with pytest.raises(ValueError, match=rf"share their files once symbolic links are followed \(real paths {real} "):
        scan_data_dir(DataConfig(data_dir=str(folder)))


def test_a_store_linked_into_both_splits_is_the_training_split_s(folder: Path):
    """Datasets of links into one image store: a class folder of each split linked to one store folder, or a file of
    each to one store file, scored training images as val's, without a word (only a link into the other split's
    folder was caught). Val leaves them out, each named; a val class of train's images alone is one val lacks."""
    train, val = folder / "train", folder / "val"
    store = make_folder(folder.parent / "store", classes=2, per_class=2, splits=("s",)) / "s"
    for split in (train, val):
        shutil.rmtree(split / "c1")
        (split / "c1").symlink_to(store / "c0")
    (train / "c2" / "x.png").symlink_to(store / "c1" / "0.png")
    (val / "c0" / "x.png").symlink_to(store / "c1" / "0.png")  # under another label in val
    with pytest.warns(UserWarning) as record:
        scanned_train, scanned_val = scan_data_dir(DataConfig(data_dir=str(folder)))
    shared = [(val / "c0" / "x.png", store / "c1" / "0.png", train / "c2" / "x.png")]
    shared += [(val / "c1" / f"{n}.png", store / "c0" / f"{n}.png", train / "c1" / f"{n}.png") for n in (0, 1)]
    messages = [
        f"skipping linked file {path} -> {os.path.realpath(real)}: the same file as {other}, in the training split"
        for path, real, other in shared
    ]
    assert [link.message for link in scanned_val.links] == messages == [str(w.message) for w in record]
    assert len(scanned_train.samples) == 2 * 8 + 2 + 1
    assert sorted({label for _, label in scanned_val.samples}) == [0, 2] and len(scanned_val.samples) == 16
