"""What tests/detection/test_det_features_extract.py and tests/segmentation/test_seg_features_extract.py check of a
run's weights file: extract_features.py and visualize.py on it (they refused it as no classifier's before)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from scriptkit import load_script
from torchvision import transforms

from swinlite.export import input_size, run_backbone
from swinlite.features import load_features
from swinlite.io import read_metadata


def _image(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    path = folder / "photo.png"
    Image.fromarray(rng.integers(0, 256, (50, 62, 3), dtype=np.uint8)).save(path)
    return path


def _run_levels(checkpoint: Path, image: Path) -> list[torch.Tensor]:
    """run_backbone's eager levels of ``image``, at the run's input size, mean and std."""
    metadata = read_metadata(checkpoint)
    settings = metadata["data"] if metadata["task"] == "detection" else metadata["preprocessing"]
    model = run_backbone(checkpoint)
    transform = transforms.Compose(
        [
            transforms.Resize(input_size(model, checkpoint), transforms.InterpolationMode.BICUBIC, antialias=True),
            transforms.ToTensor(),
            transforms.Normalize(settings["mean"], settings["std"]),
        ]
    )
    with torch.no_grad():
        return model.forward_intermediates(transform(Image.open(image).convert("RGB"))[None], intermediates_only=True)


def check_run_features(checkpoint: Path, task: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    image, out = _image(tmp_path), tmp_path / "f"
    argv = ["--checkpoint", str(checkpoint), "--input", str(image), "--output", str(out), "--no-progress"]
    assert load_script("extract_features").main(argv) == 0
    assert f"note: a {task} checkpoint: its backbone's levels through the run's trained per-level norms" in (
        capsys.readouterr().err
    )
    saved = load_features(out / "features" / "photo.png.safetensors")
    expected = _run_levels(checkpoint, image)
    assert list(saved.maps) == [f"stage{i}" for i in range(len(expected))]
    for ours, theirs in zip(saved.maps.values(), expected, strict=True):
        torch.testing.assert_close(ours, theirs[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(saved.pooled, expected[-1][0].mean(dim=(1, 2)), atol=1e-4, rtol=1e-4)
    assert task in saved.model and "per-level norms" in saved.model
    plots = load_script("visualize").main(["--checkpoint", str(checkpoint), "--image", str(image), "--output",
                                           str(tmp_path / "plots")])  # fmt: skip
    assert tmp_path / "plots" / "features.png" in plots
    with pytest.raises(ValueError, match="records its Swin"):
        load_script("visualize").main(["--checkpoint", str(checkpoint), "--model", read_metadata(checkpoint)[
            "detector" if task == "detection" else "segmenter"]["name"], "--output", str(tmp_path / "p2")])  # fmt: skip
