"""swinlite.segmentation exports SegModelConfig beside build_upernet, which takes it (docs/segmentation.md imports both
from there)."""

import swinlite.segmentation
from swinlite.segmentation import SegModelConfig, build_upernet
from swinlite.segmentation.config import SegModelConfig as ConfigModule


def test_seg_model_config_is_exported_with_build_upernet():
    assert SegModelConfig is ConfigModule
    assert {"SegModelConfig", "build_upernet"} <= set(swinlite.segmentation.__all__)


def test_the_exported_config_builds_an_upernet():
    model = build_upernet(SegModelConfig(name="swinlite_pico_patch2_window4_32", head_channels=8, aux_weight=0), 2)
    assert model.decode_head.classifier.in_channels == 8
    assert model.auxiliary_head is None
