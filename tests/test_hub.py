"""swinlite.hub: whether timm's pretrained weights can be had is known in seconds, with no retries (also inside
timm.create_model(pretrained=True) of the swinlite variants).

The hub endpoint is pointed at a closed local port (nothing is ever downloaded); the cache is the module's
folder in the Hugging Face layout (``tests/conftest.py``'s ``no_network``), with ``HF_HUB_OFFLINE`` unset.
"""

import time

import huggingface_hub.constants
import pytest
import timm
import torch
from safetensors.torch import save_file
from timm.models._registry import _model_pretrained_cfgs
from weightkit import random_state_dict

from swinlite.hub import cached_weights, hub_unreachable, pretrained_kwargs
from swinlite.models.pretrained import WeightsUnavailableError

ABSENT = "swinlite_small_patch4_window7_224.ms_in1k"  # never cached here
TAG = "swinlite_tiny_patch4_window7_224.ms_in22k_ft_in1k"
TIMM_TAG = "swin_tiny_patch4_window7_224.ms_in22k_ft_in1k"
V2_ABSENT = "swinlite_v2_small_window8_256.ms_in1k"
V2_TAG = "swinlite_v2_tiny_window8_256.ms_in1k"
V2_TIMM_TAG = "swinv2_tiny_window8_256.ms_in1k"
AT_REVISION = "swinlite_tiny_patch4_window7_224.ms_in1k"  # its hub id given an @revision below; cached by that test
TIMM_AT_REVISION = "swin_tiny_patch4_window7_224.ms_in1k"
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


def test_offline_and_nothing_cached_is_one_line_naming_hf_hub_offline(no_network, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match=r"^the pretrained weights of .* cannot be downloaded: HF_HUB_OFFLINE is set; "
                                         r"run once with network access .*; or pass --checkpoint FILE$"):  # fmt: skip
        pretrained_kwargs(ABSENT, hint="or pass --checkpoint FILE")


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


@pytest.mark.parametrize(
    ("name", "repo"),
    [(ABSENT, "timm/swin_small_patch4_window7_224.ms_in1k"), (V2_ABSENT, "timm/swinv2_small_window8_256.ms_in1k")],
)
def test_create_model_without_network_fails_at_once_naming_the_repo(no_network, name, repo):
    """timm.create_model(pretrained=True) itself asks the hub once (swinlite.models.variants._create)."""
    start = time.monotonic()
    with pytest.raises(WeightsUnavailableError) as info:
        timm.create_model(name, pretrained=True, **REDUCED)
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert "\n" not in message and f"hub repo {repo}" in message and "did not answer" in message


def test_create_model_without_network_loads_the_cached_weights_at_once(no_network):
    state = no_network.add_timm(V2_TIMM_TAG, **REDUCED)
    start = time.monotonic()
    model = timm.create_model(V2_TAG, pretrained=True, **REDUCED)
    assert time.monotonic() - start < 10
    reference = timm.create_model(V2_TIMM_TAG, **REDUCED)
    reference.load_state_dict(state)  # timm's own model of the cached file
    x = torch.randn(1, 3, 256, 256)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), reference.eval()(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE", "hub-unreachable"])
def test_a_hub_id_at_a_revision_loads_that_revisions_cached_weights(no_network, monkeypatch, offline):
    """timm reads a hub id ``repo@revision`` as that revision of the repo (its ``hf_split``): a cache whose refs/main
    and refs/v2 name two snapshots gives the v2 one for ``repo@v2``, whether timm finds it (HF_HUB_OFFLINE=1) or
    swinlite does (the hub unreachable: the file it hands timm). No registered tag has a revision today: one is
    given it here."""
    repo = timm.models.get_pretrained_cfg(TIMM_AT_REVISION).hf_hub_id
    main = no_network.add(repo, random_state_dict(TIMM_AT_REVISION, 0, **REDUCED))  # .../snapshots/<commit>/<file>
    v2, commit = random_state_dict(TIMM_AT_REVISION, 1, **REDUCED), "b" * 40
    (main.parents[1] / commit).mkdir(exist_ok=True)
    save_file({k: v.contiguous() for k, v in v2.items()}, main.parents[1] / commit / main.name)
    (main.parents[2] / "refs" / "v2").write_text(commit)
    monkeypatch.setattr(_model_pretrained_cfgs[AT_REVISION], "hf_hub_id", f"{repo}@v2")
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    model = timm.create_model(AT_REVISION, pretrained=True, **REDUCED)
    assert torch.equal(model.patch_embed.proj.weight, v2["patch_embed.proj.weight"])  # main's is seed 0's
