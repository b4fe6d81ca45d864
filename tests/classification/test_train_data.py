import shutil
import unicodedata
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as T
from PIL import Image
from trainkit import make_folder

from swinlite.classification.config import DataConfig
from swinlite.classification.data import (
    ImageFolderDataset,
    build_datasets,
    build_transforms,
    collate,
    load_rgb,
    scan_split,
)
from swinlite.images import LeftOut


def _save(path: Path, mode: str, fmt: str = "PNG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rgb = Image.fromarray(np.random.default_rng(0).integers(0, 255, (12, 12, 3), dtype=np.uint8))
    img = rgb.convert(mode) if mode != "P" else rgb.quantize(8)
    if mode == "P":
        img.info["transparency"] = 0
    img.save(path, fmt, **({"transparency": 0} if mode == "P" else {}))


@pytest.mark.parametrize(
    ("mode", "name", "fmt"),
    [("L", "a.png", "PNG"), ("RGBA", "a.png", "PNG"), ("P", "a.png", "PNG"), ("CMYK", "a.JPG", "JPEG"),
     ("I;16", "a.tif", "TIFF"), ("RGB", "a.JPEG", "JPEG")],
)  # fmt: skip
def test_modes_become_rgb_and_upper_case_extensions_count(tmp_path: Path, mode: str, name: str, fmt: str):
    path = tmp_path / "train" / "x" / name
    _save(path, mode, fmt)
    assert Image.open(path).mode == mode
    split = scan_split(tmp_path / "train")
    assert split.samples == [(str(path), 0)] and split.skipped == []
    img = load_rgb(path)
    assert img.mode == "RGB" and img.size == (12, 12)


def test_corrupt_and_non_image_files_skipped_with_named_warning(folder: Path):
    bad = folder / "train" / "c1" / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    note = folder / "train" / "c0" / "notes.txt"
    note.write_text("hello")
    link = folder / "train" / "c2" / "from_c0.png"  # into another class folder: skipped, and counted (it was not)
    link.symlink_to(folder / "train" / "c0" / "0.png")
    with pytest.warns(UserWarning) as record:
        train_ds, val_ds, classes, skipped = build_datasets(DataConfig(data_dir=str(folder), img_size=16))
    messages = " ".join(str(w.message) for w in record)
    assert str(bad) in messages and str(note) in messages and f"skipping linked file {link}" in messages
    assert skipped == 3 and len(train_ds) == 24 and len(val_ds) == 24 and classes == ["c0", "c1", "c2"]
    image, label = train_ds[0]
    assert image.shape == (3, 16, 16) and label == 0


def test_file_broken_after_scan_is_replaced_not_fatal(folder: Path):
    split = scan_split(folder / "train")
    Path(split.samples[0][0]).write_bytes(b"garbage")
    dataset = ImageFolderDataset(split.samples)
    with pytest.warns(UserWarning, match=f"{split.samples[0][0]} skipped: unreadable"):
        img, label = dataset[0]
    assert img.mode == "RGB" and label == split.samples[1][1]


def test_class_folders_are_in_torchvisions_image_folder_order(tmp_path: Path):
    """Python's sort of the names, case and all (B before a, c10 before c2), as torchvision's ImageFolder gives a
    classifier's classes: a case-blind sort numbered the same folders otherwise."""
    for name in ("a", "B", "c10", "c2"):
        _save(tmp_path / "train" / name / "0.png", "RGB")
    reference = torchvision.datasets.ImageFolder(tmp_path / "train").classes
    assert scan_split(tmp_path / "train").classes == reference == ["B", "a", "c10", "c2"]


def test_val_uses_train_class_indices(tmp_path: Path):
    make_folder(tmp_path, classes=3, per_class=2, splits=("train",))
    make_folder(tmp_path, classes=2, per_class=2, splits=("val",))  # c0, c1 only
    (tmp_path / "val" / "c1").rename(tmp_path / "val" / "c2")
    _, val_ds, classes, _ = build_datasets(DataConfig(data_dir=str(tmp_path), verify_images=False))
    assert sorted({label for _, label in val_ds.samples}) == [0, 2]


def test_an_elongated_val_image_replaced_after_the_scan_is_left_out_and_named_when_loaded(tmp_path: Path):
    """The scan skips an image too elongated for the centre crop's resize; one written over a scanned image after the
    scan is refused by the val set when it loads it, before the resize (a warning naming it; the evaluation leaves it
    out, as a file broken behind its header; training would serve the next image)."""
    make_folder(tmp_path, classes=2, per_class=2)
    _, val_ds, _, skipped = build_datasets(DataConfig(data_dir=str(tmp_path), img_size=32))
    needle = tmp_path / "val" / "c0" / "1.png"
    Image.fromarray(np.zeros((1, 1_200_000, 3), dtype=np.uint8)).save(needle)
    index = [path for path, _ in val_ds.samples].index(str(needle))
    assert skipped == 0
    with pytest.warns(UserWarning, match=r"1\.png left out of the evaluation: a 1x1200000 \(HxW\) image is too elong"):
        left = val_ds[index]
    assert isinstance(left, LeftOut) and (left.index, left.path) == (index, str(needle))
    images, labels, left_out = collate([val_ds[index - 1], left, val_ds[(index + 1) % len(val_ds)]])
    assert images.shape == (2, 3, 32, 32) and labels.shape == (2,) and left_out == [left]  # the batch without it
    assert collate([left, left]) == (None, None, [left, left])


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("no_root", "--data-dir .* does not exist"),
        # said it did not exist
        ("root_a_file", r"--data-dir .*data.zip is a file; expected a folder holding train/<class>/\* and val/"),
        ("no_val", "missing split folder .*val"),
        ("no_classes", "holds no class folders"),
        ("empty_class", "class folder .*c1 has no readable images"),
        ("only_corrupt", "class folder .*c2 has no readable images"),
        ("unknown_val_class", "classes the training split does not have: zebra"),
        # said only that val had a class train lacked, naming what looked like train's own class
        ("unicode_twin_val_class", "the names differ only in Unicode normalisation, NFC vs NFD"),
        # a class on a disk not mounted was left out without a word: a classifier of one class fewer
        ("broken_class_link", r"train/zebra is a symbolic link to /nonexistent/zebra, which does not exist \(a disk"),
    ],
)
def test_data_faults_are_clear_errors(tmp_path: Path, fault: str, message: str):
    root = make_folder(tmp_path / "data", per_class=2)
    if fault == "no_root":
        root = tmp_path / "nowhere"
    elif fault == "root_a_file":
        root = tmp_path / "data.zip"
        root.write_bytes(b"PK")
    elif fault == "no_val":
        shutil.rmtree(root / "val")
    elif fault == "no_classes":
        (root / "train").rename(tmp_path / "elsewhere")
        (root / "train").mkdir()
    elif fault == "empty_class":
        for f in (root / "train" / "c1").iterdir():
            f.unlink()
    elif fault == "only_corrupt":
        for f in (root / "train" / "c2").iterdir():
            f.write_bytes(b"not an image")
    elif fault == "unknown_val_class":
        (root / "val" / "c0").rename(root / "val" / "zebra")
    elif fault == "unicode_twin_val_class":  # as macOS writes the name (NFD), the other split as typed (NFC)
        (root / "train" / "c0").rename(root / "train" / unicodedata.normalize("NFC", "café"))
        (root / "val" / "c0").rename(root / "val" / unicodedata.normalize("NFD", "café"))
    elif fault == "broken_class_link":
        (root / "train" / "zebra").symlink_to("/nonexistent/zebra")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match=message):
            build_datasets(DataConfig(data_dir=str(root)))
    if fault == "only_corrupt":  # why each file was skipped: the error came before those warnings, which were lost
        said = [str(w.message) for w in caught]
        for path in sorted((root / "train" / "c2").iterdir()):
            assert f"skipping {path}: unreadable (UnidentifiedImageError: " in "\n".join(said), said


