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
