"""build_fpn_backbone(checkpoint=<an ImageNet classifier's file>) warned "dropping the checkpoint's classifier head.fc:
the model has none" on every such file; the features-only backbone has no classifier to load it into, and the
segmentation backbone's loader drops it quietly."""

import warnings

import timm
import torch

from swinlite.detection import build_fpn_backbone

LITE = "swinlite_tiny_patch4_window7_224"
REDUCED = dict(embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8))


def test_an_imagenet_file_loads_without_a_classifier_note(tmp_path):
    source = timm.create_model(LITE, **REDUCED)
    path = tmp_path / "imagenet.pth"
    torch.save(source.state_dict(), path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backbone = build_fpn_backbone(LITE, checkpoint=str(path), **REDUCED)
    assert not [w for w in caught if "classifier" in str(w.message)], [str(w.message) for w in caught]
    swin = backbone.body.model
    torch.testing.assert_close(swin.layers[3].blocks[0].attn.qkv.weight, source.layers[3].blocks[0].attn.qkv.weight)
