"""The training transforms keep image and mask aligned (a mask drawn from the image itself still matches it after
every geometric step), rescale as mmcv does, crop with cat_max_ratio, pad the mask with ignore_index; unset mean and
std are refused, naming how a run resolves them."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pico import PICO
from segkit import COLORS, scene
from torchvision import tv_tensors
from torchvision.transforms import v2

from swinlite.engine.preflight import resolve_normalisation
from swinlite.seg_views import rescaled_size, view_size
from swinlite.segmentation.config import SegDataConfig
from swinlite.segmentation.task import SegmentationTask
from swinlite.segmentation.transforms import (
    CatMaxRandomCrop,
    RandomRescale,
    build_eval_transform,
    build_train_transform,
    photometric_distortion,
)

IGNORE = 255
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _sample(seed: int, size=(40, 48)) -> tuple[tv_tensors.Image, tv_tensors.Mask]:
    image, labels = scene(np.random.default_rng(seed), size)
    return tv_tensors.Image(torch.from_numpy(image).permute(2, 0, 1)), tv_tensors.Mask(torch.from_numpy(labels).long())


def _misaligned(image: torch.Tensor, mask: torch.Tensor, block: int = 1) -> tuple[int, int]:
    """(pixels checked, pixels whose colour is not their label's): checked are the labelled pixels inside a
    ``block`` x ``block`` square of one label (a block of 5 keeps away from edges, where resizing blends colours)."""
    pixels = (image * torch.tensor(STD)[:, None, None] + torch.tensor(MEAN)[:, None, None]) * 255  # [3, H, W]
    colours = torch.tensor(COLORS, dtype=torch.float32)  # [K, 3]
    nearest = (pixels.permute(1, 2, 0)[..., None, :] - colours).norm(dim=-1).argmin(-1)  # [H, W]
    m = F.pad(mask[None, None].float(), [block // 2] * 4, value=-1)  # outside the crop: no label
    flat = F.max_pool2d(m, block, 1) == -F.max_pool2d(-m, block, 1)  # the block around holds one label
    checked = flat[0, 0] & (mask != IGNORE)
    return int(checked.sum()), int((nearest[checked] != mask[checked]).sum())


@pytest.mark.parametrize(
    ("img_scale", "ratio_range", "block"),
    [((48, 40), (1.0, 1.0), 1), ((96, 48), (0.5, 2.0), 5)],
    ids=["crop-flip-pad-exact", "rescaled"],  # without resizing every pixel is checked; with it, away from edges
)
def test_mask_follows_every_geometric_step(img_scale, ratio_range, block):
    cfg = SegDataConfig(img_scale=img_scale, ratio_range=ratio_range, crop_size=(32, 32), hflip=0.5, photometric=False)
    cfg.mean, cfg.std = MEAN, STD  # a run's are resolved before its transforms are built
    transform = build_train_transform(cfg, IGNORE)
    for seed in range(24):
        torch.manual_seed(seed)
        image, mask = transform(*_sample(seed))
        assert image.shape == (3, 32, 32) and mask.shape == (32, 32) and mask.dtype == torch.int64
        checked, wrong = _misaligned(image, mask, block)
        assert checked > 100 and wrong == 0, (seed, checked, wrong)
        padded = (image == 0).all(0)  # the padding (0 after normalisation; no image colour normalises to 0)
        assert (mask[padded] == IGNORE).all()
    flipped_image_only = v2.functional.horizontal_flip(image)  # the check sees a misalignment
    assert _misaligned(flipped_image_only, mask)[1] > 0


@pytest.mark.parametrize(
    "build",
    [lambda data: build_train_transform(data, IGNORE), lambda data: build_eval_transform(data.mean, data.std)],
    ids=["train", "eval"],
)
def test_unset_mean_and_std_are_refused_naming_how_a_run_resolves_them(build):
    """A fresh config's data.mean and data.std are None (a run resolves them before building its transforms): built
    by hand from it, the transforms failed inside torchvision's Normalize with a TypeError. The way named works."""
    cfg = SegmentationTask.load_config(None, [f"model.name={PICO}"])
    resolve = "resolve_normalisation\\(SegmentationTask, cfg\\)"
    with pytest.raises(ValueError, match=f"^data.mean and data.std are unset \\(None\\).*{resolve}"):
        build(cfg.data)
    cfg.data.std = STD
    with pytest.raises(ValueError, match="^data.mean is unset \\(None\\)"):
        build(cfg.data)
    cfg.data.std = None
    normalize = [
        t for t in build(resolve_normalisation(SegmentationTask, cfg).data).transforms if isinstance(t, v2.Normalize)
    ]
    assert [(n.mean, n.std) for n in normalize] == [(list(MEAN), list(STD))]  # the pico's: ImageNet's


@pytest.mark.parametrize("hflip", [0.0, 1.0])
def test_data_hflip_is_the_flip_probability_of_image_and_mask_together(hflip: float):
    """No resize, crop or pad (the scale and crop are the image's): 0 never flips, 1 always flips, both alike."""
    cfg = SegDataConfig(img_scale=(48, 40), ratio_range=(1.0, 1.0), crop_size=(40, 48), hflip=hflip, photometric=False)
    cfg.mean, cfg.std = MEAN, STD
    transform = build_train_transform(cfg, IGNORE)
    for seed in range(8):
        torch.manual_seed(seed)
        image, mask = _sample(seed)
        out_image, out_mask = transform(image, mask)
        checked, wrong = _misaligned(out_image, out_mask)
        assert torch.equal(out_mask, mask.flip(-1) if hflip else mask) and checked > 100 and wrong == 0


def test_photometric_distortion_changes_the_image_never_the_mask():
    image, mask = _sample(0)
    changed = 0
    for seed in range(8):
        torch.manual_seed(seed)
        out_image, out_mask = photometric_distortion()(image, mask)
        assert torch.equal(out_mask, mask)
        changed += not torch.equal(out_image, image)
    assert changed >= 6  # each of 4 steps runs with probability 0.5: almost every draw changes something


@pytest.mark.parametrize(
    ("size", "scale", "expected"),
    [
        ((512, 683), (2048, 512), (512, 683)),  # landscape: the short side reaches 512
        ((300, 200), (2048, 512), (768, 512)),  # portrait: the same limits in the other orientation
        ((100, 1000), (2048, 512), (205, 2048)),  # very wide: the long side limits
        ((512, 683), (1024, 256), (256, 342)),  # ratio 0.5 of (2048, 512); 341.5 rounds up
        ((3, 2000), (256, 64), (1, 256)),  # 0.384 rounds to 1, not mmcv's 0: a thin image is still one pixel high
        ((300, 2), (64, 16), (64, 1)),
    ],
)
def test_rescale_follows_mmcv(size, scale, expected):
    assert rescaled_size(*size, scale) == expected
    image = tv_tensors.Image(torch.zeros(3, *size, dtype=torch.uint8))
    mask = tv_tensors.Mask(torch.zeros(size, dtype=torch.int64))
    out_image, out_mask = RandomRescale(scale, (1.0, 1.0))(image, mask)
    assert out_image.shape[1:] == out_mask.shape == expected


def test_a_test_view_truncates_the_scale_times_its_ratio_as_mmseg():
    """mmseg's MultiScaleFlipAug scales img_scale by a test ratio with int(), then mmcv's rescale_size fits the image:
    0.6 of (2048, 512) is (1228, 307), not (1229, 307), and the long side limits a 500x4000 image."""
    scale = [int(side * 0.6) for side in (2048, 512)]  # mmseg's img_scale at the ratio
    factor = min(max(scale) / 4000, min(scale) / 500)  # mmcv's rescale_size of a 500x4000 (HxW) image
    assert view_size(500, 4000, (2048, 512), 0.6) == (int(500 * factor + 0.5), int(4000 * factor + 0.5)) == (154, 1228)


def test_rescale_draws_its_ratio_from_ratio_range():
    """At ratio r of (64, 32) a 32x64 image becomes about 32r x 64r: over draws from (0.5, 2.0) its height ranges
    over 16-64, the aspect kept."""
    image, mask = tv_tensors.Image(torch.zeros(3, 32, 64, dtype=torch.uint8)), tv_tensors.Mask(torch.zeros(32, 64))
    torch.manual_seed(0)
    sizes = [tuple(RandomRescale((64, 32), (0.5, 2.0))(image, mask)[1].shape) for _ in range(16)]
    heights = [height for height, _ in sizes]
    assert all(16 <= height <= 64 and abs(width - 2 * height) <= 1 for height, width in sizes), sizes
    assert min(heights) < 24 and max(heights) > 48, heights


def test_crop_redraws_until_no_class_covers_more_than_cat_max_ratio():
    labels = torch.zeros(48, 48, dtype=torch.int64)
    labels[:, 32:] = 1  # a third of class 1: 40 % of the 24x24 crops hold both classes in balance
    mask, image = tv_tensors.Mask(labels), tv_tensors.Image(torch.zeros(3, 48, 48, dtype=torch.uint8))

    def share_of_largest(crop_mask: torch.Tensor) -> float:
        counts = torch.bincount(crop_mask.flatten(), minlength=2)
        return float(counts.max() / counts.sum())

    torch.manual_seed(0)
    plain = [share_of_largest(CatMaxRandomCrop((24, 24))(image, mask)[1]) for _ in range(24)]
    balanced = [share_of_largest(CatMaxRandomCrop((24, 24), 0.75, IGNORE)(image, mask)[1]) for _ in range(24)]
    assert all(share < 0.75 for share in balanced) and sum(share < 0.75 for share in plain) < 16
    # a side shorter than the crop: all of it
    small = CatMaxRandomCrop((32, 32), 0.75)(tv_tensors.Image(image[:, :20]), tv_tensors.Mask(mask[:20]))
    assert small[0].shape == (3, 20, 32) and small[1].shape == (20, 32)


def test_crop_balance_counts_the_labelled_pixels_alone():
    """Ignored pixels are no class: a crop of ignored pixels beside one class (counted as two classes in balance, 14
    of these 24 crops held a single class) is redrawn."""
    labels = torch.full((48, 48), IGNORE, dtype=torch.int64)
    labels[:, 20:34], labels[:, 34:] = 0, 1
    mask, image = tv_tensors.Mask(labels), tv_tensors.Image(torch.zeros(3, 48, 48, dtype=torch.uint8))
    torch.manual_seed(0)
    for _ in range(24):
        crop = CatMaxRandomCrop((24, 24), 0.75, IGNORE)(image, mask)[1]
        counts = torch.bincount(crop[crop != IGNORE], minlength=2)
        assert counts.min() > 0 and counts.max() / counts.sum() < 0.75, counts
