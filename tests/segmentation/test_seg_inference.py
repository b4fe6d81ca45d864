"""Test-time prediction: sliding windows placed and averaged as mmsegmentation places them, several scales and the
mirrored image averaged, everything back at the image's own size. A per-pixel model (a 1x1 convolution) gives the
same scores whole or by windows, and mirrored or not: the windows' bookkeeping is all that is tested. Two processes
count their shards as one process counts them all."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from rankforks import forked_pair, report_and_exit
from torch import nn
from torch.utils.data import DataLoader

from swinlite import seg_views
from swinlite.engine.distributed import DistInfo
from swinlite.engine.loop import SINGLE, StepSettings
from swinlite.images import LeftOut
from swinlite.seg_views import slide_windows
from swinlite.segmentation.config import SegDataConfig
from swinlite.segmentation.data import Labels, Pair, SegmentationDataset, collate
from swinlite.segmentation.inference import (
    InferenceSettings,
    confusion_of,
    large_check,
    predict_scores,
    slide_logits,
    thin_check,
)
from swinlite.segmentation.models import SegOutput
from swinlite.segmentation.transforms import build_eval_transform


class Pointwise(nn.Module):
    """Logits of each pixel from its own value; records the size of every input it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.seen: list[tuple[int, int]] = []

    def forward(self, x: torch.Tensor) -> SegOutput:
        self.seen.append(tuple(x.shape[2:]))
        return SegOutput(self.conv(x), None)


@pytest.mark.parametrize(
    ("size", "windows"),
    [((30, 40), 3 * 4), ((10, 40), 1 * 4), ((16, 16), 1)],  # 3 rows (tops 0, 11, 14) x 4 columns; a short side: 1
)
def test_slide_covers_every_pixel_and_averages_the_overlaps(size, windows):
    torch.manual_seed(0)
    model, x = Pointwise(), torch.randn(2, 3, *size)
    with torch.no_grad():
        got = slide_logits(model, x, (16, 16), (11, 11))
        torch.testing.assert_close(got, model.conv(x))
    assert len(model.seen) == windows and set(model.seen) == {(min(16, size[0]), 16)}


@pytest.mark.parametrize(
    ("size", "stride"),
    [((64, 256), None), ((64, 200), (43, 43)), ((200, 64), (64, 1)), ((40, 30), None), ((100, 48), (50, 20)),
     ((108, 64), None), ((64, 108), None)],  # 108 - 64 = 43 + 1: one pixel past a whole step, a window of its own
)  # fmt: skip
def test_every_pixel_gets_a_window_and_the_default_stride_follows_the_crop(size, stride):
    """The windows of 64 x 64 crops counted over each pixel with a plain loop: none is left out, for a side longer or
    shorter than the crop. Unset, the stride is 2/3 of the crop (43; ADE20K's 341 for 512 as before): a fixed 341
    left columns 64-191 of a 64 x 256 image to no window, labelled 0 (class 0) without a word. A side one pixel past
    a whole number of steps (ADE20K's 854 = 512 + 341 + 1) needs one window more, flush with the border."""
    test = InferenceSettings.of(SegDataConfig(crop_size=(64, 64), test_stride=stride, test_mode="slide"))
    assert test.stride == (stride or (43, 43)) and InferenceSettings.of(SegDataConfig()).stride == (341, 341)
    count = torch.zeros(size, dtype=torch.int64)
    for top, bottom, left, right in slide_windows(*size, test.crop_size, test.stride):
        assert (bottom - top, right - left) == (min(64, size[0]), min(64, size[1]))  # a whole window, inside
        count[top:bottom, left:right] += 1
    assert count.min() > 0, f"no window over {(count == 0).nonzero()[:3].tolist()} ..."


@pytest.mark.parametrize(("recorded", "given", "expected"), [(True, None, True), (True, False, False),
                                                           (False, True, True), (False, None, False)])  # fmt: skip
def test_a_scripts_flip_option_turns_the_recorded_flip_either_way(recorded: bool, given: bool | None, expected: bool):
    """--no-flip could not turn off a checkpoint's data.test_flip=true (``flip or recorded``)."""
    test = InferenceSettings.of(SegDataConfig(img_scale=(64, 32), crop_size=(32, 32), test_flip=recorded))
    assert test.overridden(None, None, given).flip is expected


