"""Swin-V2 in half precision: float16 and bfloat16 autocast give finite outputs and gradients that follow float32's,
at a size that pads (zero vectors as keys: float16's normalisation floor). Training in bfloat16 against float32 on
the demo data: docs/models.md (not a CI test: minutes)."""

import pytest
import timm
import torch
import torch.nn.functional as F

import swinlite  # noqa: F401  (registers the models)

V2_PICO = "swinlite_v2_pico_patch2_window4_32"
BATCH = 16  # as large as a CI test of a few seconds allows


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    """Pico V2 with every weight moved off its initialisation (post-norms at zero would hide the blocks)."""
    torch.manual_seed(0)
    model = timm.create_model(V2_PICO)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _forward_backward(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype | None):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
        out = model(x)
        loss = F.cross_entropy(out, y)
    loss.backward()
    return out.float(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_forward_and_backward_are_finite_and_follow_float32(model, dtype):
    x, y = torch.randn(BATCH, 3, 37, 45), torch.randint(0, 10, (BATCH,))  # every stage pads
    model.train()
    ref, ref_grads = _forward_backward(model, x, y, None)
    out, grads = _forward_backward(model, x, y, dtype)
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads.values())
    torch.testing.assert_close(out, ref, rtol=0.05, atol=0.05)
    flat, ref_flat = (torch.cat([g.flatten() for g in gs.values()]) for gs in (grads, ref_grads))
    assert F.cosine_similarity(flat, ref_flat, dim=0) > 0.99
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):  # the fast path's SDPA kernel
        torch.testing.assert_close(model(x).float(), ref, rtol=0.05, atol=0.05)
