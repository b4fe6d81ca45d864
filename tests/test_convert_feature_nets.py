"""A timm Swin built with ``features_only=True`` saves its weights behind timm's ``FeatureListNet`` (``layers_N`` for
``layers.N``, no final norm, no classifier): a swinlite features-only model loads them and computes timm's feature
maps; a classifier refuses them, naming the cause."""

from pathlib import Path

import pytest
import timm
import torch
from scriptkit import run_script

import swinlite

SMALL = dict(depths=(1, 1, 1, 1), embed_dim=16, num_heads=(1, 2, 2, 4))


def _saved_timm_features(name: str, img_size: int, path: Path, **kwargs) -> torch.nn.Module:
    """timm's features-only ``name`` at reduced depth and width with random weights (norms, biases and tables too: a
    weight left at its initial value shows), its state dict saved to ``path``."""
    timm_net = timm.create_model(name, features_only=True, img_size=img_size, **SMALL, **kwargs).eval()
    generator = torch.Generator().manual_seed(0)
    state = {k: 0.2 * torch.randn(v.shape, generator=generator) for k, v in timm_net.state_dict().items()}
    timm_net.load_state_dict(state)
    torch.save(timm_net.state_dict(), path)
    return timm_net


@pytest.mark.parametrize(
    "timm_name, name, img_size, levels",
    [
        ("swin_tiny_patch4_window7_224", "swinlite_tiny_patch4_window7_224", 56, {}),  # stages 2, 3: windows 4, 2
        ("swinv2_tiny_window8_256", "swinlite_v2_tiny_window8_256", 32, {}),
        # fewer levels: timm's file has no layers_3, which the wrapper prunes from swinlite's model too
        ("swin_tiny_patch4_window7_224", "swinlite_tiny_patch4_window7_224", 56, dict(out_indices=(0, 1, 2))),
    ],
)
def test_features_only_loads_timm_features_only_weights(
    tmp_path: Path, timm_name: str, name: str, img_size: int, levels: dict
):
    path = tmp_path / "features.pth"
    timm_net = _saved_timm_features(timm_name, img_size, path, **levels)
    assert any(k.startswith("layers_0.blocks.") for k in torch.load(path))  # timm's FeatureListNet's own layout
    assert swinlite.detect_layout(torch.load(path)) == "timm-features"
    model = timm.create_model(
        name,
        features_only=True,
        img_size=img_size,
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(path)),
        **SMALL,
        **levels,
    ).eval()
    x = torch.randn(1, 3, img_size, img_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want, got = timm_net(x), model(x)  # timm's NHWC, swinlite's NCHW
    for level, (w, g) in enumerate(zip(want, got, strict=True)):
        torch.testing.assert_close(g, w.permute(0, 3, 1, 2), atol=1e-5, rtol=1e-5, msg=f"level {level}")


def test_classifier_refuses_timm_features_only_weights(tmp_path: Path):
    """Also once converted (convert_checkpoint.py records the layout): that file was said to be "a features-only
    Swin's weights (a swinlite detection or segmentation run's trained with model.kwargs.out_norm=false)"."""
    path = tmp_path / "features.pth"
    _saved_timm_features("swin_tiny_patch4_window7_224", 56, path)
    cause = r"no final norm \(norm\.\*\).*timm Swin's built with features_only=True"
    with pytest.raises(ValueError, match=cause):
        timm.create_model(
            "swinlite_tiny_patch4_window7_224",
            img_size=56,
            pretrained=True,
            pretrained_cfg_overlay=dict(file=str(path)),
            **SMALL,
        )
    with pytest.raises(ValueError, match=cause):
        swinlite.load_checkpoint(timm.create_model("swinlite_tiny_patch4_window7_224", img_size=56, **SMALL), path)
    converted = tmp_path / "features.safetensors"
    assert run_script("convert_checkpoint", [path, converted]) == 0
    with pytest.raises(ValueError, match=cause):  # extract_features.py --checkpoint, predict.py, ... read it so
        swinlite.load_model(converted, "swinlite_tiny_patch4_window7_224", img_size=56, **SMALL)
