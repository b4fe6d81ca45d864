"""Oddities of hand-made ImageFolder trees that the scan once took without a word."""

import shutil
import warnings
from pathlib import Path

import pytest

from swinlite.classification.config import DataConfig
from swinlite.classification.data import build_datasets


def test_training_classes_val_lacks_are_named_in_one_warning(folder: Path):
    """A class train has and val/ lacks gave no word; evaluate.py later printed "nan% (0 images)" for it."""
    shutil.rmtree(folder / "val" / "c0")
    shutil.rmtree(folder / "val" / "c2")
    with pytest.warns(UserWarning, match=r"val/ has no image of 2 of the 3 training classes: c0, c2;") as record:
        _, val_ds, classes, _ = build_datasets(DataConfig(data_dir=str(folder), img_size=16))
    assert sum("training classes" in str(w.message) for w in record) == 1
    assert classes == ["c0", "c1", "c2"] and len(val_ds) == 8  # a subset validated on purpose still trains


def test_a_val_split_with_every_class_gives_no_warning(folder: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_datasets(DataConfig(data_dir=str(folder), img_size=16))
