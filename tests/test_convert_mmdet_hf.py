"""mmdet/mmpretrain, Microsoft's detection / segmentation repos' and Hugging Face Swin layouts -> swinlite.

The foreign state dicts are built here, by hand, from a random swinlite (or timm) model following each
library's documented module structure (transformers is not a dependency); converting them back
must reproduce the model's outputs (exactly where the source is swinlite's).
"""

import re
import warnings

import pytest
import timm
import torch
import torch.nn.functional as F
from pico import PICO
from reference import as_microsoft_release
from safetensors.torch import load_file
from scriptkit import run_script
from timm.models.swin_transformer_v2 import WindowAttention as WindowAttentionV2

import swinlite  # noqa: F401  (registers the models)
from swinlite.convert import convert_state_dict, detect_layout
from swinlite.io import save_safetensors
from swinlite.segmentation.convert import convert_upernet
from swinlite.weights import load_checkpoint

# timm's Swin at pico's sizes, at 64 x 64: no stage's window shrunk to its map
TIMM_PICO = dict(img_size=64, patch_size=2, embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8), window_size=4)


def _unfold_permutation(channels: int) -> torch.Tensor:
    """perm with unfold_vector[j] == reference_vector[perm[j]] for one 2x2 neighbourhood of C channels."""
    ids = torch.arange(channels * 4, dtype=torch.float32).reshape(1, channels, 2, 2)  # id of (c, dh, dw)
    reference = torch.cat([ids[0, :, dh, dw] for dh, dw in ((0, 0), (1, 0), (0, 1), (1, 1))])  # (4C,) block-major
    unfolded = F.unfold(ids, kernel_size=2, stride=2)[0, :, 0]  # (4C,) as nn.Unfold orders it
    return torch.tensor([int((reference == v).nonzero()) for v in unfolded])