def test_scales_and_flips_are_averaged_at_the_images_size():
    torch.manual_seed(0)
    model, x = Pointwise(), torch.randn(1, 3, 40, 48)
    with torch.no_grad():
        plain = predict_scores(model, x, InferenceSettings(img_scale=(48, 40)))
        flipped = predict_scores(model, x, InferenceSettings(img_scale=(48, 40), flip=True))
        scales = predict_scores(model, x, InferenceSettings(img_scale=(48, 40), ratios=(0.5, 1.0), flip=True))
    torch.testing.assert_close(plain, model.conv(x))  # one view at the image's size: its logits
    torch.testing.assert_close(flipped, model.conv(x).softmax(1))  # mirrored back: the same softmax, averaged
    assert model.seen == [(40, 48)] * 3 + [(20, 24), (20, 24), (40, 48), (40, 48)]  # each ratio, and mirrored
    assert scales.shape == (1, 4, 40, 48) and torch.allclose(scales.sum(1), torch.ones(1, 40, 48))  # mean softmax


def test_a_view_at_half_size_is_downscaled_with_antialiasing_and_its_logits_resized_back_bilinearly():
    """The views above are at the image's own size, which neither resize touches."""
    torch.manual_seed(0)
    model, x = Pointwise(), torch.randn(1, 3, 40, 48)
    with torch.no_grad():
        half = predict_scores(model, x, InferenceSettings(img_scale=(24, 20)))
        view = F.interpolate(x, (20, 24), mode="bilinear", antialias=True)  # not every other pixel
        expected = F.interpolate(model.conv(view), (40, 48), mode="bilinear", align_corners=False)
    assert model.seen == [(20, 24)]
    torch.testing.assert_close(half, expected)


def test_an_image_without_its_batch_axis_is_a_clear_error():
    """[3, H, W] failed with 'not enough values to unpack (expected 2, got 1)'."""
    with pytest.raises(ValueError, match=r"a batch of images \[B, 3, H, W\], got a 3-D tensor of shape \[3, 40, 48\]"):
        predict_scores(Pointwise(), torch.randn(3, 40, 48), InferenceSettings(img_scale=(48, 40)))


def test_the_test_size_follows_img_scale_in_either_orientation():
    model = Pointwise()
    with torch.no_grad():
        predict_scores(model, torch.randn(1, 3, 300, 200), InferenceSettings(img_scale=(2048, 512)))
        slide = InferenceSettings(img_scale=(2048, 512), mode="slide", crop_size=(512, 512), stride=(341, 341))
        predict_scores(model, torch.randn(1, 3, 200, 300), slide)
    assert model.seen[0] == (768, 512)  # the short side to 512
    assert model.seen[1:] == [(512, 512), (512, 512)]  # 512 x 768 by two 512 windows, 256 apart (stride 341)


DOCS_RATIOS = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75)  # docs/segmentation.md's multi-scale test (with --flip)


@pytest.fixture
def four_gib(monkeypatch) -> None:
    """The budget of a machine of at most 8 GiB (the least on any), whatever this one's memory."""
    monkeypatch.setattr(seg_views, "memory_budget", lambda: 4 * 2**30)


