"""Oddities of hand-made ImageFolder trees that the scan once took without a word."""

import shutil
import unicodedata
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from swinlite.classification.config import DataConfig
from swinlite.classification.data import build_datasets
from swinlite.classification.evaluation import EvalResult, format_report
from swinlite.classification.task import ClassificationTask


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


def test_the_report_says_not_measured_for_a_class_without_images():
    """evaluate.py printed "nan%" for it."""
    confusion = torch.tensor([[3, 1, 0], [0, 0, 0], [0, 0, 2]])
    report = format_report(EvalResult(loss=0.5, top1=83.3, topk=100.0, confusion=confusion, k=3), ["a", "b", "c"])
    assert "nan" not in report
    assert report.splitlines()[2:] == [
        "  a                     75.00%  (4 images)",
        "  b                        n/a  (0 images)",
        "  c                    100.00%  (2 images)",
    ]


def test_resuming_with_a_class_renamed_by_its_unicode_form_says_so():
    """--resume said "class folders gone: 'café'; new class folders: 'café'", two names that look the same; the note
    the val-vs-train check gives says they differ in Unicode normalisation."""
    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    task = object.__new__(ClassificationTask)  # check_resumed reads the classes and data.data_dir only
    task.classes, task.cfg = [nfd, "tea"], SimpleNamespace(data=SimpleNamespace(data_dir="data"))
    with pytest.raises(ValueError) as raised:
        task.check_resumed({"classes": [nfc, "tea"]}, Path("resume.pt"))
    message = str(raised.value)
    assert f"(class folders gone: '{nfc}'; new class folders: '{nfd}') (this folder's name {nfd} is NFD" in message
    assert "the names differ only in Unicode normalisation, NFC vs NFD" in message
