"""Convert Swin checkpoints from the layouts users hold to swinlite's, and swinlite's back to timm's
(:func:`to_timm_state_dict`).

Supported layouts, detected from the keys:

- ``swinlite``: this package's own (returned as is).
- ``timm``: timm's ``swin_transformer`` and ``swin_transformer_v2`` (downsample at the start of a stage,
  ``head.fc.*``; V2's ``attn.cpb_mlp`` is swinlite's ``attn.rel_pos.mlp``).
- ``timm-features``: the same models built with ``features_only=True`` (timm's ``FeatureListNet``, which flattens
  ``layers.N`` to ``layers_N`` and holds no final ``norm`` and no ``head``).
- ``microsoft``: the official release, V1 and V2 (``{"model": ...}``, downsample at the *end* of a stage,
  ``head.*``, persistent ``relative_position_index`` / ``relative_coords_table`` / ``attn_mask`` buffers).
- ``microsoft-backbone``: the checkpoints of its detection and segmentation repos (Swin-Transformer-Object-Detection,
  Swin-Transformer-Semantic-Segmentation: mmdet 2 / mmseg 0.x), the release's keys behind ``backbone.``, per-level
  ``norm0..3``, no final ``norm``; necks and heads dropped, as mmdet's.
- ``torchvision``: ``swin_t/s/b`` and ``swin_v2_t/s/b`` (``features.N...``; V2's ``qkv.bias`` becomes
  ``q_bias`` and ``v_bias``: torchvision zeroes its key part in every forward).
- ``mmdet``: mmdet / mmpretrain ``SwinTransformer`` (``backbone.stages.i.blocks.j.attn.w_msa.*``,
  ``ffn.layers.*``, ``patch_embed.projection``, per-level ``norm0..3``; downsample at the end of a
  stage, in ``nn.Unfold`` channel order) and mmpretrain's ``SwinTransformerV2`` (``attn.w_msa.cpb_mlp``,
  ``logit_scale``, ``q_bias`` / ``v_bias``; downsample at the start of a stage, its norm after the reduction). Keys
  outside ``backbone.`` (necks, detection heads) are dropped, except an mmpretrain classifier ``head.fc``.
- ``huggingface``: transformers ``SwinModel`` / ``SwinForImageClassification`` (``swin.`` prefix,
  separate ``query``/``key``/``value``) and ``SwinBackbone`` (``hidden_states_norms.stageN``), as saved
  by transformers 4 or held in memory by transformers 5 (``attention.q_proj``/``k_proj``/``v_proj``/``o_proj``,
  ``mlp.fc1``/``fc2``: the renames of its own ``conversion_mapping``). A ``SwinBackbone`` (an UperNet's too) runs its
  Swin with ``always_partition=True``: it keeps the shift in a stage whose map fits one window, which swinlite drops,
  so those levels differ from its ``feature_maps`` (a warning says so: :data:`SWIN_BACKBONE_NOTE`).
- ``swinlite-detection`` / ``swinlite-segmentation``: the weights of a swinlite detection or segmentation run
  (``scripts/train_detection.py``'s, ``train_segmentation.py``'s): their Swin, in swinlite's layout behind
  ``backbone.body.model.`` / ``backbone.model.`` (:data:`RUN_SWIN_PREFIXES`); the FPN and heads are dropped, as
  mmdet's necks and heads are.
- ``swinlite-fpn-backbone``: a :class:`~swinlite.fpn.SwinFPNBackbone`'s own state dict (``build_fpn_backbone(...)``
  saved alone): its Swin behind ``body.model.``; the FPN (``fpn.*``) is dropped here, and loaded by
  :func:`~swinlite.fpn.build_fpn_backbone`.
- ``swinlite-features``: a swinlite model built with ``features_only=True`` (:class:`~swinlite.models.variants.
  SwinFeatureBody`) saved alone: its Swin behind ``model.`` (no final norm, no classifier; output norms only where
  built with ``out_norm=True``).

Per-level output norms (mmdet's and Microsoft's detection repos' ``normI``, Hugging Face ``hidden_states_norms``) map
to ``out_norms.I`` (models built with ``out_norm=True``); the last level's also becomes the final ``norm`` (that of a
swinlite run's features-only Swin too, which has none). A checkpoint without one (a run trained with
``model.kwargs.out_norm=false``, a backbone saved without its last stage's norm) loads into a features-only Swin,
pruned of the final norm it does not use (detection's and segmentation's backbones); a model that uses it refuses it,
saying why (:func:`missing_final_norm`).

A Swin-V2 file's own coordinates (``relative_coords_table``: the release's, torchvision's, mmpretrain's) state the
window it was trained at and the one they were normalised by: swinlite builds its own, and where a conversion is for a
model whose coordinates differ, a warning names the ``window_size`` and ``pretrained_window_sizes`` the file implies
(:func:`_other_coords_note`).

Any layout may come as saved from a ``DistributedDataParallel`` / ``DataParallel`` or ``torch.compile`` wrapper,
every key behind ``module.`` or ``_orig_mod.``, or from a ``torch.optim.swa_utils.AveragedModel`` (EMA weights, as
torchvision's reference ``train.py`` saves them: ``n_averaged`` beside ``module.*``) (:func:`without_wrapper_prefix`).
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import timm
import torch
import torch.nn.functional as F
from timm.layers import resample_patch_embed
from timm.layers import resize_rel_pos_bias_table as timm_resize_rel_pos_bias_table
from torch import nn

from .io import StateDict, check_not_resume_state, holds_state_dict, resume_task_in, unwrap_checkpoint
from .wording import counted

# the libraries a conversion's warning passes through on its way from the user's call (timm's pretrained loading,
# torch's load_state_dict and its pre-hooks)
_LIBRARY_DIRS = tuple(str(Path(m.__file__).parent) + os.sep for m in (sys.modules[__package__], timm, torch))


def warn_at_caller(message: str) -> None:
    """``warnings.warn(message)`` naming the first frame outside swinlite, timm and torch: the user's line calling
    ``convert_state_dict``, ``timm.create_model(..., pretrained=True)`` or ``load_state_dict`` (Python 3.12's
    ``skip_file_prefixes`` does this, but not on 3.11)."""
    frame, level = sys._getframe(), 1
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, stacklevel=level if frame is not None else 1)


FIRST_CONV = "patch_embed.proj.weight"  # the patch embedding: its input channels are in_chans
# Buffers some layouts save that swinlite rebuilds itself.
_DROPPED = ("relative_position_index", "attn_mask")
# a Swin-V2 block's coordinates, as the Microsoft release, torchvision and mmpretrain save them ((1, 2Wh-1, 2Ww-1, 2),
# renamed with the block's keys): swinlite builds its own (rel_pos.coords), but compares them first, for they record
# the window the file was trained at and the one its coordinates were normalised by (:func:`_other_coords_note`)
COORDS_TABLE = "attn.relative_coords_table"
# before every key of a state dict saved from a wrapper: (Distributed)DataParallel's, torch.compile's
WRAPPER_PREFIXES = ("module.", "_orig_mod.")
# the one key torch.optim.swa_utils.AveragedModel's state dict holds beside its module's (behind module.): the count
# of models it averaged
AVERAGED_COUNT = "n_averaged"
# layout -> where the weights of a swinlite detection / segmentation run, of a bare SwinFPNBackbone or of a bare
# features_only model hold their Swin (a features-only one: no final norm, no classifier); every other key is the FPN
# and heads. Read where the Swin's stages follow the prefix: a Swin checkpoint's own keys never start with one
# (the Microsoft release's "model" is a key of the file holding the state dict, unwrapped before)
RUN_SWIN_PREFIXES = {
    "swinlite-detection": "backbone.body.model.",
    "swinlite-segmentation": "backbone.model.",
    "swinlite-fpn-backbone": "body.model.",
    "swinlite-features": "model.",
}


def without_wrapper_prefix(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """``state_dict`` without the ``module.`` a ``DistributedDataParallel`` / ``DataParallel`` wrapper, or the
    ``_orig_mod.`` a ``torch.compile`` wrapper, puts before every key (a training script of another code base that
    saved the wrapper, not the model; both nest, in either order).

    An ``AveragedModel``'s (``torch.optim.swa_utils``: torchvision's reference ``train.py`` saves its ``--model-ema``
    weights so, as ``model_ema``) is one such wrapper: its module's keys behind ``module.``, beside its count
    ``n_averaged`` (:data:`AVERAGED_COUNT`), which is dropped, also where timm's loader removed the prefix before.

    Only a prefix every key has is removed: a state dict where some keys lack it is no wrapper's, and stays as it
    is (for the key checks to name).
    """
    unwrapped = dict(state_dict)
    if len(unwrapped) > 1:  # no Swin layout has the key: an AveragedModel's module beside it
        unwrapped.pop(AVERAGED_COUNT, None)
    while unwrapped and (
        prefix := next((p for p in WRAPPER_PREFIXES if all(k.startswith(p) for k in unwrapped)), None)
    ):
        unwrapped = {k.removeprefix(prefix): v for k, v in unwrapped.items()}
    return unwrapped


def detect_layout(state_dict: Mapping[str, torch.Tensor]) -> str:
    """Name the layout of a Swin state dict (behind a wrapper's ``module.`` too); ValueError listing sample keys
    when it is none we know."""
    unwrapped = without_wrapper_prefix(state_dict)
    keys = list(unwrapped)
    if any(".attn.w_msa." in k for k in keys):
        return "mmdet"
    if any(re.search(r"\.attention\.(self\.query|q_proj)\.|patch_embeddings\.projection\.", k) for k in keys):
        if any("continuous_position_bias_mlp" in k for k in keys):
            raise ValueError(
                "a Hugging Face Swin-V2 state dict: not a layout swinlite converts (Hugging Face Swin V1, timm's and "
                "the Microsoft release's Swin-V2 are; the released Swin-V2 weights load as swinlite_v2_* tags)"
            )
        return "huggingface"
    if any(k.startswith("features.0.0.") for k in keys):
        return "torchvision"
    for layout, prefix in RUN_SWIN_PREFIXES.items():  # before swinlite's: its keys, behind the prefix
        if any(k.startswith(f"{prefix}layers.") and ".attn.rel_pos." in k for k in keys):
            return layout
    if any(".attn.rel_pos." in k for k in keys):
        return "swinlite"
    timm_attention = [k for k in keys if k.endswith("relative_position_bias_table") or ".attn.cpb_mlp." in k]
    if any(re.match(r"layers_\d+\.", k) for k in timm_attention):  # timm's FeatureListNet: layers.N -> layers_N
        return "timm-features"
    # the release's detection and segmentation repos: its keys behind backbone., downsample at the end of stage 0
    if any(k.startswith("backbone.layers.") for k in timm_attention) and any(
        k.startswith("backbone.layers.0.downsample.") for k in keys
    ):
        return "microsoft-backbone"
    if any(k.startswith("layers.") for k in timm_attention):
        # the official release downsamples at the end of stage 0; timm has no layers.0.downsample
        if any(k.startswith("layers.0.downsample.") for k in keys) or "head.weight" in unwrapped:
            return "microsoft"
        return "timm"
    removed = " (behind a wrapper's prefix, removed)" if keys != list(state_dict) else ""
    raise ValueError(
        "unknown checkpoint layout: expected a swinlite, timm, Microsoft (its release's, or its detection and "
        "segmentation repos'), torchvision, mmdet/mmpretrain or Hugging Face Swin state dict, a swinlite detection "
        "or segmentation run's weights, or a swinlite SwinFPNBackbone's or features_only model's state dict; "
        f"got keys{removed}: {first_keys(keys, 12)}"
    )


def convert_when_loaded(
    model: nn.Module, state_dict: dict[str, torch.Tensor], prefix: str, local_metadata: Any, strict: bool, *_: Any
) -> None:
    """A ``load_state_dict`` pre-hook of :class:`~swinlite.models.swin.SwinTransformer`: a state dict of another
    layout (timm's, Microsoft's, ...) is converted in place before it is loaded, and one of any layout has the
    tables of a window shrunk to its stage's map embedded (a timm model of this ``img_size``, converted). A file
    that holds the state dict (the Microsoft release's ``{"model": ...}``, a training checkpoint) gives it by
    :func:`~swinlite.io.unwrap_checkpoint`'s rule, as every other loading path does; a swinlite run's whole resume
    state (its ``resume.pt``, which ``timm.models.resume_checkpoint`` gives whole) is a ValueError naming the run's
    weights (:func:`~swinlite.io.check_not_resume_state`), as every other route refuses it.

    ``timm.create_model(name, checkpoint_path=...)`` loads the file with a plain ``model.load_state_dict``, which
    timm's own Swin passes with its own files; other routes convert with :func:`convert_state_dict`. Keys are converted
    with no fitting but the exact one of :func:`embed_shrunk_tables` (timm's own Swin of the same ``img_size`` takes
    these files): ``load_state_dict`` still checks them, and the shapes, strictly. Keys the conversion does not know
    are a ValueError naming them with ``strict=True``; with ``strict=False`` (given by the model's
    ``load_state_dict``: torch calls its pre-hooks with True) they pass as they are, for ``load_state_dict`` to return
    in ``unexpected_keys`` (as torch and timm's Swin do). A state dict of no known layout (a part of a model's keys,
    such as its classifier's) is left for it to load and report as it is, the one a file holds too; as a submodule
    (``prefix``) the model is loaded by its parent's rules.
    """
    if prefix:
        return
    # timm's resume_checkpoint gives a file without "state_dict" whole: a run's resume.pt is refused, not its "model"
    # loaded alone, its optimizer and epoch dropped without a word
    check_not_resume_state(resume_task_in(state_dict), "the state dict")
    unwrapped = unwrap_checkpoint(state_dict, stacklevel=4)  # an EMA warning names the line of load_state_dict's call
    try:
        layout = detect_layout(unwrapped)
    except ValueError:
        if not holds_state_dict(state_dict):
            return
        converted = unwrapped
    else:
        if layout == "swinlite":
            swinlite = without_wrapper_prefix(unwrapped)  # a wrapper's prefix removed, as _converted removes it
        else:
            swinlite = _converted_layout(unwrapped, layout, None, strict=strict, compared_with=model)
        converted = embed_shrunk_tables(swinlite, model)
    state_dict.clear()
    state_dict.update(converted)


# timm's key part -> swinlite's: the only names in which the two layouts differ (V1's table, V2's MLP)
_TIMM_RENAMES = (("attn.relative_position_bias_table", "attn.rel_pos.table"), ("attn.cpb_mlp.", "attn.rel_pos.mlp."))


def _from_timm(key: str) -> str:
    for theirs, ours in _TIMM_RENAMES:
        key = key.replace(theirs, ours)
    return key


def _to_timm(key: str) -> str:
    for theirs, ours in _TIMM_RENAMES:
        key = key.replace(ours, theirs)
    return key


def _from_timm_features(key: str) -> str:
    return _from_timm(re.sub(r"^layers_(\d+)\.", r"layers.\1.", key))


def _from_microsoft(key: str) -> str:
    key = re.sub(r"^layers\.(\d+)\.downsample", lambda m: f"layers.{int(m.group(1)) + 1}.downsample", key)
    key = re.sub(r"^head\.(weight|bias)$", r"head.fc.\1", key)
    return _from_timm(key)


def _from_microsoft_state(state_dict: StateDict) -> StateDict:
    """The release's keys renamed (:func:`_from_microsoft`); those of its detection and segmentation repos' backbones
    taken from behind ``backbone.`` (necks and heads dropped), their per-level norms ``normI`` -> ``out_norms.I``."""
    state_dict, norms = _split_level_norms(_backbone(state_dict))
    last = _last_stage(list(state_dict), r"^layers\.(\d+)\.")
    return _with_out_norms({_from_microsoft(k): v for k, v in state_dict.items()}, norms, last)


def _from_torchvision(key: str) -> str:
    key = key.replace("features.0.0.", "patch_embed.proj.").replace("features.0.2.", "patch_embed.norm.")
    m = re.match(r"^features\.(\d+)\.(.*)$", key)
    if m:
        index, rest = int(m.group(1)), m.group(2)
        if index % 2 == 1:  # odd entries are the stages' blocks
            rest = re.sub(r"^(\d+)\.mlp\.0\.", r"\1.mlp.fc1.", rest)
            rest = re.sub(r"^(\d+)\.mlp\.3\.", r"\1.mlp.fc2.", rest)
            key = f"layers.{index // 2}.blocks.{rest}"
        else:  # even entries (from 2 on) are patch merging into stage index // 2
            key = f"layers.{index // 2}.downsample.{rest}"
    key = re.sub(r"^head\.(weight|bias)$", r"head.fc.\1", key)
    return _from_timm(key)


def _from_torchvision_state(state_dict: StateDict) -> StateDict:
    """torchvision's V1 or V2 state dict renamed; a V2 block's ``qkv.bias`` split into ``q_bias`` and ``v_bias``."""
    out = {_from_torchvision(k): v for k, v in state_dict.items()}
    for key in [k for k in out if k.endswith(".attn.qkv.bias")]:
        prefix = key.removesuffix("qkv.bias")
        if prefix + "logit_scale" in out:  # a V2 block: torchvision zeroes the key bias in every forward
            q, _, v = out.pop(key).chunk(3)
            out[prefix + "q_bias"], out[prefix + "v_bias"] = q, v
    return out


# nn.Unfold concatenates a 2x2 neighbourhood channel-major (index c * 4 + 2 * dh + dw); swinlite's
# PatchMerging concatenates whole C-blocks in the order (dh, dw) = (0,0), (1,0), (0,1), (1,1).
_UNFOLD_TO_BLOCKS = [0, 2, 1, 3]


def _unfold_to_block_order(value: torch.Tensor) -> torch.Tensor:
    """Reorder the 4C input axis (last) of a patch-merging weight from unfold order to swinlite's."""
    lead, channels = value.shape[:-1], value.shape[-1] // 4
    value = value.reshape(*lead, channels, 4)[..., _UNFOLD_TO_BLOCKS]  # (..., C, 4) in swinlite's block order
    return value.transpose(-1, -2).reshape(*lead, 4 * channels)  # (..., 4 * C), block-major


def _last_stage(keys: list[str], pattern: str) -> int:
    return max(int(m.group(1)) for k in keys if (m := re.match(pattern, k)))


def _with_out_norms(out: StateDict, norms: dict[int, dict[str, torch.Tensor]], last: int) -> StateDict:
    """Per-level norms -> ``out_norms.i``; the last level's is also the final ``norm``."""
    for level, params in norms.items():
        for name, value in params.items():
            out[f"out_norms.{level}.{name}"] = value
            if level == last:
                out[f"norm.{name}"] = value
    return out


def _backbone(state_dict: StateDict) -> StateDict:
    """The keys behind an mmdet / mmseg model's ``backbone.``, without it, and an mmpretrain classifier's ``head.fc``:
    necks and heads dropped. A state dict with no ``backbone.`` key (a classifier's, a bare backbone's) as it is."""
    if not any(k.startswith("backbone.") for k in state_dict):
        return state_dict
    keep = {k.removeprefix("backbone."): v for k, v in state_dict.items() if k.startswith("backbone.")}
    keep.update({k: v for k, v in state_dict.items() if k.startswith("head.fc.")})  # mmpretrain classifier
    return keep


def _split_level_norms(state_dict: StateDict) -> tuple[StateDict, dict[int, dict[str, torch.Tensor]]]:
    """(``state_dict`` without its per-level output norms ``normI.*``, those norms' weights by level)."""
    rest, norms = {}, {}
    for key, value in state_dict.items():
        if m := re.match(r"^norm(\d+)\.(weight|bias)$", key):
            norms.setdefault(int(m.group(1)), {})[m.group(2)] = value
        else:
            rest[key] = value
    return rest, norms


def _from_mmdet(state_dict: StateDict) -> StateDict:
    state_dict, norms = _split_level_norms(_backbone(state_dict))
    last = _last_stage(list(state_dict), r"^stages\.(\d+)\.")
    # Swin-V1 (mmdet's, mmpretrain's) merges at the end of a stage; mmpretrain's Swin-V2 at the start, as swinlite
    merged_into = 1 if any(k.startswith("stages.0.downsample.") for k in state_dict) else 0
    out = {}
    for key, value in state_dict.items():
        if m := re.match(r"^stages\.(\d+)\.downsample\.(.*)$", key):
            # the reduction's 4C inputs are in unfold order, and so is a norm before it (V1); V2's norm comes after
            # it, over its 2C outputs
            reduction = state_dict.get(f"stages.{m.group(1)}.downsample.reduction.weight")
            if reduction is None or value.shape[-1] == reduction.shape[-1]:
                value = _unfold_to_block_order(value)
            out[f"layers.{int(m.group(1)) + merged_into}.downsample.{m.group(2)}"] = value
            continue
        key = key.replace("patch_embed.projection.", "patch_embed.proj.")
        key = re.sub(r"^stages\.(\d+)\.blocks\.", r"layers.\1.blocks.", key)
        key = _from_timm(key.replace(".attn.w_msa.", ".attn."))  # V1's bias table, V2's cpb_mlp: timm's names
        key = key.replace(".ffn.layers.0.0.", ".mlp.fc1.").replace(".ffn.layers.1.", ".mlp.fc2.")
        out[key] = value
    return _with_out_norms(out, norms, last)


_HF_BLOCK_RENAMES = (
    ("layernorm_before.", "norm1."),
    ("attention.self.relative_position_bias_table", "attn.rel_pos.table"),
    ("attention.output.dense.", "attn.proj."),
    ("layernorm_after.", "norm2."),
    ("intermediate.dense.", "mlp.fc1."),
    ("output.dense.", "mlp.fc2."),
)


# transformers 5 renames a Swin block's modules (its conversion_mapping, applied on loading a 4.x file); back to 4.x
_HF5_BLOCK_RENAMES = (
    ("attention.q_proj.", "attention.self.query."),
    ("attention.k_proj.", "attention.self.key."),
    ("attention.v_proj.", "attention.self.value."),
    ("attention.relative_position_bias.relative_position_bias_table", "attention.self.relative_position_bias_table"),
    ("attention.o_proj.", "attention.output.dense."),
    ("mlp.fc1.", "intermediate.dense."),
    ("mlp.fc2.", "output.dense."),
)


def _hf4_key(key: str) -> str:
    """A Hugging Face key in the transformers 4.x layout (a 4.x key is returned as is)."""
    if m := re.match(r"^(.*encoder\.layers\.\d+\.blocks\.\d+\.)(.*)$", key):
        for new, old in _HF5_BLOCK_RENAMES:
            if m.group(2).startswith(new):
                return m.group(1) + old + m.group(2)[len(new) :]
    return key


# what converting a SwinBackbone's file (its hidden_states_norms) warns: where its feature maps and swinlite's differ
SWIN_BACKBONE_NOTE = (
    "a Hugging Face SwinBackbone's weights (hidden_states_norms): transformers' SwinBackbone runs its Swin with "
    "always_partition=True, which keeps the shifted windows of a stage whose map is no larger than its window (the "
    "7x7 last stage of a window-7 model at 224), where swinlite (as timm, Microsoft's Swin and transformers' "
    "SwinModel) drops the shift: the feature maps of such stages (the last level or levels) differ from "
    "SwinBackbone's feature_maps, the others match"
)


def _from_huggingface(state_dict: StateDict) -> StateDict:
    """A Hugging Face Swin's state dict (:data:`_HF_BLOCK_RENAMES`); a SwinBackbone's per-level norms
    ``hidden_states_norms.stageN`` become ``out_norms.N-1``, with a warning (:data:`SWIN_BACKBONE_NOTE`)."""
    state_dict = {_hf4_key(k.removeprefix("swin.")): v for k, v in state_dict.items()}
    last = _last_stage(list(state_dict), r"^encoder\.layers\.(\d+)\.")
    out, norms = {}, {}
    for key, value in state_dict.items():
        if m := re.match(r"^hidden_states_norms\.stage(\d+)\.(weight|bias)$", key):
            norms.setdefault(int(m.group(1)) - 1, {})[m.group(2)] = value
        elif m := re.match(r"^encoder\.layers\.(\d+)\.downsample\.(.*)$", key):
            out[f"layers.{int(m.group(1)) + 1}.downsample.{m.group(2)}"] = value
        elif m := re.match(r"^encoder\.layers\.(\d+)\.blocks\.(\d+)\.(.*)$", key):
            prefix, rest = f"layers.{m.group(1)}.blocks.{m.group(2)}.", m.group(3)
            if q := re.match(r"^attention\.self\.query\.(weight|bias)$", rest):
                parts = [state_dict[key.replace(".query.", f".{p}.")] for p in ("query", "key", "value")]
                out[f"{prefix}attn.qkv.{q.group(1)}"] = torch.cat(parts, dim=0)  # (3 * C, ...) in q, k, v order
            elif not re.match(r"^attention\.self\.(key|value)\.", rest):
                for old, new in _HF_BLOCK_RENAMES:
                    if rest.startswith(old):
                        rest = new + rest[len(old) :]
                        break
                out[prefix + rest] = value
        else:
            key = key.replace("embeddings.patch_embeddings.projection.", "patch_embed.proj.")
            key = key.replace("embeddings.norm.", "patch_embed.norm.")
            key = re.sub(r"^layernorm\.", "norm.", key)
            out[re.sub(r"^classifier\.", "head.fc.", key)] = value
    if norms:
        warn_at_caller(SWIN_BACKBONE_NOTE)
    return _with_out_norms(out, norms, last)


def _from_run(state_dict: StateDict, prefix: str) -> StateDict:
    """The Swin of a swinlite detection / segmentation run's weights: the keys behind ``prefix``, without it (the FPN
    and heads dropped). That Swin is features-only, pruned of its final ``norm``: the last level's output norm, which
    normalised that level's features in the run, stands for it, as for mmdet's backbones; a run trained with
    ``model.kwargs.out_norm=false`` has neither."""
    swin = {k.removeprefix(prefix): v for k, v in state_dict.items() if k.startswith(prefix)}
    last = _last_stage(list(swin), r"^layers\.(\d+)\.")
    for key, value in list(swin.items()):
        if m := re.match(rf"^out_norms\.{last}\.(weight|bias)$", key):
            swin.setdefault(f"norm.{m.group(1)}", value)
    return swin


_CONVERTERS: dict[str, Callable[[StateDict], StateDict]] = {
    "microsoft": _from_microsoft_state,
    "microsoft-backbone": _from_microsoft_state,
    "mmdet": _from_mmdet,
    "huggingface": _from_huggingface,
    "torchvision": _from_torchvision_state,
    **{layout: functools.partial(_from_run, prefix=prefix) for layout, prefix in RUN_SWIN_PREFIXES.items()},
}

# layouts of timm's files (and the release's, which timm loads): timm's loader fits their bias tables
_TIMM_FILES = ("timm", "timm-features", "microsoft")

_RENAMES: dict[str, Callable[[str], str]] = {
    "swinlite": lambda k: k,
    "timm": _from_timm,
    "timm-features": _from_timm_features,
}


def convert_state_dict(checkpoint: Mapping[str, object], model: nn.Module | None = None) -> StateDict:
    """Return ``checkpoint`` in swinlite's layout, whatever Swin layout it is in.

    With ``model``, nothing loads half: every model weight except a classifier and per-level output norms
    must come from the checkpoint; a bias table of a window shrunk to a smaller stage map is embedded
    (:func:`embed_shrunk_tables`), exactly, other bias tables of another size are resized as timm's Swin resizes them
    (:func:`resize_rel_pos_bias_table`, with a warning naming them): to the model's window, or in such a stage to
    the window timm shrinks it to, then embedded; a classifier of
    another size (its weight or its bias) is dropped whole with a warning, one of the model's size is kept (also
    through timm's loader, which otherwise drops it whenever ``num_classes`` differs from the pretrained tag's); a
    first conv of another channel count is passed on for timm's loader to adapt (``in_chans``).

    Args:
        checkpoint: a state dict, or a training checkpoint holding one under ``model``/``state_dict``; its keys may
            carry a wrapper's ``module.`` / ``_orig_mod.`` (:func:`without_wrapper_prefix`).
        model: the swinlite model the result will be loaded into.

    Returns:
        A new state dict (tensors are shared, not copied).

    Raises:
        ValueError: unknown layout, integer / NaN / infinite weights, keys no swinlite model has (without
            ``model``: a converted layout's keys the rules did not map), or (with ``model``) keys the model
            lacks, model weights the checkpoint lacks, or shapes that do not fit; the message names the keys.
    """
    return _converted(checkpoint, model)


def to_timm_state_dict(state_dict: Mapping[str, torch.Tensor], model: nn.Module | None = None) -> StateDict:
    """A swinlite state dict in timm's layout, for timm's Swin (``swin_transformer``, ``swin_transformer_v2``) of the
    same architecture built at the same ``img_size``, whose ``load_state_dict`` takes it strictly: the renames of
    timm's layout reversed (V1's ``attn.rel_pos.table`` is timm's ``attn.relative_position_bias_table``, V2's
    ``attn.rel_pos.mlp.`` timm's ``attn.cpb_mlp.``). timm saves no buffers (its index, coordinates and masks are
    not persistent): none are added.

    Args:
        state_dict: a swinlite model's.
        model: the swinlite model whose weights they are, where a V1 stage's map at its ``img_size`` is smaller
            than its window: timm shrinks that stage's window to the map (:func:`embed_shrunk_tables`), and its table
            is the centre of swinlite's (:func:`crop_rel_pos_bias_table`), the offsets swinlite uses there. Without
            it, tables keep their window, which timm's ``load_state_dict`` then names with both shapes.

    Returns:
        A new state dict (tensors are shared, not copied, except cut tables).

    Raises:
        ValueError: a state dict of another layout, or one holding what timm's Swin does not have: V1 blocks with
            a continuous position bias (``rel_pos="cpb"``), or per-level output norms (``out_norms.i`` of
            ``out_norm=True``, every detection and segmentation backbone's), which are refused rather than dropped:
            they are trained weights, and without them the feature maps change.
    """
    if (layout := detect_layout(state_dict)) != "swinlite":
        raise ValueError(f"expected a swinlite model's state dict, got one in {layout}'s layout")
    if _attention_kind(state_dict) == "v1-cpb":
        raise ValueError("V1 blocks with a continuous position bias (rel_pos='cpb'): timm's Swin has no such model")
    if out_norms := [k for k in state_dict if k.startswith("out_norms.")]:
        raise ValueError(
            f"per-level output norms ({first_keys(out_norms, 4)}, out_norm=True): timm's Swin has none; convert a "
            "model built with out_norm=False, or leave the out_norms.* keys out of the state dict knowingly (timm's "
            "feature maps are then the un-normalised stage outputs)"
        )
    tables = state_dict if model is None else crop_shrunk_tables(state_dict, model)  # copied by the renames
    return {_to_timm(k): v for k, v in tables.items()}


def backbone_state_dict(checkpoint: Mapping[str, object], model: nn.Module | None = None) -> StateDict:
    """:func:`convert_state_dict` of ``checkpoint`` without its classifier (``head.fc``): the weights of a
    features-only Swin (an FPN's or an UperNet's backbone), which has none; a note on an ImageNet file's classifier
    would come with every such file.

    With ``model``, the features-only Swin they load into as a ``model.pretrained`` file (detection's, segmentation's,
    ``build_fpn_backbone(checkpoint=...)``'s): a file in timm's (or the release's) layout has the
    bias tables of the stages timm shrinks at the model's ``img_size`` fitted as :func:`convert_pretrained` fits them
    (a table of the model's whole window too, warned), so that every task's ``model.pretrained`` loads the weights a
    classifier's does; its loader (:func:`~swinlite.load_checkpoint`) then embeds them."""
    state_dict = unwrap_checkpoint(checkpoint, stacklevel=3)  # the line calling backbone_state_dict
    layout = detect_layout(state_dict)
    out = _converted_layout(state_dict, layout, None, compared_with=model)
    if model is not None and layout in _TIMM_FILES:
        out, shrunk = _resize_shrunk_tables(out, model, resize_whole=True)
        if shrunk:
            warn_at_caller(_resized_tables_note([], shrunk, model))
    return {k: v for k, v in out.items() if not k.startswith("head.fc.")}


def convert_pretrained(
    checkpoint: Mapping[str, object],
    model: nn.Module,
    strict: bool = True,
    pruned: tuple[str, ...] = (),
    new_classifier: bool = True,
) -> StateDict:
    """timm's ``pretrained_filter_fn`` for the swinlite variants: :func:`convert_state_dict` of a tag's file (or
    ``pretrained_cfg_overlay``'s) for ``model``; a file in timm's (or the Microsoft release's) layout has the bias
    tables of a model built at another ``img_size`` fitted as timm's pretrained loader fits them
    (:func:`_resize_shrunk_tables` with ``resize_whole``, warned), so that the tag computes what timm's does at that
    size.

    ``strict=False`` (timm's ``pretrained_strict=False``): model weights the file lacks keep their initial values and
    file keys the model lacks are dropped, each named in a warning, as timm's loader allows them; shapes and values
    are checked as with ``strict=True``.

    ``pruned``: the key prefixes of the parts a ``features_only=True`` model's feature wrapper prunes (the final norm,
    the classifier, the stages after its last level), which the file need not hold (a features-only Swin's weights:
    timm's ``features_only``, of all stages or of those up to its last ``out_indices``; a swinlite run's trained with
    ``model.kwargs.out_norm=false``).

    ``new_classifier``: whether the caller asked for its classifier (``num_classes`` given): a file's classifier of
    another size, or none, then starts fresh, with a warning; without, it is refused as timm refuses it (a 10-class
    file under a 1000-class tag, or a backbone's file without one, gave random logits under a "pretrained" model);
    ``strict=False`` lets a file without one load, warned."""
    return _converted(checkpoint, model, timm_tables=True, strict=strict, pruned=pruned, new_classifier=new_classifier)


def _converted(
    checkpoint: Mapping[str, object],
    model: nn.Module | None,
    timm_tables: bool = False,
    strict: bool = True,
    pruned: tuple[str, ...] = (),
    new_classifier: bool = True,
) -> StateDict:
    state_dict = unwrap_checkpoint(checkpoint, stacklevel=4)  # the line calling convert_state_dict (convert_pretrained)
    return _converted_layout(state_dict, detect_layout(state_dict), model, timm_tables, strict, pruned, new_classifier)


def _converted_layout(
    state_dict: StateDict,
    layout: str,
    model: nn.Module | None,
    timm_tables: bool = False,
    strict: bool = True,
    pruned: tuple[str, ...] = (),
    new_classifier: bool = True,
    compared_with: nn.Module | None = None,
) -> StateDict:
    """A state dict of ``layout`` (unwrapped, detected) in swinlite's layout, fitted to ``model`` where given
    (``pruned``: the key prefixes of what the model's feature wrapper prunes, which need not come from it;
    ``new_classifier``: :func:`convert_pretrained`'s). A V2 file's coordinates are compared with those of ``model``,
    or of ``compared_with`` (the model a conversion not fitted here is loaded into), with a warning where they
    differ (:func:`_other_coords_note`)."""
    kept = {k: v for k, v in without_wrapper_prefix(state_dict).items() if not k.endswith(_DROPPED)}
    if layout in _CONVERTERS:
        out = _CONVERTERS[layout](kept)
    else:
        rename = _RENAMES[layout]
        out = {rename(k): v for k, v in kept.items()}
    coords = {k: out.pop(k) for k in [k for k in out if k.endswith(COORDS_TABLE)]}
    try:
        check_weight_values(out)
        if model is not None:  # timm's loader resizes only its own files' tables (timm's layout, or the release's)
            tables = timm_tables and layout in _TIMM_FILES
            out = _fit_to_model(out, model, layout, tables, strict, pruned, new_classifier)
        elif layout != "swinlite" and strict:  # swinlite's own files pass as they are
            _check_swinlite_keys(out, layout)
    except ValueError as e:  # the keys named are the Swin's, without the prefix the file has them behind
        if layout not in RUN_SWIN_PREFIXES:
            raise
        raise ValueError(f"{e}; the file was read as {describe_layout(layout)}") from None
    compared = model if model is not None else compared_with
    if compared is not None and (note := _other_coords_note(coords, compared)) is not None:
        warn_at_caller(note)
    return out


def recorded_swin(metadata: Mapping[str, Any]) -> str | None:
    """The Swin a swinlite weights file's metadata (:func:`~swinlite.io.read_metadata`) names: a classifier's (or a
    model record's) ``model``, a detection or segmentation run's ``model.name`` (its ``detector`` /
    ``segmenter`` settings); None where it names none (another code base's file)."""
    settings = metadata.get("detector", metadata.get("segmenter"))
    name = settings.get("name") if isinstance(settings, Mapping) else metadata.get("model")
    return name if isinstance(name, str) and name else None


def recorded_swin_kwargs(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """The constructor arguments of the Swin :func:`recorded_swin` names, as the file records them: a classifier's (or
    a model record's) ``model_args``, a detection or segmentation run's ``model.kwargs`` (its ``detector`` /
    ``segmenter`` settings' ``kwargs``); None where it records none."""
    settings = metadata.get("detector", metadata.get("segmenter"))
    kwargs = settings.get("kwargs") if isinstance(settings, Mapping) else metadata.get("model_args")
    return dict(kwargs) if isinstance(kwargs, Mapping) else None


def other_classes(recorded: object, classes: Sequence[str]) -> str | None:
    """``"(a, b) than this run's (c, d)"`` where a weights file records (``recorded``: its metadata's ``classes``) as
    many classes as the run's ``classes``, but other names or another order: its class layers load as they are, row i
    now the run's class i, which each task's loader warns of. None otherwise (no record; another count, the
    loader's own rule)."""
    if not isinstance(recorded, list) or len(recorded) != len(classes) or recorded == list(classes):
        return None
    return f"({first_keys(recorded)}) than this run's ({first_keys(list(classes))})"


def misfit_note(metadata: Mapping[str, Any], name: str, state_dict: Mapping[str, torch.Tensor] | None = None) -> str:
    """What a weights file whose Swin did not fit the model ``name`` is, for the error beside the keys it names:
    ``"; it records model swinlite_nano_patch2_window4_64, the model is swinlite_pico_patch2_window4_32"`` where the
    file's metadata names another model (pretrained tags aside), else ``""``.

    Args:
        metadata: the file's (:func:`~swinlite.io.read_metadata`).
        name: the model's timm name.
        state_dict: the file's, where the error is that of its Swin converted before, whose keys it names without the
            prefix of a swinlite run's weights: then ``"; the file was read as the Swin of a swinlite detection run's
            weights (backbone.body.model.*, its FPN and heads left out)"`` comes first (a conversion fitted to the
            model says that itself).
    """
    notes = []
    try:
        layout = detect_layout(state_dict) if state_dict is not None else None
    except ValueError:
        layout = None
    if layout in RUN_SWIN_PREFIXES:
        notes.append(f"the file was read as {describe_layout(layout)}")
    theirs = recorded_swin(metadata)
    if theirs is not None and theirs.split(".")[0] != name.split(".")[0]:
        notes.append(f"it records model {theirs}, the model is {name}")
    return "".join(f"; {note}" for note in notes)


# a layout of RUN_SWIN_PREFIXES -> (whose weights its files are, what of them is not the Swin, if any), for messages
_SWIN_HOLDERS: dict[str, tuple[str, str | None]] = {
    "swinlite-detection": ("a swinlite detection run's weights", "its FPN and heads"),
    "swinlite-segmentation": ("a swinlite segmentation run's weights", "its heads"),
    "swinlite-fpn-backbone": ("a swinlite SwinFPNBackbone's state dict", "its FPN"),
    "swinlite-features": ("a swinlite features_only model's state dict", None),
}


def describe_layout(layout: str) -> str:
    """``layout`` (:func:`detect_layout`'s name) for messages: ``"the timm layout"``; for a swinlite run's weights (a
    bare FPN backbone's), what of them is read (``"the Swin of a swinlite detection run's weights
    (backbone.body.model.*, its FPN and heads left out)"``)."""
    if layout not in RUN_SWIN_PREFIXES:
        return f"the {layout} layout"
    whose, rest = _SWIN_HOLDERS[layout]
    left_out = f", {rest} left out" if rest is not None else ""
    return f"the Swin of {whose} ({RUN_SWIN_PREFIXES[layout]}*{left_out})"


def _check_swinlite_keys(state_dict: Mapping[str, torch.Tensor], layout: str) -> None:
    """ValueError naming the keys that are no swinlite model's (a variant of ``layout`` the rules above do not know):
    a conversion without a model to fit must not pass them on to fail, or be skipped, only when loaded."""
    unknown = [k for k in state_dict if _key_pattern(k) not in _swinlite_key_patterns()]
    if unknown:
        raise ValueError(
            f"{len(unknown)} keys of the {layout} layout did not convert to swinlite's (a variant of that layout the "
            f"converter does not know): {first_keys(unknown)}"
        )


def _key_pattern(key: str) -> str:
    return re.sub(r"(?<=\.)\d+(?=\.)", "N", key)


@functools.cache
def _swinlite_key_patterns() -> frozenset[str]:
    """Every key any swinlite model can have, its indices as ``N``: those of tiny V1, V1-cpb and V2 models with
    per-level output norms and a classifier, built on the meta device."""
    from .models.swin import SwinTransformer

    tiny = dict(img_size=8, patch_size=2, embed_dim=4, depths=(1, 1), num_heads=(1, 1), window_size=2, num_classes=2)
    variants = (dict(block="v1"), dict(block="v1", rel_pos="cpb"), dict(block="v2"))
    models = (SwinTransformer(**tiny, **v, out_norm=True, device="meta") for v in variants)
    return frozenset(_key_pattern(k) for m in models for k in m.state_dict())


def first_keys(keys: Sequence[str], limit: int = 20) -> str:
    """``"a, b, c"``, or the first ``limit`` keys and how many more, for error messages."""
    shown = ", ".join(keys[:limit])
    return shown + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")


def check_weight_values(
    state_dict: Mapping[str, torch.Tensor], source: str = "checkpoint", model: Mapping[str, torch.Tensor] | None = None
) -> None:
    """ValueError naming ``source`` and the first weights that are not floating point, or hold NaN or inf.

    With ``model`` (a state dict to load into), only weights whose model tensor is floating must be floating
    (integer buffers such as BatchNorm's ``num_batches_tracked`` stay integer).
    """
    not_float = [
        f"{k} ({v.dtype})"
        for k, v in state_dict.items()
        if not v.is_floating_point() and (model is None or k not in model or model[k].is_floating_point())
    ]
    if not_float:
        raise ValueError(
            f"{source} holds {len(not_float)} weights that are not floating point: {first_keys(not_float)}"
        )
    not_finite = [k for k, v in state_dict.items() if v.is_floating_point() and not v.is_meta and not _all_finite(v)]
    if not_finite:
        raise ValueError(
            f"{source} holds NaN or infinite values in {len(not_finite)} weights (a diverged run?): "
            + first_keys(not_finite)
        )


def _all_finite(value: torch.Tensor) -> bool:
    """Whether every element of a floating tensor is finite: its sum first (one pass, no mask of its size; NaN or
    inf never sums to a finite number), each element only where the sum is not finite (NaN or
    inf in it, or finite values whose sum overflows)."""
    return bool(value.sum().isfinite()) or bool(value.isfinite().all())


def shape_mismatch(key: str, shape: Sequence[int], want: Sequence[int]) -> str:
    """``key (file shape) vs (model shape)``, or for a bias table with another number of heads, that."""
    if key.endswith("rel_pos.table") and len(shape) == len(want) == 2 and shape[1] != want[1]:
        return (
            f"{key} holds {shape[1]} attention heads, the model has {want[1]} (num_heads differs from the checkpoint's)"
        )
    return f"{key} {tuple(shape)} vs {tuple(want)}"


def state_dict_mismatch(
    target: Mapping[str, torch.Tensor],
    state: Mapping[str, torch.Tensor],
    may_start_fresh: tuple[str, ...] = (),
    limit: int = 8,
) -> str | None:
    """What keeps ``state`` (a file's) from loading exactly into a model whose state dict is ``target``, naming the
    first ``limit`` keys of each kind (missing, surplus, of another shape); None when it fits.

    Args:
        may_start_fresh: prefixes of model weights that may be absent from ``state``.
    """
    problems = {
        "missing from the file": [k for k in target if k not in state and not k.startswith(may_start_fresh)],
        "not in the model": [k for k in state if k not in target],
        "shape (file vs model)": [
            shape_mismatch(k, state[k].shape, v.shape)
            for k, v in target.items()
            if k in state and state[k].shape != v.shape
        ],
    }
    parts = [f"{what}: {first_keys(keys, limit)}" for what, keys in problems.items() if keys]
    return "; ".join(parts) or None


def check_loads_whole(model: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Before a strict ``load_state_dict`` of ``state_dict`` (swinlite's layout, converted) into ``model``: a
    RuntimeError, torch's for a state dict that does not fit, naming the cause first (another attention, width or
    depths), where any key is missing, surplus or of another shape. torch raises it only after it loaded every key
    that fits, which leaves the model half overwritten."""
    target = model.state_dict()
    mismatch = state_dict_mismatch(target, state_dict)
    if mismatch is not None:
        cause = other_architecture(state_dict, model, target)
        raise RuntimeError(
            f"Error(s) in loading state_dict for {type(model).__name__} (nothing loaded): {cause}{mismatch}"
        )


def _fit_to_model(
    state_dict: StateDict,
    model: nn.Module,
    layout: str,
    timm_tables: bool,
    strict: bool = True,
    pruned: tuple[str, ...] = (),
    new_classifier: bool = True,
) -> StateDict:
    """``state_dict`` (converted from ``layout``) fitted to ``model`` (see :func:`convert_state_dict`); ``timm_tables``:
    a pretrained tag's file, whose bias tables are fitted as timm's loader fits them; ``strict=False``: keys missing on
    either side are warned about, not refused; ``pruned``: model keys of these prefixes missing are neither, the
    model's feature wrapper prunes them; ``new_classifier=False``: a classifier of another size is refused, not dropped,
    and with ``strict`` so is a file that holds none (:func:`convert_pretrained`)."""
    target = model.state_dict()
    name = type(model).__name__
    state_dict = _drop_pruned_stages(_drop_optional(state_dict, target), model)
    unmapped = sorted(k for k in state_dict if k not in target)
    # what a refusal below names first: V1 weights into a V2 model, a file of other depths, ...
    cause = other_architecture(state_dict, model, target, pruned)
    if unmapped and strict:
        raise ValueError(f"{cause}{len(unmapped)} checkpoint keys did not map onto {name}: {first_keys(unmapped)}")
    if unmapped:
        warn_at_caller(
            f"pretrained_strict=False: dropping {len(unmapped)} checkpoint keys {name} lacks: " + first_keys(unmapped)
        )
        state_dict = {k: v for k, v in state_dict.items() if k in target}
    state_dict, shrunk = _resize_shrunk_tables(state_dict, model, resize_whole=timm_tables)
    state_dict = embed_shrunk_tables(state_dict, model)
    out, resized, dropped = {}, [], []
    head_fits = _classifier_fits(state_dict, target)
    for key, value in state_dict.items():
        want = target[key].shape
        if value.shape != want and key.endswith("rel_pos.table") and value.shape[1:] != want[1:]:
            raise ValueError(f"checkpoint does not fit {name}: {cause}{shape_mismatch(key, value.shape, want)}")
        if value.shape != want and key.endswith("rel_pos.table"):  # the model's window may be rectangular
            window = model.get_submodule(key.removesuffix(".table")).window
            value = resize_rel_pos_bias_table(value, _square_window(key, value.shape[0]), window)
            resized.append(key)
        elif key == FIRST_CONV and value.shape[0] == want[0] and value.shape[2:] != want[2:]:  # another patch size
            old, patch = tuple(value.shape[2:]), tuple(want[2:])  # resampled as timm does (FlexiViT's pseudo-inverse)
            value = resample_patch_embed(value, list(patch), interpolation="bicubic", antialias=True)
            warn_at_caller(f"resampled {key} from {old} patches to the model's {patch}")
        elif key.startswith("head.fc.") and not head_fits:
            if not new_classifier and "head.fc." not in pruned:  # the caller asked for the tag's classifier
                raise ValueError(
                    f"checkpoint does not fit {name}: its classifier {key} has shape {tuple(value.shape)}, the model's "
                    f"{tuple(want)}: pass num_classes={value.shape[0]} for the file's classifier (or another "
                    "num_classes for a new one, which starts fresh)"
                )
            dropped.append(f"{key} of shape {tuple(value.shape)} (the model's: {tuple(want)})")
            continue
        elif value.shape != want and not (key == FIRST_CONV and _differs_in_channels_only(value.shape, want)):
            size = "" if cause else " (a checkpoint for another model size?)"
            raise ValueError(
                f"checkpoint does not fit {name}: {cause}{key} has shape {tuple(value.shape)}, "
                f"the model expects {tuple(want)}{size}"
            )
        out[key] = value
    if dropped:
        warn_at_caller(f"dropping classifier {', '.join(dropped)}: it starts fresh")
    missing, fresh = missing_weights(out, model)
    if pruned:  # left as they are, unnamed: the feature wrapper prunes them
        missing, fresh = ([k for k in keys if not k.startswith(pruned)] for keys in (missing, fresh))
    if missing and not strict:
        warn_at_caller(
            f"pretrained_strict=False: {counted(len(missing), 'model weight')} missing from the checkpoint, left at "
            f"their initial values: {first_keys(missing)}"
        )
    elif missing:
        cause = missing_final_norm(missing, layout) or cause
        raise ValueError(
            f"checkpoint does not fit {name}: {cause}{counted(len(missing), 'model weight')} missing from it: "
            + first_keys(missing)
        )
    if strict and not new_classifier and any(k.startswith("head.fc.") for k in fresh):  # the tag's, from the file
        raise _no_classifier(model)
    if resized or shrunk:
        warn_at_caller(_resized_tables_note(resized, shrunk, model))
    fresh = [k for k in fresh if k not in state_dict]  # a classifier dropped above was already named
    if fresh:
        warn_at_caller(f"not in the checkpoint, left at their initial values: {first_keys(fresh)}")
    _record_classifier_size(out, model)
    return out


def _no_classifier(model: nn.Module) -> ValueError:
    """The refusal of a file that holds no classifier (a backbone's, a detection run's) loaded as the classifier of the
    model's pretrained cfg (no ``num_classes`` asked for): its fresh classifier gave random logits under a
    "pretrained" model, where timm's loader refuses the missing keys."""
    cfg = getattr(model, "pretrained_cfg", None)
    file = cfg.get("file") if isinstance(cfg, dict) else None
    return ValueError(
        f"checkpoint does not fit {type(model).__name__}: {file or 'it'} holds no classifier (head.fc) for the "
        f"model's {model.num_classes} classes: pass num_classes=0 for features (a backbone), or num_classes=N for a "
        "new classifier to train, which starts fresh"
    )


def _resized_tables_note(resized: list[str], shrunk: list[str], model: nn.Module) -> str:
    """The warning naming the bias tables resized to the model's window (``resized``) and those resized to the window
    timm shrinks their stage's to at the model's ``img_size``, then embedded (``shrunk``)."""
    from .models.swin import shrunk_windows  # the model module imports this one

    window = tuple(model.window_size)
    note = f"resized {len(resized) + len(shrunk)} relative position bias tables to the model's window {window}"
    if shrunk:
        stages = sorted({int(k.split(".")[1]) for k in shrunk})
        windows = shrunk_windows(window, tuple(model.patch_embed.grid_size), len(model.layers))
        shown = ", ".join(f"stage {i} {windows[i]}" for i in stages)
        note += (
            f", {len(shrunk)} of them as timm's Swin does to the window it shrinks their stage's to at the model's "
            f"img_size ({shown}), embedded in the model's"
        )
    return f"{note}: {first_keys(resized + shrunk, 4)}"


def _other_coords_note(tables: Mapping[str, torch.Tensor], model: nn.Module) -> str | None:
    """The warning for a Swin-V2 file whose blocks' saved coordinates (``tables``: each ``relative_coords_table`` by
    its swinlite key, :data:`COORDS_TABLE`) are not those ``model``'s blocks build (their window's, normalised by
    their pretrained window); None where they are, or where the model has no such block (V1 blocks, a stage it lacks:
    the fitting names those keys). The offsets both windows hold are compared: a stage whose window the model shrinks
    to its map (as the release and timm do) sees the file's coordinates there.

    It names the ``window_size`` and ``pretrained_window_sizes`` the file implies (:func:`_coords_window`), the
    model's, and what to pass. The weights load all the same, as a V1 table of another window loads resized: the
    position bias MLP is a function of the coordinates, and a model of another window may be what the user wants
    (fine-tuning at a larger one); the warning says that it then sees other coordinates than in training.
    """
    from .models.swin import ContinuousPositionBias  # the model module imports this one

    theirs: dict[int, tuple[tuple[int, int], tuple[int, int]] | None] = {}  # stage -> (window, normalised by)
    ours: dict[int, tuple[int, int] | None] = {}  # stage -> the model's pretrained window
    differ = set()
    for key, table in sorted(tables.items()):
        if table.is_meta:  # a state dict of shapes alone (a model built on the meta device): no values to compare
            continue
        if table.shape[1:-1] == (1, 1):  # a window of 1: the offset 0 alone, whatever the normalisation (0/0, NaN, in
            continue  # torchvision's and Microsoft's formula)
        try:
            rel_pos = model.get_submodule(key.removesuffix(COORDS_TABLE) + "attn.rel_pos")
        except AttributeError:
            continue
        if not isinstance(rel_pos, ContinuousPositionBias) or len(rel_pos.window) != 2:
            continue
        stage = int(key.split(".")[1])
        ours.setdefault(stage, rel_pos.pretrained_window)
        implied = _coords_window(table)
        theirs.setdefault(stage, implied)
        if implied is None or not _same_coords(table, implied[0], rel_pos):
            differ.add(stage)
    if not differ:
        return None
    stages = f"stage{'s' if len(differ) > 1 else ''} {', '.join(map(str, sorted(differ)))}"
    head = f"the checkpoint's Swin-V2 coordinates (relative_coords_table) are not the model's in {stages}"
    tail = "the weights load, their position bias evaluated at the model's coordinates"
    if any(theirs[s] is None for s in differ):
        return f"{head}: they are no window's log-spaced offsets swinlite builds; {tail}"
    implied = [theirs[s] for s in sorted(theirs)]
    window = tuple(max(w[i] for w, _ in implied) for i in range(2))  # stages the release shrinks have smaller ones
    sizes = tuple(_as_arg(norm) for _, norm in implied)
    model_window = tuple(model.window_size)
    pretrained = [ours[s] for s in sorted(ours)]
    model_sizes = None if all(p is None for p in pretrained) else tuple(_as_arg(p or (0, 0)) for p in pretrained)
    if window != model_window:
        advice = (
            f"window_size={_as_arg(window)} (a swinlite_v2_*_window{window[0]}_* variant) to compute what it was "
            f"trained to, or pretrained_window_sizes={sizes} to run it at window {_as_arg(model_window)} with its "
            "coordinates (Swin-V2's transfer to a larger window)"
        )
    else:
        advice = f"pretrained_window_sizes={sizes} for its coordinates"
    return (
        f"{head}: the file implies window_size={_as_arg(window)} and pretrained_window_sizes={sizes} (the windows its "
        f"coordinates were normalised by), the model has window_size={_as_arg(model_window)} and "
        f"pretrained_window_sizes={model_sizes}; {tail}: build it with {advice}"
    )


def implied_v2_windows(state_dict: Mapping[str, torch.Tensor]) -> str | None:
    """What the Swin-V2 coordinates a file saves (``relative_coords_table``, any layout's key) imply, for a conversion
    not fitted to a model, which keeps them nowhere: the windows and the windows their offsets were normalised by
    (``pretrained_window_sizes``), e.g. "windows 16 normalised by 8"; None for a file that saves none (or none that
    any window builds)."""
    implied = {found for k, v in state_dict.items() if k.endswith("relative_coords_table") and v.numel() > 2
               if (found := _coords_window(v)) is not None}  # fmt: skip
    if not implied:
        return None
    windows = ", ".join(sorted({str(_as_arg(window)) for window, _ in implied}))
    normalised = ", ".join(sorted({str(_as_arg(norm)) for _, norm in implied}))
    return f"windows {windows} normalised by {normalised}"


def _coords_window(table: torch.Tensor) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """(window, the window its offsets were normalised by: timm's ``pretrained_window_size``, or the window itself) of
    a Swin-V2 block's saved coordinates (1, 2Wh - 1, 2Ww - 1, 2), None where no such pair builds them. The window is
    the table's shape; the other comes from the largest value per axis, ``v = log2(8 (w - 1) / (p - 1) + 1) / log2(8)``
    (:func:`~swinlite.models.swin.log_spaced_relative_coords`), so ``p = 1 + 8 (w - 1) / (8^v - 1)``. None for a table
    that holds NaN or infinity."""
    from .models.swin import log_spaced_relative_coords  # the model module imports this one

    if table.ndim != 4 or (table.shape[0], table.shape[3]) != (1, 2) or any(g % 2 == 0 for g in table.shape[1:3]):
        return None
    if not torch.isfinite(table).all():
        return None
    window = ((table.shape[1] + 1) // 2, (table.shape[2] + 1) // 2)
    coords = table.reshape(-1, 2).float()  # (rows, 2), rows as the model's
    largest = coords.abs().amax(0).tolist()  # per axis: the offset w - 1, normalised and log-spaced
    norm = tuple(w if v <= 0 else round(1 + 8 * (w - 1) / (8**v - 1)) for w, v in zip(window, largest, strict=True))
    if not _coords_close(coords, log_spaced_relative_coords(window, norm), table.dtype):
        return None
    return window, (norm[0], norm[1])


def _same_coords(table: torch.Tensor, window: tuple[int, int], rel_pos: nn.Module) -> bool:
    """Whether a file's coordinates ``table`` of ``window`` are those of the model's block (``rel_pos``, a
    :class:`~swinlite.models.swin.ContinuousPositionBias`) at every offset both windows hold."""
    from .models.swin import log_spaced_relative_coords  # the model module imports this one

    common = tuple(min(a, b) for a, b in zip(window, rel_pos.window, strict=True))
    model = log_spaced_relative_coords(rel_pos.window, rel_pos.pretrained_window)  # (rows, 2)
    mine = crop_rel_pos_bias_table(model, rel_pos.window, common)  # the coordinates as a 2-column "table"
    file = crop_rel_pos_bias_table(table.reshape(-1, 2).float(), window, common)
    return _coords_close(file, mine, table.dtype)


def _coords_close(file: torch.Tensor, model: torch.Tensor, saved: torch.dtype) -> bool:
    """Whether a file's coordinates (as float32) are ``model``'s up to the rounding of the dtype they were ``saved`` in
    (fp16's step near 1 is 1e-3, bf16's 8e-3; coordinates of another window differ by 0.1 or more)."""
    rtol = 2 * torch.finfo(saved).eps if saved.is_floating_point else 0.0
    return torch.allclose(file, model, rtol=rtol, atol=1e-5)


def _as_arg(window: Sequence[int]) -> int | tuple[int, ...]:
    """A window as a model argument gives it: ``w`` for ``(w, w)``."""
    return window[0] if len(set(window)) == 1 else tuple(window)


_ATTENTION = {  # _attention_kind -> (what it holds, the models that hold it, their names)
    "v1": ("Swin-V1 (relative position bias tables)", "a Swin-V1 model", "a swinlite_* name without v2"),
    "v1-cpb": (
        "Swin-V1 with a continuous position bias (rel_pos='cpb', no logit_scale)",
        "a Swin-V1 model built with rel_pos='cpb'",
        "swinlite_tiny_cpb_patch4_window7_224",
    ),
    "v2": ("Swin-V2 (continuous position bias, logit_scale)", "a Swin-V2 model", "a swinlite_v2_* name"),
}


def _attention_kind(state_dict: Mapping[str, torch.Tensor]) -> str | None:
    """The attention a swinlite-layout state dict's blocks hold: ``"v1"`` (relative position bias tables), ``"v1-cpb"``
    (V1 blocks with a continuous position bias), ``"v2"`` (continuous position bias and ``logit_scale``), or None
    (no attention weights)."""
    keys = list(state_dict)
    if any(k.endswith(".attn.logit_scale") for k in keys):
        return "v2"
    if any(".attn.rel_pos.mlp." in k for k in keys):
        return "v1-cpb"
    return "v1" if any(k.endswith(".attn.rel_pos.table") for k in keys) else None


def _other_attention(state_dict: Mapping[str, torch.Tensor], target: Mapping[str, torch.Tensor]) -> str:
    """``"checkpoint is Swin-V1 (...) and the model Swin-V2 (...): pick a Swin-V1 model with the checkpoint's
    embed_dim, 96 (...); "`` when the checkpoint's blocks hold another attention than the model's (``target``, its
    state dict), else ``""``: the cause of the keys that do not map, which name swinlite's converted keys, not the
    file's."""
    have, want = _attention_kind(state_dict), _attention_kind(target)
    if have is None or want is None or have == want:
        return ""
    holds, model, names = _ATTENTION[have]
    first = state_dict.get(FIRST_CONV)  # the checkpoint's width: the hint names a model that fits it, not its kind only
    width = "" if first is None else f" with the checkpoint's embed_dim, {first.shape[0]}"
    return f"checkpoint is {holds} and the model {_ATTENTION[want][0]}: pick {model}{width} ({names}); "


def _stage_depths(state_dict: Mapping[str, torch.Tensor]) -> list[int]:
    """The blocks of each stage of a swinlite-layout state dict: one past the highest ``j`` of its
    ``layers.{i}.blocks.{j}.`` keys (0 for a stage with none), up to its highest ``layers.{i}.``."""
    depths: dict[int, int] = {}
    for key in state_dict:
        if m := re.match(r"^layers\.(\d+)\.(?:blocks\.(\d+)\.)?", key):
            stage, block = int(m.group(1)), m.group(2)
            depths[stage] = max(depths.get(stage, 0), 0 if block is None else int(block) + 1)
    return [depths.get(i, 0) for i in range(max(depths, default=-1) + 1)]


def _other_depths(state_dict: Mapping[str, torch.Tensor], model: nn.Module, pruned: tuple[str, ...] = ()) -> str:
    """``"the checkpoint has 3 stages (depths 2, 2, 6), the model 4 (depths 2, 2, 6, 2): a checkpoint of another
    model (build it with depths=(2, 2, 6) and num_heads of 3 stages), or a file cut short; "`` when the blocks of
    the checkpoint's stages (converted to swinlite's layout) are not the model's, else ``""``: the cause of the keys
    that do not map, or are missing. Only the stages the model keeps are compared where it is pruned of later ones
    (a features-only Swin: ``feature_info`` longer than ``layers``, or ``pruned`` prefixes of
    :func:`convert_pretrained`), which a file of more stages, or of those it keeps only, fits."""
    want = [len(stage.blocks) for stage in model.layers]
    have = _stage_depths(state_dict)
    kept = next((i for i in range(len(want)) if f"layers.{i}." in pruned), len(want))
    if kept < len(want) or len(getattr(model, "feature_info", ())) > len(want):
        have, want = have[:kept], want[:kept]
    if not have or have == want:
        return ""
    heads = f" and num_heads of {len(have)} stages" if len(have) != len(want) else ""
    shorter = len(have) <= len(want) and all(h <= w for h, w in zip(have, want, strict=False))
    return (
        f"the checkpoint has {counted(len(have), 'stage')} (depths {', '.join(map(str, have))}), the model "
        f"{len(want)} (depths {', '.join(map(str, want))}): a checkpoint of another model (build it with "
        f"depths={tuple(have)}{heads}){', or a file cut short' if shorter else ''}; "
    )


def other_architecture(
    state_dict: Mapping[str, torch.Tensor],
    model: nn.Module,
    target: Mapping[str, torch.Tensor],
    pruned: tuple[str, ...] = (),
) -> str:
    """The cause, said before the keys, of a swinlite-layout ``state_dict`` that does not fit ``model`` (``target``:
    its state dict) for being another model's: another attention (:func:`_other_attention`: V1 weights into a V2
    model, ...), else another width (``"the checkpoint's embed_dim is 32 (patch_embed.proj.weight), the model's 48:
    ...; "``), else other depths (:func:`_other_depths`), else ``""``."""
    if attention := _other_attention(state_dict, target):
        return attention
    weight, want = state_dict.get(FIRST_CONV), model.patch_embed.proj.weight
    if weight is not None and weight.ndim == want.ndim and weight.shape[0] != want.shape[0]:
        return (
            f"the checkpoint's embed_dim is {weight.shape[0]} ({FIRST_CONV}), the model's {want.shape[0]}: a "
            f"checkpoint of another model (build one with embed_dim={weight.shape[0]}); "
        )
    return _other_depths(state_dict, model, pruned)


def missing_final_norm(missing: Collection[str], layout: str = "swinlite") -> str:
    """``"it has no final norm (norm.*), which the model uses: ...; "`` when the model weights a checkpoint (of
    ``layout``, converted now, or before: a converted file's metadata records it) lacks, ``missing``, are its final
    norm's and no others, else ``""``: the cause (:func:`no_final_norm_cause`) before the keys named. Such weights
    start a detection or segmentation backbone, which does not use the final norm, never a classifier."""
    if set(missing) != {"norm.weight", "norm.bias"}:
        return ""
    return (
        f"it has no final norm (norm.*), which the model uses: {no_final_norm_cause(layout)}; it starts a detection "
        "or segmentation backbone (which does not use the final norm), not this model; "
    )


def no_final_norm_cause(layout: str) -> str:
    """Why a checkpoint of ``layout`` has no final norm (``norm.*``), for :func:`missing_final_norm` and
    ``scripts/convert_checkpoint.py``'s note: a swinlite detection or segmentation run trained with
    ``model.kwargs.out_norm=false`` leaves its Swin without one (no last level's output norm stands for it), as timm's
    ``features_only`` Swin saves none, and an mmdet / mmseg / mmpretrain or Microsoft detection and segmentation repo
    backbone has only its levels' norms (the last one's stands for it), none for a level it does not output."""
    if layout == "swinlite-fpn-backbone":
        return "the backbone that saved it was built with out_norm=False, and its Swin has none"
    if layout == "swinlite-features":
        return "the features_only model that saved it was built with out_norm=False (the default), and has none"
    if layout in RUN_SWIN_PREFIXES:
        return "the run that wrote it trained with model.kwargs.out_norm=false, and its Swin has none"
    if layout == "timm-features":
        return "its weights are a timm Swin's built with features_only=True (timm's FeatureListNet), which has none"
    if layout in ("mmdet", "microsoft-backbone"):
        whose = "an mmdet, mmseg or mmpretrain" if layout == "mmdet" else "a Microsoft detection or segmentation repo's"
        return (
            f"its weights are {whose} Swin backbone's, saved without its last stage's output norm, which stands for "
            "it (out_indices without the last stage)"
        )
    return (
        "a features-only Swin's weights have none (a swinlite detection or segmentation run's trained with "
        "model.kwargs.out_norm=false)"
    )


def _classifier_fits(state_dict: StateDict, target: Mapping[str, torch.Tensor]) -> bool:
    """Whether the checkpoint's classifier loads whole: every model ``head.fc`` weight there, each of the model's
    shape. Else it is dropped whole (a classifier of another size, or none), unless it is half of one of the model's
    size (a ValueError: a damaged file, whose fresh half would give random logits under pretrained weights).

    Raises:
        ValueError: the classifier's weight has the model's shape and its bias is absent or of another shape, or a
            bias comes without a weight.
    """
    head = {k: v for k, v in state_dict.items() if k.startswith("head.fc.")}
    want = {k: v for k, v in target.items() if k.startswith("head.fc.")}
    if head.keys() == want.keys() and all(v.shape == want[k].shape for k, v in head.items()):
        return True
    weight, wanted = head.get("head.fc.weight"), want.get("head.fc.weight")
    if head and (weight is None or (wanted is not None and weight.shape == wanted.shape)):
        found = ", ".join(f"{k} {tuple(v.shape)}" for k, v in sorted(head.items()))
        expected = ", ".join(f"{k} {tuple(v.shape)}" for k, v in sorted(want.items())) or "none"
        raise ValueError(
            f"the checkpoint's classifier is incomplete: it holds {found}, the model's is {expected} "
            "(a damaged file? a classifier of another size is dropped, half of one is not loaded)"
        )
    return False


def _differs_in_channels_only(shape: torch.Size, want: torch.Size) -> bool:
    return len(shape) == len(want) == 4 and shape[0] == want[0] and shape[2:] == want[2:]


def _record_classifier_size(state_dict: StateDict, model: nn.Module) -> None:
    """Let timm's loader keep a classifier that fits the model.

    timm drops the classifier whenever the model's ``num_classes`` differs from its pretrained cfg's
    (the tag's), even when the file's classifier has the model's size (a fine-tuned file loaded with
    ``pretrained_cfg_overlay=dict(file=...)``). The cfg then records the size of the weights loaded.
    """
    head = state_dict.get("head.fc.weight")
    cfg = getattr(model, "pretrained_cfg", None)
    if head is not None and isinstance(cfg, dict) and cfg.get("num_classes") != head.shape[0]:
        cfg["num_classes"] = head.shape[0]


def _drop_optional(state_dict: StateDict, target: Mapping[str, torch.Tensor]) -> StateDict:
    """Drop a classifier and per-level output norms the model does not have (warning when it loses levels), and a
    final norm it does not have: a features-only Swin, pruned of the final norm it does not use (timm's feature
    wrappers prune it), as the detection and segmentation backbones load their weights, which it need not be in."""
    levels = sorted({int(k.split(".")[1]) for k in state_dict if k.startswith("out_norms.")})
    dropped_levels = sorted(
        {int(k.split(".")[1]) for k in state_dict if k.startswith("out_norms.") and k not in target}
    )
    if dropped_levels and dropped_levels != levels[-1:]:  # the last level's norm is also the final norm
        last = f"out_norms.{levels[-1]}.weight"
        final = (  # a features-only Swin has no final norm (detection's, segmentation's): the last level's is lost too
            "norm.weight" in target
            and last in state_dict
            and "norm.weight" in state_dict
            and torch.equal(state_dict[last], state_dict["norm.weight"])
        )
        kept = f" (level {levels[-1]}'s loads as the final norm)" if final and levels[-1] in dropped_levels else ""
        shown = [level for level in dropped_levels if not (kept and level == levels[-1])]
        warn_at_caller(
            f"dropping per-level output norms of levels {shown}{kept}: build the model with out_norm=True to use them"
        )
    if any(k.startswith("head.fc.") and k not in target for k in state_dict):
        warn_at_caller("dropping the checkpoint's classifier head.fc: the model has none")
    optional = ("out_norms.", "head.fc.", "norm.")
    return {k: v for k, v in state_dict.items() if k in target or not k.startswith(optional)}


def _drop_pruned_stages(state_dict: StateDict, model: nn.Module) -> StateDict:
    """``state_dict`` without the stages a features-only Swin is pruned of (``prune_intermediate_layers``: those after
    its last level; its ``feature_info`` keeps every stage it was built with), as timm's ``features_only`` loads a
    whole model's weights before pruning it: an FPN on levels 0-2 takes an ImageNet file of four stages. Keys of a
    stage the model was never built with stay, for the strict check to refuse."""
    layers, info = getattr(model, "layers", None), getattr(model, "feature_info", None)
    if not isinstance(layers, nn.Sequential) or not isinstance(info, list) or len(layers) >= len(info):
        return state_dict
    pruned = tuple(f"layers.{i}." for i in range(len(layers), len(info)))
    return {k: v for k, v in state_dict.items() if not k.startswith(pruned)}


def embed_shrunk_tables(state_dict: StateDict, model: nn.Module) -> StateDict:
    """``state_dict`` with each bias table learned for a window shrunk to its stage's map embedded in a table of the
    model's window (:func:`embed_rel_pos_bias_table`); other keys as they are.

    timm (and the Microsoft release) shrink a stage's window to the stage's map where that map, at the model's
    nominal input size, is smaller than the window: the last stage of a window-7 model at ``img_size`` 192 has a
    6x6 map, a 6x6 window, an 11x11 table. swinlite keeps the model's window and masks the padding, so at that size
    its attention uses the same 11x11 offsets: with the embedded table the stage computes what timm's does,
    with a resized one it would not. The table's window is the one timm gives that stage of a model of this ``img_size``
    (:func:`~swinlite.models.swin.shrunk_windows`); a table of another size is left to the callers' rules
    (:func:`convert_state_dict` first resizes it to that window, as timm's loader does).
    """
    target, window = model.state_dict(), tuple(model.window_size)
    out = dict(state_dict)
    for key, value, stage_window in _tables_timm_shrinks(state_dict, model):
        if key not in target or value.ndim != 2:
            continue
        want = target[key].shape
        if value.shape == (_num_offsets(stage_window), want[1]) and want[0] == _num_offsets(window):
            out[key] = embed_rel_pos_bias_table(value, stage_window, window)
    return out


def _resize_shrunk_tables(state_dict: StateDict, model: nn.Module, resize_whole: bool) -> tuple[StateDict, list[str]]:
    """``state_dict`` with each bias table of a stage timm shrinks (:func:`_tables_timm_shrinks`) that is of another
    window resized to the shrunk window, as timm's ``checkpoint_filter_fn`` resizes it for that stage (the 13x13 table
    of a window-7 file to 9x9 in a window-10 model's last stage at 160, not to the model's 19x19), for
    :func:`embed_shrunk_tables` to embed; and the keys resized.

    A table of the model's whole window is resized only with ``resize_whole`` (a pretrained tag's file, made at the
    tag's input size, :func:`convert_pretrained`: at 112 the last stage's 13x13 table to 7x7, so that the tag built at
    another ``img_size`` computes what timm's does, as after ``set_input_size``); other files load it as it is:
    swinlite keeps its window at any size, and a file records no input size to resize from.
    """
    target, window = model.state_dict(), tuple(model.window_size)
    out, resized = dict(state_dict), []
    for key, value, stage_window in _tables_timm_shrinks(state_dict, model):
        if key not in target or value.ndim != 2 or value.shape[1] != target[key].shape[1]:
            continue  # another head count: the fitting's error names it
        whole = value.shape[0] == _num_offsets(window)
        if value.shape[0] == _num_offsets(stage_window) or (whole and not resize_whole):
            continue
        old = window if whole else _square_window(key, value.shape[0])
        out[key] = resize_rel_pos_bias_table(value, old, stage_window)
        resized.append(key)
    return out, resized


def crop_shrunk_tables(state_dict: Mapping[str, torch.Tensor], model: nn.Module) -> StateDict:
    """``state_dict`` of a V1 ``model`` with the table of each stage whose map at the model's nominal input size is
    smaller than its window cut to the window timm shrinks it to (:func:`crop_rel_pos_bias_table`): the inverse of
    :func:`embed_shrunk_tables`, exact there (swinlite masks the padding around that map, so only these offsets
    meet); other keys as they are."""
    window = tuple(model.window_size)
    out = dict(state_dict)
    for key, value, stage_window in _tables_timm_shrinks(state_dict, model):
        out[key] = crop_rel_pos_bias_table(value, window, stage_window)
    return out


def _tables_timm_shrinks(
    state_dict: Mapping[str, torch.Tensor], model: nn.Module
) -> Iterator[tuple[str, torch.Tensor, tuple[int, int]]]:
    """(key, table, window) of each V1 bias table of ``state_dict`` in a stage of ``model`` whose map at the model's
    nominal input size is smaller than its window, with the window timm gives that stage
    (:func:`~swinlite.models.swin.shrunk_windows`). Tables of stages the model lacks (pruned of them,
    ``prune_intermediate_layers``, or built with fewer) are none of these: they load nowhere, and
    ``load_state_dict`` names them as keys the model does not have."""
    from .models.swin import shrunk_windows  # the model module imports this one

    window = tuple(model.window_size)
    shrunk = shrunk_windows(window, tuple(model.patch_embed.grid_size), len(model.layers))
    for key, value in state_dict.items():
        m = re.match(r"^layers\.(\d+)\.blocks\.\d+\.attn\.rel_pos\.table$", key)
        stage = int(m.group(1)) if m is not None else len(shrunk)
        if stage < len(shrunk) and shrunk[stage] != window:
            yield key, value, shrunk[stage]


def _num_offsets(window: Sequence[int]) -> int:
    return math.prod(_grid_size(window))


def embed_rel_pos_bias_table(table: torch.Tensor, old_window: Sequence[int], new_window: Sequence[int]) -> torch.Tensor:
    """A 2-D Swin bias table of a window no larger than ``new_window``, centred in the larger table, zeros elsewhere.

    Every offset of the old window keeps its bias (exact wherever only those are used); the new offsets have none.

    Args:
        table: bias table, shape ((2Wh - 1) * (2Ww - 1), heads).
        old_window: window the table was learned for, (Wh, Ww).
        new_window: the larger window, (Wh', Ww'), Wh' >= Wh and Ww' >= Ww.

    Returns:
        Table of shape ((2Wh' - 1) * (2Ww' - 1), heads), same dtype as ``table``.
    """
    grid = offset_grid(table, old_window)  # (heads, 2Wh-1, 2Ww-1)
    (old_h, old_w), (new_h, new_w) = grid.shape[1:], _grid_size(new_window)
    if new_h < old_h or new_w < old_w:
        raise ValueError(
            f"window {_window_2d(new_window)} is smaller than the table's {_window_2d(old_window)}: resize it"
        )
    pad_h, pad_w = (new_h - old_h) // 2, (new_w - old_w) // 2
    grid = F.pad(grid, (pad_w, pad_w, pad_h, pad_h))  # (heads, 2Wh'-1, 2Ww'-1), offset (0, 0) still central
    return grid.flatten(1).T.contiguous()  # (rows, heads)


def crop_rel_pos_bias_table(table: torch.Tensor, old_window: Sequence[int], new_window: Sequence[int]) -> torch.Tensor:
    """The centre of a 2-D Swin bias table: the offsets of a window no larger than the table's, each with its bias
    (the inverse of :func:`embed_rel_pos_bias_table`).

    Args:
        table: bias table, shape ((2Wh - 1) * (2Ww - 1), heads).
        old_window: window of the table, (Wh, Ww).
        new_window: the smaller window, (Wh', Ww'), Wh' <= Wh and Ww' <= Ww.

    Returns:
        Table of shape ((2Wh' - 1) * (2Ww' - 1), heads), same dtype as ``table``.
    """
    grid = offset_grid(table, old_window)  # (heads, 2Wh-1, 2Ww-1)
    (old_h, old_w), (new_h, new_w) = grid.shape[1:], _grid_size(new_window)
    if new_h > old_h or new_w > old_w:
        raise ValueError(
            f"window {_window_2d(new_window)} is larger than the table's {_window_2d(old_window)}: embed it"
        )
    top, left = (old_h - new_h) // 2, (old_w - new_w) // 2  # offset (0, 0) stays central
    return grid[:, top : top + new_h, left : left + new_w].flatten(1).T.contiguous()  # (rows, heads)


def resize_rel_pos_bias_table(
    table: torch.Tensor, old_window: int | Sequence[int], new_window: int | Sequence[int]
) -> torch.Tensor:
    """Resize a 2-D Swin bias table with timm's ``resize_rel_pos_bias_table``: the one resize of the library (a
    pretrained or converted file for another window, ``set_input_size``), timm's Swin's own, so that a resized model
    computes what timm's computes with the same weights. 2-D windows only, as timm's (a ValueError for a 1-D or 3-D
    ``RelativePositionBias``'s).

    timm's resize (from Microsoft's BEiT) places the old offsets on a geometric progression and interpolates the
    new offsets between them (linearly without SciPy), not on an evenly stretched grid.

    Args:
        table: bias table, shape ((2Wh - 1) * (2Ww - 1), heads).
        old_window: window the table was learned for, (Wh, Ww); an int ``w``: ``(w, w)``, as the model takes it.
        new_window: window to resize to, the same way.

    Returns:
        Table of shape ((2Wh' - 1) * (2Ww' - 1), heads), same dtype as ``table``.
    """
    old_window, new_window = _window_2d(old_window), _window_2d(new_window)
    offset_grid(table, old_window)  # checks the table's shape
    old, new = _grid_size(old_window), _grid_size(new_window)
    if old == new:
        return table
    new_shape = (new[0] * new[1], table.shape[1])
    with warnings.catch_warnings():  # timm's interpolation's own, about its indexing and a copy, not the result
        warnings.filterwarnings("ignore", message="torch.searchsorted", category=UserWarning)
        warnings.filterwarnings("ignore", message="Using a non-tuple sequence", category=UserWarning)
        resized = timm_resize_rel_pos_bias_table(table, _grid_to_window(new), new_shape, _grid_to_window(old))
    return resized.contiguous()


def _grid_to_window(grid: tuple[int, int]) -> tuple[int, int]:
    return (grid[0] + 1) // 2, (grid[1] + 1) // 2


def _grid_size(window: int | Sequence[int]) -> tuple[int, int]:
    """(2Wh - 1, 2Ww - 1): the relative offsets of a (Wh, Ww) window (:func:`_window_2d`)."""
    height, width = _window_2d(window)
    return 2 * height - 1, 2 * width - 1


def _window_2d(window: int | Sequence[int]) -> tuple[int, int]:
    """A bias table's window as (Wh, Ww), an int ``w`` as ``(w, w)``
    (:func:`~swinlite.models.swin.check_window`'s rule); a ValueError for one of other than two axes: the tables
    these functions resize, crop and embed are 2-D Swin's."""
    from .models.swin import check_window  # the model module imports this one

    checked = check_window(window)
    if len(checked) != 2:
        raise ValueError(
            f"window {checked} has {counted(len(checked), 'axis', 'axes')}: bias tables are resized, cropped and "
            "embedded for 2-D windows only, (Wh, Ww) or an int w for (w, w)"
        )
    return checked


def offset_grid(table: torch.Tensor, window: Sequence[int]) -> torch.Tensor:
    """A bias table ((2Wh - 1) * (2Ww - 1), heads) as its offset grid (heads, 2Wh - 1, 2Ww - 1); ValueError when
    its shape does not fit ``window``."""
    h, w = _grid_size(window)
    if table.ndim != 2 or table.shape[0] != h * w:
        raise ValueError(
            f"table of shape {tuple(table.shape)} does not fit window {_window_2d(window)}: expected ({h * w}, heads)"
        )
    return table.T.reshape(table.shape[1], h, w)


def _square_window(key: str, num_offsets: int) -> tuple[int, int]:
    """The square window a checkpoint's bias table ``key`` of ``num_offsets`` rows was learned for (a checkpoint does
    not record its window; the released ones are square)."""
    side = math.isqrt(num_offsets)
    if side * side != num_offsets or side % 2 == 0:
        raise ValueError(
            f"the checkpoint's bias table {key} of {num_offsets} rows is not (2w-1)^2: not a square window's, which "
            "is the only kind resized (give the model the checkpoint's window)"
        )
    return (side + 1) // 2, (side + 1) // 2


def missing_weights(state_dict: Mapping[str, torch.Tensor], model: nn.Module) -> tuple[list[str], list[str]]:
    """Model weights a converted state dict lacks: (required ones, optional ones).

    Optional are a classifier (``head.fc.*``, e.g. one of another size that was dropped) and the per-level
    output norms (``out_norms.*``, absent from ImageNet checkpoints): they may start from their initial values.
    """
    absent = [k for k in model.state_dict() if k not in state_dict]
    fresh = [k for k in absent if k.startswith(("out_norms.", "head.fc."))]
    return [k for k in absent if k not in fresh], fresh