def test_transforms_follow_config(folder: Path):
    train_ds, val_ds, _, _ = build_datasets(DataConfig(data_dir=str(folder), img_size=24, crop_pct=1.0))
    x, _ = val_ds[0]
    assert x.shape == (3, 24, 24) and x.dtype == torch.float32
    assert abs(float(x.mean())) < 3  # normalized


@pytest.mark.parametrize("hflip", [0.0, 0.3])
def test_transforms_take_every_setting_of_the_config(hflip: float):
    """Mean and std, the eval crop_pct, the interpolation, the crop scale and hflip each left at timm's default went
    unseen: only the output's shape and range were checked."""
    cfg = DataConfig(img_size=32, crop_pct=0.5, mean=(0.5,) * 3, std=(0.25,) * 3, interpolation="bicubic",
                     hflip=hflip, scale=(0.9, 1.0))  # fmt: skip
    train, evaluation = build_transforms(cfg)
    bicubic = T.InterpolationMode.BICUBIC
    reference = T.Compose([T.Resize(64, bicubic), T.CenterCrop(32), T.ToTensor(), T.Normalize((0.5,) * 3, (0.25,) * 3)])
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8))
    torch.testing.assert_close(evaluation(image), reference(image))  # resized to 32 / crop_pct = 64 first
    crop, *rest = train.transforms
    assert (crop.size, crop.scale, crop.interpolation) == ((32, 32), (0.9, 1.0), bicubic)
    (normalize,) = [t for t in rest if isinstance(t, T.Normalize)]
    assert (normalize.mean.tolist(), normalize.std.tolist()) == ([0.5] * 3, [0.25] * 3)
    assert [t.p for t in rest if isinstance(t, T.RandomHorizontalFlip)] == ([hflip] if hflip else [])