@pytest.mark.parametrize(
    ("img_scale", "size", "ratios", "classes", "refused"),
    [
        ((2048, 512), (48, 120), DOCS_RATIOS, 150, None),  # ADE20K: views up to 2240x896, 2.3 GiB
        ((2048, 1024), (1024, 2048), DOCS_RATIOS, 19, None),  # Cityscapes-style: up to 3584x1792, 1.1 GiB
        ((2048, 512), (40, 48), (100.0,), 150, "a 40x48 (HxW) image would be rescaled to 51200x61440 (ratio 100.0), "
         "whose prediction holds 3597.7 GiB at that size (float32: the logits of 150 classes twice, the windows' "
         "count, the image and its mirror) and 0.0 GiB at the image's own size (the scores of 150 classes twice, the "
         "image and its labels), more than the 4 GiB an image's prediction may take: lower --ratios"),
        ((2048, 512), (1200, 1600), (1.0,), 150, None),  # a photo at two views: 2.6 GiB (4.3 before the running sum)
        # accepted before: only the views counted; the scores at the image's size took 27 GiB (one view) or 107 (two)
        ((2048, 512), (6000, 8000), (1.0,), 150, "a 6000x8000 (HxW) image's prediction holds 54.5 GiB at the image's "
         "own size, where it is scored (float32: the scores of 150 classes twice, the image and its labels), and 0.4 "
         "GiB at its 512x683 view (ratio 1.0), more than the 4 GiB an image's prediction may take, whatever --ratios: "
         "the image is too large for 150 classes at full resolution; downscale the image to at most 1541x2055 (HxW; "
         "its mask too, nearest-neighbour)"),
        ((2048, 512), (1600, 1600), (1.0, 2.0), 150, "a 1600x1600 (HxW) image would be rescaled to 1024x1024 (ratio "
         "2.0), whose prediction holds 1.2 GiB at that size (float32: the logits of 150 classes twice, the windows' "
         "count, the image and its mirror) and 2.9 GiB at the image's own size (the scores of 150 classes twice, the "
         "image and its labels), more than the 4 GiB an image's prediction may take: lower --ratios, or downscale the "
         "image to at most 1570x1570 (HxW; its mask too, nearest-neighbour)"),
    ],
)  # fmt: skip
def test_a_prediction_is_refused_by_the_memory_it_takes(img_scale, size, ratios, classes, refused, four_gib):
    """The check refused the first two (a view over 2048 pixels a side, the ONNX export's range): the scripts stopped
    ordinary multi-scale evaluations; what is refused is a prediction that would take all the memory: a view's
    tensors at its full size, beside the scores of every class at the image's own size."""
    test = InferenceSettings(img_scale=img_scale, ratios=ratios, flip=True)
    assert large_check(SimpleNamespace(num_classes=classes), test)(*size) == refused


@pytest.mark.parametrize(("size", "ratios", "flip"), [((6000, 8000), (1.0,), False), ((1600, 1600), (1.0, 2.0), True)])
def test_the_size_a_refusal_suggests_is_accepted(size, ratios, flip, four_gib):
    test = InferenceSettings(img_scale=(2048, 512), ratios=ratios, flip=flip)
    check = large_check(SimpleNamespace(num_classes=150), test)
    height, width = map(int, re.search(r"to at most (\d+)x(\d+)", check(*size)).groups())
    assert check(height, width) is None and check(height + 1, width + 1) is not None


@pytest.mark.parametrize(("budget", "refused"), [(8, False), (4, True)])
def test_a_phone_photo_of_150_classes_fits_a_16_gib_machine(budget, refused, monkeypatch):
    """A fixed 4 GiB refused an ADE20K model on a 12-megapixel photo (3000x4000: 6.9 GiB at its own size, 0.4 at its
    one view) on every machine, though it runs on one of 16 GiB, whose budget is half of it (8 GiB)."""
    monkeypatch.setattr(seg_views, "memory_budget", lambda: budget * 2**30)
    check = large_check(SimpleNamespace(num_classes=150), InferenceSettings(img_scale=(2048, 512), flip=False))
    problem = check(3000, 4000)
    assert (problem is not None) == refused, problem
    if refused:
        assert problem.startswith("a 3000x4000 (HxW) image's prediction holds 6.9 GiB at the image's own size"), problem
        assert "0.4 GiB at its 512x683 view (ratio 1.0), more than the 4 GiB an image's prediction may take" in problem


@pytest.mark.parametrize(
    ("page", "pages", "budget"),
    [
        (4096, 4 * 2**20, 8 * 2**30),  # 16 GiB: half of it
        (16384, 6 * 2**16, 4 * 2**30),  # 6 GiB (pages of 16 KiB, as Apple silicon's): no less than 4 GiB
        (None, None, 4 * 2**30),  # no os.sysconf (Windows): 4 GiB
    ],
)
def test_the_budget_is_half_the_machines_memory_and_4_gib_at_least(page, pages, budget, monkeypatch):
    if page is None:
        monkeypatch.delattr(seg_views.os, "sysconf")
    else:
        monkeypatch.setattr(seg_views.os, "sysconf", {"SC_PAGE_SIZE": page, "SC_PHYS_PAGES": pages}.__getitem__)
    assert seg_views.memory_budget.__wrapped__() == budget  # uncached: the cached value is this machine's


