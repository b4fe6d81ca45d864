"""Random weights of a timm model, of the scale that shows a wrongly loaded tensor in the logits."""

from __future__ import annotations

from typing import Any

import timm
import torch


def random_state_dict(model_name: str, seed: int = 0, **kwargs: Any) -> dict[str, torch.Tensor]:
    """A timm model's state dict with random values, built on the meta device (no init cost).

    Linear / conv weights and biases ~ N(0, 0.02^2), norm weights ~ 1 + N(0, 0.1^2), bias tables ~ N(0, 1):
    outputs are of order one, so a wrongly loaded tensor shows in the logits.
    """
    shapes = timm.create_model(model_name, device="meta", **kwargs).state_dict()
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for key, value in shapes.items():
        noise = torch.randn(value.shape, generator=generator)
        if "norm" in key and key.endswith(".weight"):
            out[key] = 1 + 0.1 * noise
        elif key.endswith("relative_position_bias_table"):
            out[key] = noise
        else:
            out[key] = 0.02 * noise
    return out
