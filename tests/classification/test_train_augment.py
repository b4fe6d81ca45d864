"""The training augmentation of every shipped config survives thousands of draws on the installed Pillow."""

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from pico import PICO
from PIL import Image
from timm.data.auto_augment import posterize as timm_posterize
from weightkit import random_state_dict

from swinlite.classification import ClassificationTask
from swinlite.classification.config import INTERPOLATIONS
from swinlite.classification.data import build_transforms, posterize
from swinlite.engine.checkpoint import save_weights
from swinlite.metadata import check_preprocessing, weights_metadata

CONFIGS = sorted(
    p for p in (Path(__file__).parents[2] / "configs").glob("*.yaml") if not p.name.startswith(("det_", "seg_"))
)  # det_*, seg_*: tests/detection, tests/segmentation
DRAWS = 5000
# what build_transforms reads of the data section for training (img_size: set to 16; crop_pct: evaluation only)
AUGMENTATION = ("scale", "ratio", "hflip", "color_jitter", "auto_augment", "interpolation", "re_prob", "re_mode",
                "mean", "std")  # fmt: skip


def _augmentations() -> list[list[Path]]:
    """The shipped configs grouped by their training augmentation (the transform and the settings it is built
    from): configs of one group draw the very same way, so one run of the draws covers the group."""
    groups: dict[str, list[Path]] = {}
    for path in CONFIGS:
        data = ClassificationTask.load_config(path, ["data.img_size=16"]).data
        key = repr((build_transforms(data)[0], [getattr(data, name, None) for name in AUGMENTATION]))
        groups.setdefault(key, []).append(path)
    return list(groups.values())


def test_zero_bit_posterize_is_a_black_image_as_pillow_12_gave():
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8))
    assert not np.asarray(posterize(img, 0)).any()
    assert np.array_equal(np.asarray(posterize(img, 8)), np.asarray(img))
    assert np.array_equal(np.asarray(posterize(img, 2)), np.asarray(img) & 0b11000000)


def test_timm_posterize_fails_on_zero_bits_with_this_pillow_or_gives_black():
    """Why the fix exists: timm's op hands 0 bits to Pillow, which raises from Pillow 13 on."""
    img = Image.new("RGB", (4, 4), (200, 100, 50))
    try:
        out = timm_posterize(img, 0)
    except ValueError:
        return
    assert not np.asarray(out).any()


@pytest.mark.parametrize("configs", _augmentations(), ids=lambda group: "+".join(p.stem for p in group))
def test_every_config_augmentation_survives_many_draws(configs: list[Path]):
    cfg = ClassificationTask.load_config(configs[0], ["data.img_size=16"])  # the policy's draws do not depend on size
    train, _ = build_transforms(cfg.data)
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 24, 3), dtype=np.uint8))
    random.seed(0)
    torch.manual_seed(0)
    for _ in range(DRAWS):
        out = train(img)
        assert out.shape == (3, 16, 16)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("auto_augment", ["none", "rand-m9-mstd0.5-inc1"])
@pytest.mark.parametrize("interpolation", INTERPOLATIONS)
def test_every_interpolation_the_config_takes_transforms_and_goes_into_a_weights_file(interpolation, auto_augment):
    """data.interpolation=random passed the config check, then timm's eval transform raised KeyError; lanczos with
    RandAugment, PIL's refusal in the first rotation drawn."""
    cfg = ClassificationTask.load_config(None, ["data.img_size=16", f"data.auto_augment={auto_augment}",
                                                f"data.interpolation={interpolation}"])  # fmt: skip
    if interpolation == "lanczos" and auto_augment != "none":
        with pytest.raises(ValueError, match="data.interpolation=lanczos does not go with data.auto_augment"):
            ClassificationTask.check_config(cfg)
        return
    ClassificationTask.check_config(cfg)
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 24, 3), dtype=np.uint8))
    random.seed(0)
    for transform in build_transforms(cfg.data):
        assert all(transform(img).shape == (3, 16, 16) for _ in range(50))
    assert check_preprocessing({"input_size": [3, 16, 16], "interpolation": interpolation}, "best.safetensors")


