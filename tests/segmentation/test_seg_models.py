"""UperNet on swinlite: shapes at any size, the auxiliary head in training only, weights from elsewhere.

The reference for the heads is Hugging Face's ``UperNetForSemanticSegmentation`` (a port of mmsegmentation's
UPerHead and FCNHead) with a Swin backbone, built offline with random weights; mmsegmentation's layout is written
from it by renaming, as its checkpoints name the same modules.
"""

import re
import warnings

import pytest
import timm
import torch
from pico import PICO
from test_convert_mmdet_hf import to_mmdet

from swinlite.io import read_state_dict, save_safetensors
from swinlite.segmentation.config import SegModelConfig
from swinlite.segmentation.convert import convert_upernet, upernet_layout
from swinlite.segmentation.models import AUX_LEVEL, build_upernet, upsample_to_input
from swinlite.weights import load_strict

HEAD = dict(head_channels=16, aux_channels=8, pool_scales=(1, 2, 3, 6))


def _randomized(model: torch.nn.Module) -> torch.nn.Module:
    """Every parameter and BatchNorm statistic away from its initial value, so that a misplaced one shows."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point():
                noise = torch.randn(tensor.shape, generator=generator)
                tensor.copy_(noise.abs() + 0.5 if "running_var" in name else 1 + 0.2 * noise if "norm" in name
                             and name.endswith("weight") else 0.3 * noise)  # fmt: skip
    return model.eval()


@pytest.fixture(scope="module")
def huggingface(tmp_path_factory):
    """(transformers' UperNet with a pico-sized Swin backbone and random weights, its weights file): the file as
    ``save_pretrained`` writes it, the layout of the hub's checkpoints (transformers 5 renames some modules in
    memory and back on saving)."""
    transformers = pytest.importorskip("transformers")
    swin = transformers.SwinConfig(
        image_size=64, patch_size=2, embed_dim=32, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8], window_size=4,
        drop_path_rate=0.0, out_features=["stage1", "stage2", "stage3", "stage4"],
    )  # fmt: skip
    config = transformers.UperNetConfig(backbone_config=swin, hidden_size=16, auxiliary_channels=8, num_labels=5,
                                        auxiliary_in_channels=128,  # level 2's channels (transformers 4.40 assumed 384)
                                        pool_scales=[1, 2, 3, 6], use_auxiliary_head=True)  # fmt: skip
    model = _randomized(transformers.UperNetForSemanticSegmentation(config))
    folder = tmp_path_factory.mktemp("hf")
    model.save_pretrained(folder)
    return model, next(folder.glob("*.safetensors"))


def _reference(hf, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's logits [B, K, H, W] and its auxiliary head's, at level 2's size."""
    with torch.no_grad():
        features = hf.backbone(x).feature_maps
        return hf(pixel_values=x).logits, hf.auxiliary_head(features)