def test_a_refusal_names_where_its_budget_comes_from(monkeypatch):
    monkeypatch.setattr(seg_views, "memory_budget", lambda: 12 * 2**30)  # a 24 GiB machine
    problem = large_check(SimpleNamespace(num_classes=150), InferenceSettings(img_scale=(2048, 512)))(6000, 8000)
    limit = "more than the 12 GiB an image's prediction may take here (half this machine's memory)"
    assert f", {limit}, whatever --ratios: the image is too large for 150 classes at full resolution; " in problem


def test_an_image_with_a_view_thinner_than_the_patch_is_left_out_of_the_scores(tmp_path: Path):
    """A 60x1 image rescaled by the test settings stays 1 pixel high: the backbone takes no input thinner than its
    patch, so the evaluation leaves it out instead of failing, named by its path (the warning gave its size only)."""
    model, settings = Pointwise(), StepSettings(torch.device("cpu"))
    model.backbone = SimpleNamespace(feature_info=SimpleNamespace(reduction=lambda: [2, 4]))  # a 2-pixel patch
    pairs = []
    for name, size, label in (("thin", (60, 1), 0), ("wide", (30, 20), 1)):  # (width, height)
        Image.new("RGB", size).save(tmp_path / f"{name}.png")
        Image.new("L", size, label).save(tmp_path / f"{name}_mask.png")
        pairs.append(Pair(tmp_path / f"{name}.png", tmp_path / f"{name}_mask.png"))
    test = InferenceSettings(img_scale=(60, 20))
    normalize, labels = build_eval_transform((0.5,) * 3, (0.5,) * 3), Labels(tuple("abcd"), ((0, 0, 0),) * 4)
    dataset = SegmentationDataset(pairs, labels, normalize, evaluation=True, too_thin=thin_check(model, test))
    loader = DataLoader(dataset, batch_size=2, collate_fn=collate)
    thin = f"pair {pairs[0].image}, {pairs[0].mask} left out of the evaluation: a 1x60 (HxW) image would be rescaled"
    with pytest.warns(UserWarning, match=re.escape(thin)):
        counts, counted, left_out = confusion_of(model, loader, test, 4, 255, settings)
    assert counted == 1 and counts.sum() == 20 * 30 and model.seen == [(20, 30)]
    assert [(item.index, item.path) for item in left_out] == [(0, str(pairs[0].image))]


def _pointwise_pairs() -> tuple[Pointwise, torch.Tensor, torch.Tensor]:
    """A Pointwise model, 5 images [5, 3, 6, 8] and their masks [5, 6, 8] of 4 classes, row 0 ignored (seeded)."""
    torch.manual_seed(0)
    model, images, masks = Pointwise(), torch.randn(5, 3, 6, 8), torch.randint(0, 4, (5, 6, 8))
    masks[:, 0] = 255
    return model, images, masks


GONE = LeftOut(5, "gone.png", "unreadable")  # an image rank 1's shard left out


def _counted(model: nn.Module, loader: list, dist: DistInfo = SINGLE) -> tuple[torch.Tensor, int, list[LeftOut]]:
    """confusion_of over 4 classes (255 ignored), each image whole at its own size."""
    return confusion_of(model, loader, InferenceSettings((8, 6)), 4, 255, StepSettings(torch.device("cpu")), dist)


def _counting_rank(rank: int, port: int, reports: list[Path]) -> None:
    """One of two processes (gloo): counts its shard of :func:`_pointwise_pairs`, rank 0 3 pairs, rank 1 2 and
    ``GONE``, and reports the counts."""
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model, images, masks = _pointwise_pairs()
    loader = [(images[:3], masks[:3], [])] if rank == 0 else [(images[3:], masks[3:], [GONE])]
    counts, counted, left_out = _counted(model, loader, DistInfo(rank, 2))
    report_and_exit(reports, rank, json.dumps([counts.tolist(), counted, left_out]))


def test_two_processes_count_their_shards_as_one_process_counts_them_all(tmp_path: Path):
    """The confusion counts, the images counted and those left out are every process's, summed and gathered."""
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    forked_pair(_counting_rank, (reports,), timeout=30)
    model, images, masks = _pointwise_pairs()
    counts, counted, left_out = _counted(model, [(images, masks, [GONE])])
    assert counted == 5 and counts.sum() == 5 * 5 * 8 and left_out == [GONE]
    for report in reports:
        assert json.loads(report.read_text()) == [counts.tolist(), 5, [list(GONE)]]
