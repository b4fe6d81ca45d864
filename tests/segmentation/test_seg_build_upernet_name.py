"""build_upernet takes a model name, as build_fpn_backbone does, or a SegModelConfig; anything else is a TypeError."""

import pytest
import torch
from pico import PICO

from swinlite.segmentation import build_upernet
from swinlite.segmentation.config import SegModelConfig


def test_a_model_name_builds_the_upernet_of_the_config_defaults():
    """build_upernet(PICO, num_classes=5) was "AttributeError: 'str' object has no attribute 'kwargs'"."""
    model = build_upernet(PICO, num_classes=5).eval()
    defaults = SegModelConfig()
    assert model.decode_head.classifier.in_channels == defaults.head_channels
    with torch.no_grad():
        assert model(torch.zeros(1, 3, 32, 32)).logits.shape == (1, 5, 32, 32)


def test_anything_else_is_a_type_error_naming_what_is_expected():
    with pytest.raises(TypeError, match=r"^build_upernet expects a model name \(e\.g\. '.+'\) or a SegModelConfig, "
                                        r"got dict$"):  # fmt: skip
        build_upernet({"name": PICO}, num_classes=5)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "said"),
    [
        (("resnet18", 3), {}, ValueError, "unknown model"),  # was: ResNet.__init__() ... unexpected keyword 'out_norm'
        ((PICO, 0), {}, ValueError, "num_classes must be a whole number of at least 1, got 0"),  # deep in torch
        ((PICO, "5"), {}, ValueError, "num_classes must be a whole number of at least 1, got '5'"),
        # taken: the names only compared with a file's, where one is loaded
        ((PICO, 3, ["a", "b"]), {}, ValueError, r"2 class names \(classes\) for num_classes=3: one name"),
        ((SegModelConfig(name=PICO), 3), {"pretrained": True}, TypeError, "give pretrained in the SegModelConfig"),
        # ignored: all four levels still used; features_only=True: AttributeError 'SwinFeatureBody' ... 'layers'
        ((PICO, 5), {"out_indices": (1, 2, 3)}, ValueError, r"^model_kwargs\.out_indices: set by build_upernet "
         r"\(UperNet takes every Swin level, as NCHW maps\), not by model_kwargs$"),
        ((PICO, 5), {"features_only": True}, ValueError, r"^model_kwargs\.features_only: set by build_upernet \("),
        ((PICO, 5), {"output_fmt": "NHWC"}, ValueError, r"^model_kwargs\.output_fmt: set by build_upernet \("),
        ((SegModelConfig(name=PICO, kwargs={"num_classes": 3}), 5), {}, ValueError,  # timm's unused classifier
         r"^model\.kwargs\.num_classes: set by build_upernet's num_classes, not by model\.kwargs$"),
        ((SegModelConfig(name=PICO, kwargs={"pretrained": False}), 5), {}, ValueError,  # "got multiple values"
         r"^model\.kwargs\.pretrained: set by the config's pretrained \(SegModelConfig\.pretrained\)"),
    ],
)  # fmt: skip
def test_a_call_it_cannot_serve_is_refused_first(args, kwargs, error, said):
    with pytest.raises(error, match=said):
        build_upernet(*args, **kwargs)


def test_pretrained_goes_with_a_name_as_timm_create_model_takes_it():
    """build_upernet(name, n, pretrained=False) said "create_model() got multiple values for keyword argument
    'pretrained'"."""
    assert build_upernet(PICO, 3, pretrained=False).decode_head.classifier.out_channels == 3
