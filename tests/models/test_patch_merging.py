import pytest
import timm
import torch
from pico import PICO
from torch.profiler import ProfilerActivity, profile

from swinlite.models.swin import PatchMerging


def test_reference_concat_order_and_odd_padding():
    torch.manual_seed(0)
    merge = PatchMerging(6).eval()
    x = torch.randn(2, 5, 7, 6)  # odd sizes are zero-padded to 6 x 8
    xp = torch.nn.functional.pad(x, (0, 0, 0, 1, 0, 1))
    cat = torch.cat([xp[:, 0::2, 0::2], xp[:, 1::2, 0::2], xp[:, 0::2, 1::2], xp[:, 1::2, 1::2]], dim=-1)
    expected = merge.reduction(merge.norm(cat))
    out = merge(x)
    assert out.shape == (2, 3, 4, 12)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize("size, copies", [((32, 32), 0), ((31, 32), 1)])
def test_padding_copies_only_what_it_pads(size, copies):
    """Images of whole patches and maps of even sides go on unpadded: F.pad by nothing copies (it copied the images
    twice, the patch embedding's own padding after swinlite's, and the map at each of the three merges). 31x32 pads
    the images once (patch 2), then every map is whole (16x16 in windows of 4, 8x8, 4x4, 2x2)."""
    model = timm.create_model(PICO).eval()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        model(torch.randn(1, 3, *size))
    pads = sum(e.count for e in prof.key_averages() if e.key == "aten::constant_pad_nd")
    assert pads == copies
