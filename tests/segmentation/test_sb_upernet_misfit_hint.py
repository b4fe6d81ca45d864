"""A whole UperNet file that does not fit gets the hint on the settings to match by the kind of load_strict's refusal
(weights.WeightsMismatchError), not by its text: a file refused otherwise gets no such hint, whatever its path says."""

import pytest
import torch
from pico import PICO

from swinlite.io import save_safetensors
from swinlite.segmentation import SegModelConfig, build_upernet
from swinlite.weights import WeightsMismatchError, load_strict

HEAD = {"head_channels": 8, "aux_channels": 8, "pool_scales": (1, 2)}
HINT = "an UperNet's weights load whole into an UperNet built alike"


def _upernet_file(path, **changes: float) -> str:
    state = build_upernet(SegModelConfig(name=PICO, **HEAD), 3).state_dict()
    for key, value in changes.items():
        state[key] = torch.full_like(state[key], value)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_safetensors(path, state, {"task": "segmentation"})
    return str(path)


def test_a_misfit_is_a_weights_mismatch_error_a_value_error_still():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(WeightsMismatchError, match=r"^w\.safetensors does not fit Linear exactly; ") as caught:
        load_strict(model, {"weight": torch.zeros(3, 2), "bias": torch.zeros(2)}, "w.safetensors")
    assert isinstance(caught.value, ValueError)


def test_a_wider_head_is_refused_with_the_settings_to_match(tmp_path):
    wider = SegModelConfig(name=PICO, pretrained=_upernet_file(tmp_path / "seg.safetensors"), **{**HEAD,
                           "head_channels": 16})  # fmt: skip
    with pytest.raises(ValueError, match=f"does not fit UperNet exactly; .*; {HINT}"):
        build_upernet(wider, 3)


def test_other_refusals_get_no_hint_whatever_the_path_says(tmp_path):
    """The hint was chosen by "does not fit" in the message: a file in a folder so named, refused for its NaN
    weights, was told to build the UperNet alike."""
    path = _upernet_file(tmp_path / "does not fit" / "seg.safetensors", **{"decode_head.classifier.weight": torch.nan})
    with pytest.raises(ValueError, match="holds NaN or infinite values") as caught:
        build_upernet(SegModelConfig(name=PICO, pretrained=path, **HEAD), 3)
    assert HINT not in str(caught.value)