def _ours(state: dict[str, torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    model = build_upernet(SegModelConfig(name=PICO, **HEAD), 5)
    load_strict(model, state, "converted")
    model.eval()
    with torch.no_grad():
        return model(x).logits, model.auxiliary_head(model.backbone(x)[2])


def _to_mmseg(ours: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """swinlite's layout -> mmsegmentation's: the Swin as mmseg's (mmdet's) backbone, ConvModules' conv / bn."""
    swin = {k.removeprefix("backbone.model."): v for k, v in ours.items() if k.startswith("backbone.model.")}
    heads = {}
    for key, value in ours.items():
        if key.startswith(("decode_head.", "auxiliary_head.")):
            key = re.sub(r"\.classifier\.", ".conv_seg.", key)
            key = re.sub(r"\.0\.(weight)$", r".conv.\1", key) if value.ndim == 4 and "conv_seg" not in key else key
            heads[re.sub(r"\.1\.(weight|bias|running_mean|running_var|num_batches_tracked)$", r".bn.\1", key)] = value
    return to_mmdet(swin) | heads


@pytest.mark.parametrize("layout", ["huggingface", "mmseg"])
def test_foreign_checkpoints_give_the_reference_logits(huggingface, layout: str):
    x = torch.randn(2, 3, 64, 64)  # every stage a window multiple: Hugging Face's Swin pads nothing
    model, path = huggingface
    want, want_aux = _reference(model, x)
    state = read_state_dict(path)
    if layout == "mmseg":
        state = _to_mmseg(convert_upernet(state))
        assert any(k.startswith("backbone.stages.") for k in state) and "decode_head.conv_seg.weight" in state
    assert upernet_layout(state) == layout
    got, got_aux = _ours(convert_upernet({"state_dict": state}), x)
    assert got.shape == (2, 5, 64, 64)
    for ours, reference in ((got, want), (got_aux, want_aux)):  # float32 sums of terms up to a few hundred
        torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-5 * float(reference.abs().max()))


@pytest.mark.parametrize("name", [PICO, "swinlite_v2_pico_patch2_window4_32"])
def test_logits_at_the_input_size_and_the_auxiliary_head_in_training_only(name):
    model = build_upernet(SegModelConfig(name=name, **HEAD), 3)
    x = torch.randn(2, 3, 37, 45)  # no patch or window multiple
    out = model.train()(x)
    assert out.logits.shape == out.aux_logits.shape == (2, 3, 37, 45)
    assert model.eval()(x).aux_logits is None
    without = build_upernet(SegModelConfig(name=PICO, aux_weight=0.0, **HEAD), 3)
    assert without.auxiliary_head is None and without.train()(x).aux_logits is None
    # under bf16 autocast the head's logits are upsampled in fp32 (a bf16 interpolation tied a pixel's top classes)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        logits = model.eval()(x).logits
        head = model.decode_head(model.backbone(x))
    assert head.dtype == torch.bfloat16 and logits.dtype == torch.float32
    want = upsample_to_input(head.float(), model.level_stride(0), x.shape[2:])
    torch.testing.assert_close(logits, want, rtol=0, atol=0)


@pytest.mark.parametrize(("dropout", "pool_scales"), [(0.0, (1, 2)), (0.3, (3,))])
def test_the_heads_dropout_and_pool_scales_are_the_configs(dropout: float, pool_scales: tuple[int, ...]):
    head = dict(HEAD, pool_scales=pool_scales)
    model = build_upernet(SegModelConfig(name=PICO, dropout=dropout, **head), 3).eval()
    assert model.decode_head.dropout.p == model.auxiliary_head.dropout.p == dropout  # before each classifier
    top = model.backbone(torch.zeros(1, 3, 32, 32))[-1]  # [1, C, 2, 2]
    grids = [tuple(pool(top).shape[2:]) for pool in model.decode_head.psp_modules]
    assert grids == [(scale, scale) for scale in pool_scales]


class CellCentres(torch.nn.Module):
    """A stand-in head: logits [B, 2, h, w] that are each cell's centre in input pixels, x then y, for cells
    ``stride`` (height, width) pixels apart; it reads level 0 of the levels (the UperNet head's input) or the one level
    it is given."""

    def __init__(self, stride: tuple[int, int]) -> None:
        super().__init__()
        self.stride = stride

    def forward(self, levels: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
        level = levels if isinstance(levels, torch.Tensor) else levels[0]
        h, w = level.shape[2:]
        rows, cols = ((torch.arange(n) + 0.5) * stride for n, stride in zip((h, w), self.stride, strict=True))
        return torch.stack(torch.meshgrid(cols, rows, indexing="xy")).expand(len(level), 2, h, w)


@pytest.mark.parametrize(
    ("size", "kwargs"),
    [((37, 45), {}), ((32, 32), {}), ((37, 45), {"mask_padding": False}), ((37, 45), {"patch_size": (2, 4)})],
    ids=["odd", "patch_multiple", "cropping_backbone", "patch_2x4"],
)
def test_each_pixel_gets_the_prediction_of_the_cell_over_it(size: tuple[int, int], kwargs: dict):
    """Logits resized straight to an odd input squeezed the backbone's padding into it, every pixel's prediction
    moved toward the top-left (the head's x-centres 0.5 px off mid-image at patch 2, 1.5 px at patch 4 and W=65);
    with mask_padding=False (the remainder past the last patch dropped) the pixels past the last cell take its values;
    a 2x4 patch has cells twice as far apart across as down. A pixel's logit here is the centre of the cell over it,
    clamped to the first and last centres."""
    model = build_upernet(SegModelConfig(name=PICO, kwargs=kwargs, **HEAD), 2).train()
    model.decode_head, model.auxiliary_head = (CellCentres(model.level_stride(i)) for i in (0, AUX_LEVEL))
    x = torch.zeros(1, 3, *size)
    with torch.no_grad():
        out, levels = model(x), model.backbone(x)
    for logits, i in ((out.logits, 0), (out.aux_logits, AUX_LEVEL)):
        (sh, sw), (h, w) = model.level_stride(i), levels[i].shape[2:]

        def centres(pixels: int, cells: int, stride: int) -> torch.Tensor:
            return (torch.arange(pixels) + 0.5).clamp(stride / 2, (cells - 0.5) * stride)

        torch.testing.assert_close(logits[0, 0, 0], centres(size[1], w, sw), rtol=0, atol=1e-4)  # x along a row
        torch.testing.assert_close(logits[0, 1, :, 0], centres(size[0], h, sh), rtol=0, atol=1e-4)  # y down a column


def test_grad_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    model = build_upernet(SegModelConfig(name=PICO, **HEAD), 3).eval()  # eval: dropout and BN statistics fixed
    x = torch.randn(2, 3, 32, 32)

    def grads() -> list[torch.Tensor]:
        model.zero_grad()
        model(x).logits.square().mean().backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]  # the auxiliary head: none

    plain = grads()
    model.set_grad_checkpointing(True)
    assert all(stage.grad_checkpointing for stage in model.backbone.model.layers)
    for a, b in zip(plain, grads(), strict=True):
        torch.testing.assert_close(a, b)


def test_pretrained_backbone_file_or_whole_upernet_file(tmp_path):
    classifier = timm.create_model(PICO)  # a classification checkpoint: the backbone loads, the heads start fresh
    save_safetensors(tmp_path / "cls.safetensors", classifier.state_dict())
    with pytest.warns(UserWarning, match="out_norms"):
        model = build_upernet(SegModelConfig(name=PICO, pretrained=str(tmp_path / "cls.safetensors"), **HEAD), 3)
    block = "layers.2.blocks.1.attn.qkv.weight"
    assert torch.equal(model.backbone.model.get_parameter(block), classifier.get_parameter(block))
    save_safetensors(tmp_path / "part.safetensors", {k: v for k, v in classifier.state_dict().items() if k != block})
    part = SegModelConfig(name=PICO, pretrained=str(tmp_path / "part.safetensors"), **HEAD)
    with pytest.raises(ValueError, match=f"1 model weight missing from it: {block}$"):
        build_upernet(part, 3)
    part.kwargs = {"pretrained_strict": False}  # was ignored (still refused); loads now as in classification
    missing = f"pretrained_strict=False: 1 model weight missing .* values: {block}$"
    with pytest.warns(UserWarning, match="out_norms"), pytest.warns(UserWarning, match=missing):
        lenient = build_upernet(part, 3).backbone.model
    assert torch.equal(lenient.layers[2].blocks[0].attn.qkv.weight, classifier.layers[2].blocks[0].attn.qkv.weight)
    trained = _randomized(build_upernet(SegModelConfig(name=PICO, **HEAD), 3))
    save_safetensors(tmp_path / "seg.safetensors", trained.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same classes: everything loads, nothing to say
        same = build_upernet(SegModelConfig(name=PICO, pretrained=str(tmp_path / "seg.safetensors"), **HEAD), 3)
    pairs = zip(same.state_dict().values(), trained.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    with pytest.warns(UserWarning, match=r"the classifiers start fresh \(3 classes in the file, 7 here\)"):
        other = build_upernet(SegModelConfig(name=PICO, pretrained=str(tmp_path / "seg.safetensors"), **HEAD), 7)
    assert torch.equal(other.decode_head.fpn_bottleneck[0].weight, trained.decode_head.fpn_bottleneck[0].weight)
    with pytest.warns(UserWarning, match=r"its auxiliary head is left out \(model.aux_weight=0\)"):
        plain = build_upernet(SegModelConfig(name=PICO, pretrained=str(tmp_path / "seg.safetensors"), aux_weight=0.0,
                                             **HEAD), 3)  # fmt: skip
    assert plain.auxiliary_head is None and torch.equal(plain.decode_head.classifier.weight,
                                                        trained.decode_head.classifier.weight)  # fmt: skip
    named = tmp_path / "named.safetensors"  # a run's file records its classes
    save_safetensors(named, trained.state_dict(), {"task": "segmentation", "classes": ["bg", "a", "b"]})
    for classes, warned in ((["bg", "a", "b"], False), (["bg", "x", "y"], True)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            build_upernet(SegModelConfig(name=PICO, pretrained=str(named), **HEAD), 3, classes)
        other = [str(w.message) for w in caught if "trained on other classes" in str(w.message)]
        message = f"model.pretrained {named}: its classifiers were trained on other classes (bg, a, b) than this run's"
        assert other == ([f"{message} (bg, x, y); they are kept, row i now class i of the data"] if warned else [])
    wider = SegModelConfig(name=PICO, pretrained=str(tmp_path / "seg.safetensors"), **{**HEAD, "head_channels": 24})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same classes: no "classifiers start fresh (3 classes in the file, 3 here)"
        with pytest.raises(ValueError, match="does not fit UperNet exactly"):
            build_upernet(wider, 3)


@pytest.mark.parametrize(("written", "built"), [({"out_norm": False}, {}), ({}, {"out_norm": False})])
def test_a_whole_upernet_of_another_out_norm_is_refused_with_the_settings_to_match(tmp_path, written, built):
    """The refusal listed the missing (or surplus) out_norms keys alone; as detection's, it says the file loads whole
    into an UperNet built as the run that wrote it."""
    trained = build_upernet(SegModelConfig(name=PICO, kwargs=written, **HEAD), 3)
    save_safetensors(tmp_path / "seg.safetensors", trained.state_dict())
    cfg = SegModelConfig(name=PICO, pretrained=str(tmp_path / "seg.safetensors"), kwargs=built, **HEAD)
    with pytest.raises(ValueError, match="out_norms") as refused:
        build_upernet(cfg, 3)
    assert str(refused.value).endswith(
        "; an UperNet's weights load whole into an UperNet built alike (model.name, model.head_channels, "
        "model.pool_scales, model.aux_channels, model.kwargs (out_norm included) as the run that wrote them)"
    )
