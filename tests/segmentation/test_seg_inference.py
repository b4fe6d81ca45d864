"""Test-time prediction: sliding windows placed and averaged as mmsegmentation places them, several scales and the
mirrored image averaged, everything back at the image's own size. A per-pixel model (a 1x1 convolution) gives the
same scores whole or by windows, and mirrored or not: the windows' bookkeeping is all that is tested."""

import pytest
import torch
from torch import nn

from swinlite.engine.loop import StepSettings
from swinlite.segmentation.inference import InferenceSettings, confusion_of, predict_scores, slide_logits
from swinlite.segmentation.models import SegOutput


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


def test_the_test_size_follows_img_scale_in_either_orientation():
    model = Pointwise()
    with torch.no_grad():
        predict_scores(model, torch.randn(1, 3, 300, 200), InferenceSettings(img_scale=(2048, 512)))
        slide = InferenceSettings(img_scale=(2048, 512), mode="slide", crop_size=(512, 512), stride=(341, 341))
        predict_scores(model, torch.randn(1, 3, 200, 300), slide)
    assert model.seen[0] == (768, 512)  # the short side to 512
    assert model.seen[1:] == [(512, 512), (512, 512)]  # 512 x 768 by two 512 windows, 256 apart (stride 341)


def test_an_image_with_a_view_thinner_than_the_patch_is_left_out_of_the_scores():
    """A 60x1 image rescaled by the test settings stays 1 pixel high: the backbone takes no input thinner than its
    patch, so the evaluation leaves it out (named by its size) instead of failing."""
    model, settings = Pointwise(), StepSettings(torch.device("cpu"))
    images = [torch.randn(3, 1, 60), torch.randn(3, 20, 30)]
    masks = [torch.zeros(1, 60, dtype=torch.int64), torch.ones(20, 30, dtype=torch.int64)]
    test = InferenceSettings(img_scale=(60, 20))
    with pytest.warns(UserWarning, match=r"1 image\(s\) left out of the evaluation: a 60x1 image would be rescaled"):
        counts, counted = confusion_of(model, [(images, masks)], test, 4, 255, settings, min_side=2)
    assert counted == 1 and counts.sum() == 20 * 30 and model.seen == [(20, 30)]
