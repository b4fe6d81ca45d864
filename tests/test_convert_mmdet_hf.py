"""mmdet/mmpretrain and Hugging Face Swin layouts -> swinlite.

The foreign state dicts are built here, by hand, from a random swinlite model following each
library's documented module structure (transformers is not a dependency); converting them back
must reproduce the model's outputs exactly.
"""

import re

import pytest
import timm
import torch
import torch.nn.functional as F
from pico import PICO
from safetensors.torch import load_file

import swinlite  # noqa: F401  (registers the models)
from swinlite.convert import convert_state_dict, detect_layout
from swinlite.io import save_safetensors
from swinlite.weights import load_checkpoint


def _unfold_permutation(channels: int) -> torch.Tensor:
    """perm with unfold_vector[j] == reference_vector[perm[j]] for one 2x2 neighbourhood of C channels."""
    ids = torch.arange(channels * 4, dtype=torch.float32).reshape(1, channels, 2, 2)  # id of (c, dh, dw)
    reference = torch.cat([ids[0, :, dh, dw] for dh, dw in ((0, 0), (1, 0), (0, 1), (1, 1))])  # (4C,) block-major
    unfolded = F.unfold(ids, kernel_size=2, stride=2)[0, :, 0]  # (4C,) as nn.Unfold orders it
    return torch.tensor([int((reference == v).nonzero()) for v in unfolded])


def to_mmdet(sd: dict[str, torch.Tensor], prefix: str = "backbone.") -> dict[str, torch.Tensor]:
    out = {}
    for key, value in sd.items():
        if m := re.match(r"^layers\.(\d+)\.downsample\.(norm|reduction)\.(weight|bias)$", key):
            perm = _unfold_permutation(value.shape[-1] // 4)
            key, value = f"stages.{int(m.group(1)) - 1}.downsample.{m.group(2)}.{m.group(3)}", value[..., perm]
        elif m := re.match(r"^out_norms\.(\d+)\.(.*)$", key):
            key = f"norm{m.group(1)}.{m.group(2)}"
        elif key.startswith(("norm.", "head.")):
            continue
        key = key.replace("patch_embed.proj.", "patch_embed.projection.")
        key = re.sub(r"^layers\.(\d+)\.blocks\.", r"stages.\1.blocks.", key)
        key = key.replace("attn.rel_pos.table", "attn.w_msa.relative_position_bias_table")
        key = key.replace("attn.qkv.", "attn.w_msa.qkv.").replace("attn.proj.", "attn.w_msa.proj.")
        key = key.replace("mlp.fc1.", "ffn.layers.0.0.").replace("mlp.fc2.", "ffn.layers.1.")
        out[prefix + key] = value
        if key.endswith("relative_position_bias_table"):
            index_key = key.replace("relative_position_bias_table", "relative_position_index")
            out[prefix + index_key] = torch.zeros(16, 16, dtype=torch.long)
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


def test_mmpretrain_classifier():
    source = _randomize(timm.create_model(PICO))
    sd = to_mmdet(source.state_dict())
    sd["backbone.norm3.weight"], sd["backbone.norm3.bias"] = source.norm.weight, source.norm.bias
    sd["head.fc.weight"], sd["head.fc.bias"] = source.head.fc.weight, source.head.fc.bias
    target = timm.create_model(PICO).eval()
    load_checkpoint(target, {"state_dict": sd})
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(target(x), source(x), rtol=0, atol=0)


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
    assert convert_state_dict(sd).keys() == {k for k in source.state_dict() if prefix or not k.startswith("head.")}
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
    source = _randomize(timm.create_model(PICO, out_norm=True, num_classes=0))
    sd = {k: v for k, v in to_huggingface(source.state_dict(), prefix="").items() if not k.startswith("layernorm.")}
    target = timm.create_model(PICO, out_norm=True, num_classes=0).eval()
    load_checkpoint(target, sd)
    x = torch.randn(1, 3, 40, 24)
    for got, want in zip(_features(target, x), _features(source, x), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_level_norms_into_a_model_without_them_warn():
    sd = to_mmdet(_randomize(timm.create_model(PICO, out_norm=True, num_classes=0)).state_dict())
    with pytest.warns(UserWarning, match=r"levels \[0, 1, 2, 3\].*out_norm=True"):
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
