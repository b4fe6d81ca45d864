"""Large-scale jitter's crop and the boxes of Mask R-CNN: recomputed from the cropped masks."""

import pytest
import torch
from torchvision import tv_tensors
from torchvision.ops import masks_to_boxes

from swinlite.detection.config import DetDataConfig
from swinlite.detection.transforms import build_train_transform

SIDE = 64  # the image; the crop is a 32 px square of it


def _masks() -> torch.Tensor:
    """[3, 64, 64]: a triangle (x + y < 48), a small square in the far corner, a square in the middle."""
    y, x = torch.meshgrid(torch.arange(SIDE), torch.arange(SIDE), indexing="ij")
    corner = (x >= 56) & (y >= 56)
    middle = (x >= 20) & (x < 44) & (y >= 20) & (y < 44)
    return torch.stack([x + y < 48, corner, middle]).to(torch.uint8)


def _sample(masks: bool) -> tuple[tv_tensors.Image, dict[str, torch.Tensor]]:
    """An image whose channels 0 and 1 hold each pixel's x and y (so the crop's offset can be read back); the corner
    object's box is the whole image, as an annotation's box may be larger than its mask."""
    y, x = torch.meshgrid(torch.arange(SIDE), torch.arange(SIDE), indexing="ij")
    image = tv_tensors.Image(torch.stack([x, y, torch.zeros_like(x)]).to(torch.uint8))
    boxes = [[0, 0, 48, 48], [0, 0, 64, 64], [20, 20, 44, 44]]
    target = {
        "boxes": tv_tensors.BoundingBoxes(
            torch.tensor(boxes, dtype=torch.float32), format="XYXY", canvas_size=(64, 64)
        ),
        "labels": torch.tensor([1, 2, 3]),
    }
    if masks:
        target["masks"] = tv_tensors.Mask(_masks())
    return image, target


def _lsj_at_scale_one():
    """The lsj train transform with the jitter fixed at scale 1 (the 64 px image stays 64 px) and no flip."""
    transform = build_train_transform(DetDataConfig(lsj=True, test_size=32, hflip=0.0, mean=(0.5,) * 3))
    transform.transforms[1].scale_range = (2.0, 2.0)  # 2 x the 32 px square: 64 px
    return transform


def _offset(image: torch.Tensor) -> tuple[int, int]:
    """(left, top) of the crop, read from the x and y the image's channels hold."""
    return round(float(image[0, 0, 0]) * 255), round(float(image[1, 0, 0]) * 255)


@pytest.mark.parametrize("seed", range(12))
def test_lsj_boxes_of_a_sample_with_masks_are_the_cropped_masks_extents(seed: int):
    """A crop that cut an object left its box at the object's full extent along the uncut side (the triangle cut at
    x = 10 still had its box reach y = 48); a mask the crop emptied kept its object (the corner square's box)."""
    torch.manual_seed(seed)
    image, target = _lsj_at_scale_one()(*_sample(masks=True))
    left, top = _offset(image)
    cropped = _masks()[:, top : top + 32, left : left + 32]
    kept = cropped.flatten(1).bool().any(dim=1)
    assert target["labels"].tolist() == torch.tensor([1, 2, 3])[kept].tolist()
    torch.testing.assert_close(target["masks"], cropped[kept])
    extents = masks_to_boxes(cropped[kept]) + torch.tensor([0.0, 0.0, 1.0, 1.0])
    torch.testing.assert_close(target["boxes"], extents)


@pytest.mark.parametrize("seed", range(4))
def test_lsj_boxes_of_a_sample_without_masks_are_only_clamped(seed: int):
    """A box detector has no masks to take boxes from: its boxes are the crop's (shifted, clamped to the crop)."""
    torch.manual_seed(seed)
    image, target = _lsj_at_scale_one()(*_sample(masks=False))
    left, top = _offset(image)
    boxes = torch.tensor([[0, 0, 48, 48], [0, 0, 64, 64], [20, 20, 44, 44]], dtype=torch.float32)
    shifted = (boxes - torch.tensor([left, top, left, top])).clamp(0, 32)
    kept = (shifted[:, 2] - shifted[:, 0] >= 1) & (shifted[:, 3] - shifted[:, 1] >= 1)
    torch.testing.assert_close(target["boxes"], shifted[kept])
    assert target["labels"].tolist() == torch.tensor([1, 2, 3])[kept].tolist()


@pytest.mark.parametrize("seed", range(2))
def test_lsj_pads_masks_with_no_object(seed: int):
    """The jitter shrinks the 64 px image to 32 px, which the crop pads (a random margin, the mean colour) to the 64 px
    square: the masks are padded with 0, each object's box its scaled mask's extent moved by that margin."""
    transform = build_train_transform(DetDataConfig(lsj=True, test_size=64, hflip=0.0, mean=(0.5,) * 3))
    transform.transforms[1].scale_range = (0.5, 0.5)  # a 32 px image: the 32 px margins around it fit every crop
    torch.manual_seed(seed)
    image, target = transform(*_sample(masks=True))
    top, left = (image[2] == 0).nonzero().min(dim=0).values.tolist()  # the image's channel 2 is 0, the margin's 0.5
    expected = torch.zeros(3, 64, 64, dtype=torch.uint8)
    expected[:, top : top + 32, left : left + 32] = _masks()[:, ::2, ::2]  # nearest neighbour: pixel 2i of 64
    torch.testing.assert_close(target["masks"], expected)
    boxes = torch.tensor([[0.0, 0, 24, 24], [28, 28, 32, 32], [10, 10, 22, 22]])  # the masks' extents at 32 px
    torch.testing.assert_close(target["boxes"], boxes + torch.tensor([left, top, left, top]))
