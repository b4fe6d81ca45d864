import hashlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from swinlite.classification import ClassificationTask
from swinlite.classification.config import DataConfig
from swinlite.classification.data import build_datasets
from swinlite.classification.demo_data import build_digits
from swinlite.engine.config import apply_overrides


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.png")):
        h.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build of the digits folder (32 px), read by the tests below; none of them changes it."""
    return build_digits(tmp_path_factory.mktemp("digits") / "d")


def test_digits_folder_is_deterministic_stratified_and_rgb(digits: Path, tmp_path: Path):
    a = digits
    b = build_digits(tmp_path / "b")
    assert _digest(a) == _digest(b)  # byte-identical builds
    train, val, classes, skipped = build_datasets(DataConfig(data_dir=str(a), img_size=32))
    assert (len(train), len(val), skipped) == (1437, 360, 0) and classes == [str(d) for d in range(10)]
    per_class = np.bincount([label for _, label in val.samples])
    assert per_class.min() >= 35 and per_class.max() <= 37  # 20% of each class
    path, label = val.samples[0]
    img = Image.open(path)
    assert img.mode == "RGB" and img.size == (32, 32)
    index = int(Path(path).stem)  # files are named by their index in load_digits()
    from sklearn.datasets import load_digits  # imported here: 1.4 s of every pytest worker's collection otherwise

    assert load_digits().target[index] == label
    assert not set(map(lambda s: Path(s[0]).name, train.samples)) & set(map(lambda s: Path(s[0]).name, val.samples))


def test_existing_build_is_reused_and_foreign_folder_refused(digits: Path, tmp_path: Path):
    root = digits
    marker_time = (root / "train").stat().st_mtime
    assert build_digits(root) == root and (root / "train").stat().st_mtime == marker_time
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "photo.jpg").write_bytes(b"x")
    with pytest.raises(ValueError, match="not a digits demo folder"):
        build_digits(tmp_path / "mine")


def test_build_of_another_size_is_refused_before_the_data_is_read(digits: Path):
    """A run at another data.img_size used the first run's 32 px images without a word (the marker said 32x32)."""
    root = digits
    message = r"holds the digits demo built otherwise \(.swinlite_digits: scikit-learn digits, 32x32 RGB, "
    with pytest.raises(ValueError, match=message + r".*not at data.img_size=16 \(scikit-learn digits, 16x16 RGB"):
        build_digits(root, size=16)
    cfg = ClassificationTask.load_config(None, [f"data.data_dir={root}", "data.dataset=digits", "data.img_size=16"])
    with pytest.raises(ValueError, match=message):
        ClassificationTask.check_inputs(cfg)  # in the run's checks, before anything is read or written
    ClassificationTask.check_inputs(apply_overrides(cfg, {"data.img_size": 32}))
    assert len(list(root.rglob("*.png"))) == 1797  # nothing deleted