def test_lanczos_inherited_from_the_pretrained_file_is_refused_with_auto_augment(tmp_path: Path):
    """data.interpolation unset takes the model.pretrained run's lanczos: checked only as given, it passed, and PIL
    refused the first rotation drawn, after the data scan, naming no key."""
    weights = tmp_path / "last.safetensors"
    recorded = {"input_size": [3, 32, 32], "interpolation": "lanczos", "mean": [0.5] * 3, "std": [0.5] * 3,
                "crop_pct": 0.9, "crop_mode": "center"}  # fmt: skip
    meta = weights_metadata(PICO, {"num_classes": 2}, ["a", "b"], recorded)
    save_weights(weights, random_state_dict(PICO, num_classes=2), meta)
    overrides = [f"model.pretrained={weights}", "data.auto_augment=rand-m9-mstd0.5-inc1"]
    cfg = ClassificationTask.load_config(None, overrides)
    unset = rf"data.interpolation=lanczos \(unset: recorded by model.pretrained {weights}\) does not go with "
    with pytest.raises(ValueError, match=unset + "data.auto_augment=rand-m9-mstd0.5-inc1"):
        ClassificationTask.check_config(cfg)
    ClassificationTask.check_config(ClassificationTask.load_config(None, [*overrides, "data.interpolation=bicubic"]))
    ClassificationTask.check_config(ClassificationTask.load_config(None, [*overrides[:1], "data.auto_augment=none"]))


@pytest.mark.parametrize("mode", ["pixel", "const"])
def test_random_erasing_fills_as_data_re_mode_says(mode):
    """The Swin recipe erases with per-pixel noise (timm's train.py default); timm's create_transform, which builds
    the transform, defaults to a constant fill, and that is what every config got."""
    cfg = ClassificationTask.load_config(None, ["data.img_size=16", "data.re_prob=1.0", f"data.re_mode={mode}"])
    train, _ = build_transforms(cfg.data)
    (erasing,) = [t for t in train.transforms if type(t).__name__ == "RandomErasing"]
    assert erasing.mode == mode and erasing.probability == 1.0
    default = build_transforms(ClassificationTask.load_config(None, ["data.re_prob=0.25"]).data)[0]
    assert [t.mode for t in default.transforms if type(t).__name__ == "RandomErasing"] == ["pixel"]


@pytest.mark.parametrize(
    ("settings", "unused"),
    [
        (["data.re_mode=const"], "data.re_mode is unused: data.re_prob=0 (no random erasing)"),
        (["data.re_mode=const", "data.re_prob=0.25"], None),
        (["data.re_prob=0"], None),
        (
            ["data.color_jitter=0.2", "data.auto_augment=rand-m9-mstd0.5"],
            "data.color_jitter is unused: data.auto_augment=rand-m9-mstd0.5 leaves it out (its colour ops take its "
            "place)",
        ),
        (["data.color_jitter=0.2", "data.auto_augment=rand-m9-mstd0.5-t3a"], None),  # a 3-Augment policy keeps it
        (["data.auto_augment=rand-m9-mstd0.5"], None),  # the default jitter
        (["data.color_jitter=0", "data.auto_augment=rand-m9-mstd0.5"], None),  # none: the same without the policy
    ],
)
def test_augmentation_settings_timm_leaves_out_are_warned_of(settings: list[str], unused: str | None, recwarn):
    """data.re_mode=const with data.re_prob=0 (the default) erased nothing, and data.color_jitter under a policy that
    is no 3-Augment one jittered nothing, without a word (timm's transform leaves them out), while config.yaml recorded
    them as if used."""
    cfg = ClassificationTask.load_config(None, [f"model.name={PICO}", "data.img_size=16", *settings])
    ClassificationTask.check_config(cfg)
    assert [str(w.message) for w in recwarn] == ([unused] if unused else [])
    kinds = [type(t).__name__ for t in build_transforms(cfg.data)[0].transforms]
    assert ("ColorJitter" in kinds) == (cfg.data.auto_augment is None or "3a" in cfg.data.auto_augment)