def to_mmdet(sd: dict[str, torch.Tensor], prefix: str = "backbone.") -> dict[str, torch.Tensor]:
    """``sd`` (swinlite's or timm's layout) as mmdet / mmpretrain save it; a Swin-V2's as mmpretrain's
    ``SwinTransformerV2``: downsample at the start of a stage, not the end, its norm after the reduction (over the 2C
    outputs, not in unfold order)."""
    v2 = any(k.endswith(".attn.logit_scale") for k in sd)
    out = {}
    for key, value in sd.items():
        if m := re.match(r"^layers\.(\d+)\.downsample\.(norm|reduction)\.(weight|bias)$", key):
            if not (v2 and m.group(2) == "norm"):
                value = value[..., _unfold_permutation(value.shape[-1] // 4)]
            key = f"stages.{int(m.group(1)) - (not v2)}.downsample.{m.group(2)}.{m.group(3)}"
        elif m := re.match(r"^out_norms\.(\d+)\.(.*)$", key):
            key = f"norm{m.group(1)}.{m.group(2)}"
        elif key.startswith(("norm.", "head.")):
            continue
        key = key.replace("patch_embed.proj.", "patch_embed.projection.")
        key = re.sub(r"^layers\.(\d+)\.blocks\.", r"stages.\1.blocks.", key)
        key = key.replace("attn.rel_pos.table", "attn.relative_position_bias_table")
        key = key.replace("attn.rel_pos.mlp.", "attn.cpb_mlp.").replace(".attn.", ".attn.w_msa.")
        key = key.replace("mlp.fc1.", "ffn.layers.0.0.").replace("mlp.fc2.", "ffn.layers.1.")
        out[prefix + key] = value
        if key.endswith(("relative_position_bias_table", "logit_scale")):  # buffers it saves, the converter drops
            attention = key.rsplit(".", 1)[0]
            out[f"{prefix}{attention}.relative_position_index"] = torch.zeros(16, 16, dtype=torch.long)
            if v2:  # of its configured window, the 4x4 of these tests (mmpretrain's WindowMSAV2 builds timm's)
                coords = WindowAttentionV2(dim=8, window_size=(4, 4), num_heads=1).relative_coords_table
                out[f"{prefix}{attention}.relative_coords_table"] = coords
    return out


# transformers 5's names of a block's modules (its conversion_mapping for "swin"), in memory and in what it saves
HF5_BLOCK_NAMES = {
    "attention.self.query.": "attention.q_proj.",
    "attention.self.key.": "attention.k_proj.",
    "attention.self.value.": "attention.v_proj.",
    "attention.self.relative_position_bias_table": "attention.relative_position_bias.relative_position_bias_table",
    "attention.output.dense.": "attention.o_proj.",
    "intermediate.dense.": "mlp.fc1.",
    "output.dense.": "mlp.fc2.",
}


def to_huggingface(sd: dict[str, torch.Tensor], prefix: str = "swin.", version: int = 4) -> dict[str, torch.Tensor]:
    """``sd`` in the layout of transformers ``version`` (4 or 5)."""
    out = {}
    block_names = {
        "norm1.": "layernorm_before.",
        "attn.proj.": "attention.output.dense.",
        "attn.rel_pos.table": "attention.self.relative_position_bias_table",
        "norm2.": "layernorm_after.",
        "mlp.fc1.": "intermediate.dense.",
        "mlp.fc2.": "output.dense.",
    }
    if version == 5:
        block_names = {ours: HF5_BLOCK_NAMES.get(theirs, theirs) for ours, theirs in block_names.items()}
    for key, value in sd.items():
        if key.startswith("head.fc."):
            out[key.replace("head.fc.", "classifier.")] = value
            continue
        if m := re.match(r"^out_norms\.(\d+)\.(.*)$", key):
            out[f"{prefix}hidden_states_norms.stage{int(m.group(1)) + 1}.{m.group(2)}"] = value
            continue
        if m := re.match(r"^layers\.(\d+)\.blocks\.(\d+)\.(.*)$", key):
            block, rest = f"encoder.layers.{m.group(1)}.blocks.{m.group(2)}.", m.group(3)
            if rest.startswith("attn.qkv."):
                for name, part in zip(("query", "key", "value"), value.chunk(3, dim=0), strict=True):
                    name = f"attention.self.{name}." if version == 4 else HF5_BLOCK_NAMES[f"attention.self.{name}."]
                    out[f"{prefix}{block}{name}{rest.split('.')[-1]}"] = part
                continue
            for ours, theirs in block_names.items():
                rest = rest.replace(ours, theirs)
            key = block + rest
        if m := re.match(r"^layers\.(\d+)\.downsample\.(.*)$", key):
            key = f"encoder.layers.{int(m.group(1)) - 1}.downsample.{m.group(2)}"
        key = key.replace("patch_embed.proj.", "embeddings.patch_embeddings.projection.")
        key = key.replace("patch_embed.norm.", "embeddings.norm.")
        key = re.sub(r"^norm\.", "layernorm.", key)
        out[prefix + key] = value
    return out


def _randomize(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)  # norms and biases away from their 1/0 init, so misplaced ones show
    return model.eval()


def _features(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    return model.forward_intermediates(x, intermediates_only=True)


def test_mmdet_detection_backbone_with_level_norms():
    source = _randomize(timm.create_model(PICO, out_norm=True, num_classes=0))
    checkpoint = {"meta": {"epoch": 12}, "state_dict": to_mmdet(source.state_dict())}
    checkpoint["state_dict"]["neck.lateral_convs.0.conv.weight"] = torch.zeros(8, 32, 1, 1)
    checkpoint["state_dict"]["rpn_head.rpn_conv.weight"] = torch.zeros(8, 8, 3, 3)
    assert detect_layout(checkpoint["state_dict"]) == "mmdet"
    target = timm.create_model(PICO, out_norm=True, num_classes=0).eval()
    load_checkpoint(target, checkpoint)
    x = torch.randn(2, 3, 37, 45)
    for got, want in zip(_features(target, x), _features(source, x), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_converted_backbone_with_level_norms_is_saved(tmp_path):
    """Its last level's norm is also the final norm, one tensor under two keys, which safetensors refused ("Some
    tensors share memory"): scripts/convert_checkpoint.py failed with a traceback on mmdet and Hugging Face
    backbones."""
    source = _randomize(timm.create_model(PICO, out_norm=True, num_classes=0))
    save_safetensors(tmp_path / "b.safetensors", convert_state_dict({"state_dict": to_mmdet(source.state_dict())}))
    target = timm.create_model(PICO, out_norm=True, num_classes=0).eval()
    target.load_state_dict(load_file(tmp_path / "b.safetensors"))
    x = torch.randn(2, 3, 37, 45)
    for got, want in zip(_features(target, x), _features(source, x), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_mmdet_merging_matches_an_unfold_reference():
    """Independent of the converter's own permutation: an nn.Unfold merging with the mmdet weights."""
    source = _randomize(timm.create_model(PICO, num_classes=0))
    mm = to_mmdet(source.state_dict(), prefix="")
    x = torch.randn(2, 6, 10, 32)  # (B, H, W, C) into stage 1's merging
    y = F.unfold(x.permute(0, 3, 1, 2), kernel_size=2, stride=2).transpose(1, 2)  # (B, 15, 4C) in unfold order
    y = F.layer_norm(y, (128,), mm["stages.0.downsample.norm.weight"], mm["stages.0.downsample.norm.bias"])
    y = y @ mm["stages.0.downsample.reduction.weight"].T
    target = timm.create_model(PICO, num_classes=0)
    target.load_state_dict(convert_state_dict(mm), strict=False)  # mmdet has no final norm: no model, no fit check
    torch.testing.assert_close(target.layers[1].downsample(x).reshape(2, 15, 64), y)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_mmpretrain_classifier(version):
    """V2: mmpretrain's ``SwinTransformerV2`` (``attn.w_msa.cpb_mlp``, ``logit_scale``, ``q_bias`` / ``v_bias``;
    merging at the start of a stage, its norm after the reduction) from timm's Swin-V2 gives timm's logits; it was
    refused ("15 keys of the mmdet layout did not convert")."""
    if version == "v1":
        source, target = _randomize(timm.create_model(PICO)), timm.create_model(PICO).eval()
    else:
        source = _randomize(timm.create_model("swinv2_tiny_window8_256", num_classes=10, **TIMM_PICO))
        target = timm.create_model("swinlite_v2_pico_patch2_window4_32", img_size=64).eval()
    sd = to_mmdet(source.state_dict())
    sd["backbone.norm3.weight"], sd["backbone.norm3.bias"] = source.norm.weight, source.norm.bias
    sd["head.fc.weight"], sd["head.fc.bias"] = source.head.fc.weight, source.head.fc.bias
    load_checkpoint(target, {"state_dict": sd})
    x = torch.randn(2, 3, 64, 64)
    exact = dict(rtol=0, atol=0) if version == "v1" else {}  # swinlite's own computation; timm's: float tolerance
    torch.testing.assert_close(target(x), source(x), **exact)


@pytest.mark.parametrize("task", ["detection", "segmentation"])
def test_microsoft_detection_and_segmentation_repos_backbones(task):
    """The checkpoints of Swin-Transformer-Object-Detection (mmdet 2: Mask R-CNN, Cascade) and
    Swin-Transformer-Semantic-Segmentation (mmseg: UperNet): the release's Swin behind ``backbone.``, per-level norms
    ``norm0..3`` and no final norm, beside necks and heads. They were an unknown layout (UperNet's backbone: keys that
    did not convert); converted, the Swin gives timm's stage outputs through those norms."""
    source = _randomize(timm.create_model("swin_tiny_patch4_window7_224", num_classes=0, **TIMM_PICO))
    norms = {f"norm{i}.{p}": torch.randn(32 * 2**i) for i in range(4) for p in ("weight", "bias")}
    release = as_microsoft_release(source.state_dict(), window=4)["model"]
    state = {f"backbone.{k}": v for k, v in release.items() if not k.startswith("norm.")}
    state |= {f"backbone.{k}": v for k, v in norms.items()}
    target = timm.create_model(PICO, img_size=64, out_norm=True, num_classes=0).eval()
    if task == "detection":
        state["neck.lateral_convs.0.conv.weight"] = torch.zeros(8, 32, 1, 1)
        state["roi_head.bbox_head.fc_cls.weight"] = torch.zeros(81, 8)
        assert detect_layout(state) == "microsoft-backbone"
        load_checkpoint(target, {"meta": {"epoch": 36}, "state_dict": state})
    else:  # UperNet's Swin, pruned of the final norm (its features-only backbone does not use it)
        state |= {"decode_head.conv_seg.weight": torch.zeros(5, 16, 1, 1), "decode_head.conv_seg.bias": torch.zeros(5)}
        converted = convert_upernet({"state_dict": state})
        swin = {k.removeprefix("backbone.model."): v for k, v in converted.items() if k.startswith("backbone.model.")}
        loaded = target.load_state_dict(swin, strict=False)
        assert set(loaded.missing_keys) == {"norm.weight", "norm.bias"} and not loaded.unexpected_keys
    x = torch.randn(2, 3, 64, 64)
    want = []  # timm's stage outputs through the checkpoint's norms
    for level, y in enumerate(source.forward_intermediates(x, intermediates_only=True)):
        weight, bias = norms[f"norm{level}.weight"], norms[f"norm{level}.bias"]
        want.append(F.layer_norm(y.permute(0, 2, 3, 1), weight.shape, weight, bias))  # (B, H, W, C)
    got = target.forward_intermediates(x, intermediates_only=True, output_fmt="NHWC")
    for level, (g, w) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(g, w, msg=f"level {level}")


@pytest.mark.parametrize("version", [4, 5], ids=["transformers4", "transformers5"])
@pytest.mark.parametrize("prefix", ["swin.", ""], ids=["SwinForImageClassification", "SwinModel"])
def test_huggingface_classifier_and_model(prefix, version):
    source = _randomize(timm.create_model(PICO))
    sd = to_huggingface(source.state_dict(), prefix, version)
    if not prefix:  # SwinModel has no classifier
        sd = {k: v for k, v in sd.items() if not k.startswith("classifier.")}
    assert detect_layout(sd) == "huggingface"
    query = "attention.self.query" if version == 4 else "attention.q_proj"
    assert f"{prefix}encoder.layers.0.blocks.0.{query}.weight" in sd
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a SwinModel computes as swinlite does: no SwinBackbone note
        converted = convert_state_dict(sd)
    assert converted.keys() == {k for k in source.state_dict() if prefix or not k.startswith("head.")}
    target = timm.create_model(PICO).eval()
    if prefix:
        load_checkpoint(target, sd)
    else:
        with pytest.warns(UserWarning, match="head.fc"):
            load_checkpoint(target, sd)
    x = torch.randn(2, 3, 29, 35)
    torch.testing.assert_close(target.forward_features(x), source.forward_features(x), rtol=0, atol=0)
    if prefix:
        torch.testing.assert_close(target(x), source(x), rtol=0, atol=0)


def test_huggingface_backbone_level_norms():
    """A SwinBackbone's file converts exactly, with a warning: transformers' SwinBackbone runs its Swin with
    always_partition=True, which keeps the shift of a stage whose map fits one window (the 7x7 last stage at 224),
    so its last level(s) there differed from swinlite's by 0.43, silently."""
    source = _randomize(timm.create_model(PICO, out_norm=True, num_classes=0))
    sd = {k: v for k, v in to_huggingface(source.state_dict(), prefix="").items() if not k.startswith("layernorm.")}
    target = timm.create_model(PICO, out_norm=True, num_classes=0).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_checkpoint(target, sd)
    notes = [str(w.message) for w in caught if "SwinBackbone" in str(w.message)]
    assert len(notes) == 1 and "always_partition=True, which keeps the shifted windows" in notes[0], notes
    x = torch.randn(1, 3, 40, 24)
    for got, want in zip(_features(target, x), _features(source, x), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_level_norms_into_a_model_without_them_warn():
    sd = to_mmdet(_randomize(timm.create_model(PICO, out_norm=True, num_classes=0)).state_dict())
    with pytest.warns(UserWarning, match=r"levels \[0, 1, 2\] \(level 3's loads as the final norm\).*out_norm=True"):
        load_checkpoint(timm.create_model(PICO, num_classes=0), sd)


def test_checkpoint_of_another_model_is_a_clear_error():
    nano = to_mmdet(timm.create_model("swinlite_nano_patch2_window4_64", num_classes=0).state_dict())
    with pytest.raises(ValueError, match=r"checkpoint keys did not map onto SwinTransformer: layers\.0\.blocks\.1\."):
        load_checkpoint(timm.create_model(PICO, num_classes=0), nano)
    wider = to_mmdet(timm.create_model(PICO, embed_dim=48, num_classes=0).state_dict())
    with pytest.raises(ValueError, match=r"does not fit SwinTransformer: .* has shape \(48, 3, 2, 2\)"):
        load_checkpoint(timm.create_model(PICO, num_classes=0), wider)
    partial = {k: v for k, v in timm.create_model(PICO).state_dict().items() if not k.startswith("layers.3.")}
    with pytest.raises(ValueError, match=r"missing from it: layers\.3\."):
        load_checkpoint(timm.create_model(PICO), partial)
    with pytest.raises(ValueError, match="unknown checkpoint layout: expected a swinlite, timm"):
        convert_state_dict({"encoder.weight": torch.zeros(1)})


def test_timm_pretrained_file_path_for_features_only(tmp_path):
    """The timm way: pretrained=True with a local mmdet checkpoint file goes through convert_state_dict."""
    source = _randomize(timm.create_model(PICO, out_norm=True, num_classes=0))
    path = tmp_path / "mmdet_swin.pth"
    torch.save({"state_dict": to_mmdet(source.state_dict())}, path)
    features = timm.create_model(
        PICO, features_only=True, out_norm=True, pretrained=True, pretrained_cfg_overlay=dict(file=str(path))
    ).eval()
    x = torch.randn(1, 3, 40, 40)
    for got, want in zip(features(x), _features(source, x), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_hugging_face_swin_v2_state_dict_is_named_as_unsupported():
    """Detected as Hugging Face Swin (V1), it failed in the converter with "max() arg is an empty sequence"."""
    block = "swinv2.encoder.layers.0.blocks.0.attention.self."
    keys = ["swinv2.embeddings.patch_embeddings.projection.weight", block + "query.weight",
            block + "continuous_position_bias_mlp.0.weight", block + "logit_scale"]  # fmt: skip
    with pytest.raises(ValueError, match="a Hugging Face Swin-V2 state dict: not a layout swinlite converts"):
        convert_state_dict(dict.fromkeys(keys, torch.zeros(1)))


def _backbone_without_last_norm(layout: str) -> dict[str, torch.Tensor]:
    """A detection checkpoint of ``layout`` whose backbone's out_indices leave out the last stage: its per-level norms
    norm0..2, no norm3 (the one that stands for the final norm)."""
    if layout == "mmdet":
        state = to_mmdet(timm.create_model(PICO, out_norm=True, num_classes=0).state_dict())
    else:
        source = timm.create_model("swin_tiny_patch4_window7_224", num_classes=0, **TIMM_PICO)
        release = as_microsoft_release(source.state_dict(), window=4)["model"]
        state = {f"backbone.{k}": v for k, v in release.items() if not k.startswith("norm.")}
        state |= {f"backbone.norm{i}.{p}": torch.ones(32 * 2**i) for i in range(4) for p in ("weight", "bias")}
    state["neck.lateral_convs.0.conv.weight"] = torch.zeros(8, 32, 1, 1)
    return {k: v for k, v in state.items() if not k.startswith("backbone.norm3.")}


@pytest.mark.parametrize("layout", ["mmdet", "microsoft-backbone"])
def test_a_backbone_without_its_last_norm_is_refused_by_a_classifier_naming_why(layout, tmp_path, capsys):
    """A classifier refused such a file blaming "a swinlite detection or segmentation run's trained with
    model.kwargs.out_norm=false", and convert_checkpoint.py's note of the missing norm left it out; both name its cause
    now, in the loader's words."""
    state = _backbone_without_last_norm(layout)
    assert detect_layout(state) == layout
    whose = "an mmdet, mmseg or mmpretrain" if layout == "mmdet" else "a Microsoft detection or segmentation repo's"
    cause = (
        f"its weights are {whose} Swin backbone's, saved without its last stage's output norm, which stands for it "
        "(out_indices without the last stage)"
    )
    with (
        pytest.raises(ValueError, match=re.escape(f"it has no final norm (norm.*), which the model uses: {cause}; ")),
        pytest.warns(UserWarning, match=r"dropping per-level output norms of levels \[0, 1, 2\]"),
    ):
        load_checkpoint(timm.create_model(PICO, img_size=64, num_classes=0), {"state_dict": state})
    torch.save({"state_dict": state}, tmp_path / "det.pth")
    capsys.readouterr()
    assert run_script("convert_checkpoint", [tmp_path / "det.pth", tmp_path / "backbone.safetensors"]) == 0
    assert f"; it has no final norm: {cause}; it starts a detection or segmentation run" in capsys.readouterr().out
