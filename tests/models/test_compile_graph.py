"""torch.compile traces a whole swinlite model, fast or reference, into one graph, in eval and in training (dynamo
only, no codegen)."""

import warnings

import pytest
import timm
import torch

import swinlite  # noqa: F401  (registers the models)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("train", [False, True])
def test_no_graph_breaks(train, fast):
    torch._dynamo.reset()
    model = timm.create_model("swinlite_pico_patch2_window4_32", fast=fast).train(train)
    x = torch.randn(2, 3, 36, 28)  # padded windows and shifts at every stage
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0, [str(r.reason) for r in explanation.break_reasons]
    assert explanation.graph_count == 1
