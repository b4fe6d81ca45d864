"""swinlite.hub: whether timm's pretrained weights can be had is known in seconds, with no retries.

The hub endpoint is pointed at a closed local port (nothing is ever downloaded); the cache is the module's
folder in the Hugging Face layout (``tests/conftest.py``'s ``no_network``), with ``HF_HUB_OFFLINE`` unset.
"""

import time

import pytest
import timm
import torch

from swinlite.hub import cached_weights, hub_unreachable, pretrained_kwargs

ABSENT = "swinlite_small_patch4_window7_224.ms_in1k"  # never cached here
TAG = "swinlite_tiny_patch4_window7_224.ms_in22k_ft_in1k"
TIMM_TAG = "swin_tiny_patch4_window7_224.ms_in22k_ft_in1k"
REDUCED = dict(embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8))


def test_unreachable_hub_and_nothing_cached_is_one_line_at_once(no_network):
    start = time.monotonic()
    assert "http://127.0.0.1:9 did not answer" in hub_unreachable()
    with pytest.raises(ValueError) as info:
        pretrained_kwargs(ABSENT, hint="or pass --checkpoint FILE")
    assert time.monotonic() - start < 10  # huggingface_hub's retries took about a minute
    message = str(info.value)
    assert "\n" not in message and "hub repo timm/swin_small_patch4_window7_224.ms_in1k" in message
    assert "HF_HUB_OFFLINE=1" in message
    assert message.endswith("; or pass --checkpoint FILE")


def test_unreachable_hub_with_cached_weights_loads_them_without_retrying(no_network):
    state = no_network.add_timm(TIMM_TAG, **REDUCED)
    kwargs = pretrained_kwargs(TAG)
    assert kwargs == {"pretrained_cfg_overlay": {"file": str(cached_weights(TAG))}}
    start = time.monotonic()
    model = timm.create_model(TAG, pretrained=True, **kwargs, **REDUCED)
    assert time.monotonic() - start < 10
    reference = timm.create_model(TIMM_TAG, **REDUCED)
    reference.load_state_dict(state)  # timm's own model of the cached file
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), reference.eval()(x), rtol=0, atol=1e-5)


def test_models_without_hub_weights_need_no_check(no_network):
    assert pretrained_kwargs("swinlite_pico_patch2_window4_32") == {}  # no published weights: timm says so itself
