"""accelerate() swaps the reference modules for their fast subclasses, keeping the state_dict; timm.create_model
applies it unless fast=False."""

import copy

import pytest
import timm
import torch
from pico import PICO

import swinlite  # noqa: F401  (registers the models)
from swinlite.fast import FAST_MODULES, FastSwinBlock, FastWindowAttention, accelerate
from swinlite.models.swin import SwinBlock


def classes(model: torch.nn.Module) -> set[type]:
    return {type(m) for m in model.modules()}


@pytest.mark.parametrize("name", [PICO, "swinlite_v2_pico_patch2_window4_32"])
def test_create_model_is_fast_by_default_and_fast_false_is_the_reference(name):
    fast, reference = timm.create_model(name), timm.create_model(name, fast=False)
    swapped = {k: v for k, v in FAST_MODULES.items() if k in classes(reference)}  # the block type's entries, Linear
    assert len(swapped) == (5 if "v2" in name else 4)  # V2's continuous position bias too
    assert set(swapped.values()) <= classes(fast) and not set(FAST_MODULES) & classes(fast)
    assert set(swapped) <= classes(reference) and not set(FAST_MODULES.values()) & classes(reference)
    assert fast.state_dict().keys() == reference.state_dict().keys()


def test_features_only_is_accelerated():
    features = timm.create_model(PICO, features_only=True)
    assert FastSwinBlock in classes(features) and SwinBlock not in classes(features)


def test_swap_keeps_parameters_buffers_and_mode():
    torch.manual_seed(0)
    model = timm.create_model(PICO, fast=False).eval()
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    assert accelerate(model) is model
    assert all(t is tensors[n] for n, t in [*model.named_parameters(), *model.named_buffers()])
    assert not any(m.training for m in model.modules())


def test_an_unknown_block_type_stays_on_the_reference_path():
    """A subclass (a new block type) keeps its own forward; only the exact classes of FAST_MODULES are swapped."""

    class NewBlock(SwinBlock):
        pass

    block = accelerate(NewBlock(8, 2, (4, 4), shift=True))
    assert type(block) is NewBlock and type(block.attn) is FastWindowAttention
    reference = NewBlock(8, 2, (4, 4), shift=True)
    reference.load_state_dict(copy.deepcopy(block.state_dict()))
    x = torch.randn(1, 6, 9, 8)
    torch.testing.assert_close(block(x), reference(x), rtol=1e-5, atol=1e-5)
