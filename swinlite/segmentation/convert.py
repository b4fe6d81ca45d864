"""UperNet checkpoints of mmsegmentation and Hugging Face -> swinlite's :class:`~.models.UperNet` layout.

=================  ===========================================  ==============================================
layout             backbone                                     heads
=================  ===========================================  ==============================================
``swinlite``       ``backbone.model.*`` (swinlite's Swin)       ``decode_head.*``, ``auxiliary_head.*``
``mmseg``          ``backbone.*`` (mmseg's Swin: ``stages``,    ConvModules ``<name>.conv`` / ``<name>.bn``,
                   ``w_msa``, ``norm0..3``; or Microsoft's      classifiers ``conv_seg``
                   Swin-Transformer-Semantic-Segmentation's:
                   the release's keys, ``norm0..3``)
``huggingface``    ``backbone.*`` (``SwinBackbone``:            ``<name>.conv`` / ``<name>.batch_norm``,
                   ``embeddings``, ``encoder``,                 classifiers ``classifier``
                   ``hidden_states_norms.stageN``)
=================  ===========================================  ==============================================

The backbone goes through :func:`swinlite.convert_state_dict` (the library's Swin converter), the heads are renamed:
a ConvModule's conv and norm are entries 0 and 1 of torchvision's ``Conv2dNormActivation`` here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from ..convert import convert_state_dict, without_wrapper_prefix
from ..io import unwrap_checkpoint

HEADS = ("decode_head.", "auxiliary_head.")
CLASSIFIERS = tuple(f"{head}classifier.{p}" for head in HEADS for p in ("weight", "bias"))


def upernet_layout(state_dict: Mapping[str, torch.Tensor]) -> str | None:
    """``"swinlite"``, ``"mmseg"`` or ``"huggingface"`` for an UperNet state dict (behind a wrapper's ``module.`` /
    ``_orig_mod.`` too: :func:`~swinlite.convert.without_wrapper_prefix`); None for one without heads."""
    keys = list(without_wrapper_prefix(state_dict))
    if not any(k.startswith("decode_head.") for k in keys):
        return None
    if any(k.startswith("backbone.model.") for k in keys):
        return "swinlite"
    if any(k.startswith("decode_head.conv_seg.") for k in keys):
        return "mmseg"
    return "huggingface"


def _head_key(key: str) -> str:
    key = re.sub(r"\.conv_seg\.", ".classifier.", key)
    key = re.sub(r"\.conv\.(weight|bias)$", r".0.\1", key)
    return re.sub(r"\.(bn|batch_norm)\.", ".1.", key)


def convert_upernet(checkpoint: Mapping[str, object]) -> dict[str, torch.Tensor] | None:
    """An UperNet checkpoint (state dict or training checkpoint, its keys maybe behind a wrapper's ``module.`` /
    ``_orig_mod.``) in swinlite's layout; None when it has no heads.

    Raises:
        ValueError: a backbone the library's converter does not know, or weights that are not finite.
    """
    state = without_wrapper_prefix(unwrap_checkpoint(checkpoint))
    layout = upernet_layout(state)
    if layout is None or layout == "swinlite":
        return None if layout is None else state
    backbone = {k.removeprefix("backbone."): v for k, v in state.items() if k.startswith("backbone.")}
    # the features-only model has no final norm (the last level's output norm stands for it) and no classifier
    swin = {k: v for k, v in convert_state_dict(backbone).items() if not k.startswith(("norm.", "head."))}
    heads = {_head_key(k): v for k, v in state.items() if k.startswith(HEADS)}
    return {f"backbone.model.{k}": v for k, v in swin.items()} | heads
