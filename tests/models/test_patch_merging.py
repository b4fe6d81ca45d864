import torch

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
