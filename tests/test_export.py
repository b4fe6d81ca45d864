"""One exported graph for every input size (swinlite.export): torch.export with a symbolic batch, height and width,
and the ONNX file made from it in ONNX Runtime, against eager PyTorch (whose reference path tests/models pins to
timm, torchvision and naive loops)."""

import json
import logging
import os
import re
import signal
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import sympy
import timm
import torch
import torch.nn.functional as F
from onnxkit import write_classifier
from pico import PICO
from torch import nn

import swinlite
from swinlite import export
from swinlite.export import (
    FeatureExtractor,
    FPNFeatures,
    build_exportable,
    check_onnx,
    check_sizes,
    checked_output,
    default_size_range,
    export_metadata,
    export_onnx,
    export_program,
    onnx_max_abs_error,
    quantize_dynamic,
    scratch_folder,
    write_onnx,
)
from swinlite.fpn import build_fpn_backbone
from swinlite.io import read_metadata, read_state_dict, save_safetensors
from swinlite.models.swin import padded_size, stage_maps

# (batch, H, W): one patch; one window at every stage (no shift anywhere); not patch multiples; the sizes
# that a patch-2 model takes on a CPU in a test
SIZES = [(1, 2, 2), (2, 3, 5), (1, 8, 8), (3, 36, 44), (1, 97, 131), (1, 224, 224), (1, 250, 333)]


@pytest.fixture(scope="module")
def classifier(onnx_classifier):
    """The PyTorch model the ONNX file was exported from (fast modules, as the export saw them)."""
    return build_exportable(None, checkpoint=onnx_classifier[0])


@pytest.mark.parametrize("batch,height,width", SIZES)
def test_one_file_equals_eager_at_every_size(onnx_classifier, classifier, batch, height, width):
    x = torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(height))
    assert onnx_max_abs_error(onnx_classifier[1], classifier, x) <= 1e-4


def test_metadata_names_the_sizes_and_the_classes(onnx_classifier):
    _, path = onnx_classifier
    meta = {p.key: json.loads(p.value) for p in onnx.load(path).metadata_props}
    assert meta["input_sizes"] == {"height": [2, 512], "width": [2, 512]}
    assert meta["task"] == "classification" and meta["classes"] == ["cat", "dog", "éclair"]
    graph_input = onnx.load(path).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param != "" for d in graph_input] == [True, False, True, True]  # batch, 3, H, W


def test_the_file_names_its_dynamic_dims(onnx_classifier, pools_file):
    """The dims were named after torch.export's symbols (images ['s77', 3, 's53', 's0'], logits ['s77', 3], a map's
    height '((s53 + 1)//2)'); the file names them batch, height and width wherever they appear and computes what it
    computed (the classifier's file: test_one_file_equals_eager_at_every_size; the pools' file, whose first output is
    a strided conv's map: test_adaptive_average_pooling_modules_export_for_every_size at four sizes)."""
    session = ort.InferenceSession(str(onnx_classifier[1]), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == ["batch", 3, "height", "width"]
    assert session.get_outputs()[0].shape == ["batch", 3]
    model, path = pools_file  # maps of (size - 3) // 4 + 1 first
    batch, channels, height, width = ort.InferenceSession(str(path)).get_outputs()[0].shape
    assert (batch, channels) == ("batch", 4) and "height" in height and "width" in width
    graph = onnx.load(path).graph
    assert graph.value_info  # the conv's output and the pools' bin matrices, inside the graph
    values = [*graph.input, *graph.output, *graph.value_info]
    dims = [d.dim_param for v in values for d in v.type.tensor_type.shape.dim if d.dim_param]
    assert not [d for d in dims if re.search(r"\bs\d+\b", d)]  # no symbol of torch.export's left
    assert onnx_max_abs_error(path, model, torch.randn(3, 3, 64, 33)) < 1e-5


@pytest.mark.parametrize("nominal,size_range", [((32, 32), (2, 512)), ((32, 32), (32, 512)), ((48, 48), (40, 48)),
                                                ((2, 2), (2, 3)), ((3, 3), (2, 3))])  # fmt: skip
def test_the_check_runs_three_sizes_the_smallest_at_batch_1(nominal, size_range, monkeypatch):
    """A model's size that was the range's smallest was dropped as a duplicate: two sizes were checked, where the docs
    promise three, the smallest last (at batch 1, since the second runs at batch 2: the test below)."""
    low, high = size_range
    sizes = check_sizes(nominal, size_range)
    assert len(set(sizes)) == 3 and all(low <= side <= high for size in sizes for side in size)
    assert sizes[0] == nominal or nominal == (low, low)
    runs = []
    monkeypatch.setattr(export, "onnx_max_abs_error", lambda path, model, x: runs.append(tuple(x.shape)) or 0.0)
    check_onnx(Path("m.onnx"), nn.Identity(), sizes)
    assert runs[2] == (1, 3, low, low) and [b for b, *_ in runs] == [3, 2, 1]


def _stages(model: nn.Module, height: int, width: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(map, window) of each stage of a Swin fed a ``height`` x ``width`` image (padded, or cropped, to patches)."""
    sides = zip((height, width), model.patch_size, strict=True)
    grid = tuple((side + p - 1) // p if model.mask_padding else side // p for side, p in sides)
    windows = [stage.blocks[0].window for stage in model.layers]
    return list(zip(stage_maps(grid, len(windows)), windows, strict=True))


@pytest.mark.parametrize("name", timm.list_models("swinlite_*"))
def test_the_check_runs_a_padded_size_shifted_along_one_side_at_batch_2(name, monkeypatch):
    """Swin-T's check ran 224x224 at batch 3, 253x339 at batch 1, 4x4 at batch 2: no map padded to several windows at
    a batch above 1 (a padding mask broadcast wrongly over the batch passed it), and no stage one window along one
    side and several along the other (whose blocks shift along the other only)."""
    with torch.device("meta"):
        model = timm.create_model(name)
    sizes = check_sizes(tuple(model.pretrained_cfg["input_size"][1:]), default_size_range(model))
    runs = []
    monkeypatch.setattr(export, "onnx_max_abs_error", lambda path, model, x: runs.append(tuple(x.shape)) or 0.0)
    check_onnx(Path("m.onnx"), nn.Identity(), sizes)

    def covered(batch: int, height: int, width: int) -> bool:
        stages = _stages(model, height, width)
        (first, window), padded = stages[0], padded_size(*stages[0])
        several = padded[0] > window[0] or padded[1] > window[1]
        one_sided = any((h <= wh) != (w <= ww) for (h, w), (wh, ww) in stages)
        return batch > 1 and padded != first and several and one_sided

    assert any(covered(batch, height, width) for batch, _, height, width in runs), (runs, _stages(model, *runs[1][2:]))


def _metadata(model: nn.Module, checkpoint: Path | None = None) -> dict[str, object]:
    return {k: json.loads(v) for k, v in export_metadata(model, checkpoint, ((17, 64), (17, 64))).items()}


@pytest.mark.parametrize("out_norm", [False, True])
def test_a_features_file_records_its_levels(out_norm):
    """A --features file recorded no levels (task "features"): its output names were the only trace of them; nor
    whether they pass through per-level norms (a run's --features and --features --no-out-norm recorded the same)."""
    meta = _metadata(FeatureExtractor(build_exportable(PICO, out_norm=out_norm), (1, -1)))
    assert meta["task"] == "features" and meta["out_indices"] == [1, 3] and "classes" not in meta
    assert meta["out_norm"] is out_norm


@pytest.mark.parametrize(
    ("given", "levels"), [(2, [2, 3]), (None, [0, 1, 2, 3]), ((np.int64(1), torch.tensor(-1)), [1, 3])]
)
def test_a_feature_extractor_takes_levels_as_features_only_takes_them(given, levels):
    """An int n (timm's last n levels) was a TypeError; numpy's and 0-d tensors' levels were kept as given."""
    extractor = FeatureExtractor(build_exportable(PICO), given)
    assert extractor.out_indices == levels and all(type(level) is int for level in extractor.out_indices)
    kwargs = {} if given is None else {"out_indices": given}
    assert tuple(levels) == timm.create_model(PICO, features_only=True, **kwargs).feature_info.out_indices


def test_a_feature_extractor_gives_its_levels_shallowest_first():
    """Level i is stage i's map, NCHW, in out_indices' order (pico: strides 2, 4, 16 and 32, 64, 256 channels for
    levels 0, 1, 3), each the stage's output walked by hand; only a script's test pinned the order."""
    torch.manual_seed(0)
    extractor = FeatureExtractor(build_exportable(PICO), (0, 1, 3))
    x = torch.randn(1, 3, 32, 48)
    with torch.no_grad():
        levels, h, maps = extractor(x), extractor.model.patch_embed(x), []
        for stage in extractor.model.layers:
            h = stage(h)  # [B, H_i, W_i, C_i]
            maps.append(h.permute(0, 3, 1, 2))  # [B, C_i, H_i, W_i]
    assert [level.shape for level in levels] == [(1, 32, 16, 24), (1, 64, 8, 12), (1, 256, 2, 3)]
    for got, want in zip(levels, [maps[0], maps[1], maps[3]], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_an_export_records_the_version_that_exported_it(tmp_path):
    """A backbone's file recorded the exporting version as "swinlite", a detector's or segmenter's the version that
    trained its checkpoint: each records the exporting one, and the checkpoint's as "checkpoint_swinlite" (the
    segmenter's: segmentation/test_seg_onnx.py)."""
    checkpoint = write_classifier(tmp_path / "c.safetensors")
    save_safetensors(checkpoint, read_state_dict(checkpoint), read_metadata(checkpoint) | {"swinlite": "0.0.1"})
    meta = _metadata(build_exportable(None, checkpoint=checkpoint), checkpoint)
    assert (meta["swinlite"], meta["checkpoint_swinlite"]) == (swinlite.__version__, "0.0.1")
    assert "checkpoint_swinlite" not in _metadata(build_exportable(PICO))  # no checkpoint: timm's initial weights


@pytest.mark.parametrize("ema", [True, False])
def test_a_timm_training_checkpoint_records_the_weights_it_exports(tmp_path, ema):
    """A timm training checkpoint holding state_dict and state_dict_ema exports its EMA weights (timm's rule, with a
    warning), yet its metadata said "weights": "raw"."""
    state = timm.create_model(PICO).state_dict()
    checkpoint = tmp_path / "model_best.pth.tar"
    torch.save({"state_dict": state, **({"state_dict_ema": state} if ema else {})}, checkpoint)
    assert _metadata(build_exportable(PICO), checkpoint)["weights"] == ("ema" if ema else "raw")


@pytest.fixture(scope="module")
def three_levels() -> tuple[FeatureExtractor, nn.Module]:
    """(pico's first three stages, one block each, as a FeatureExtractor of its three levels; its program exported for
    heights and widths 9..32, unlifted), read by the level and one-window-range tests below, which never change it.
    One export (a block's trace is the cost): every level of a Swin and a last stage that is one window over the range
    (stride 8, at most 4 x 4 tokens) are the same trace."""
    torch.manual_seed(0)
    model = FeatureExtractor(build_exportable(PICO, out_norm=True, depths=(1, 1, 1), num_heads=(1, 2, 4)), (0, 1, 2))
    return model.eval(), export_program(model, torch.randn(2, 3, 32, 32), (9, 32)).module()


def test_every_feature_level_equals_eager(three_levels):
    """The levels' exported program at sizes of its range (the ONNX conversion of the same ops is checked in ONNX
    Runtime by the classifier's file above and the segmentation file, whose head reads every level)."""
    # every level of a Swin of three stages, one block each (pico's geometry, its widths): the trace's time is its
    # blocks', the levels' wiring the test's
    model, graph = three_levels
    assert default_size_range(model) == (9, 2048)  # every level at least 2 x 2
    # a range from one patch fails first at this assumption of level 0: the first level alone traces in 1 s
    first_level = FeatureExtractor(build_exportable(PICO, out_norm=True), (0,)).eval()
    with pytest.raises(ValueError, match=r"assumes Ne\(\(\(s\w+ \+ 1\)//2\), 1\), which fails at s\w+=2"):
        export_program(first_level, torch.randn(2, 3, 40, 56), (2, 512))  # one patch: a 1 x 1 level
    # the range's ends (padding at every level: 5, 3 and 2 tokens at 9); 10 x 27: padding at every level, levels 0 and
    # 1 one window high and several wide
    for size in [(9, 32), (10, 27)]:
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            for got, want in zip(graph(x), model(x), strict=True):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_fpn_maps_equal_eager():
    torch.manual_seed(0)
    # pico's first two stages, one block each, both levels in the FPN (the FPN's wiring is the test's: laterals,
    # top-down, p6 and p7 made from the last level; each stage more is a block more to trace)
    backbone = build_fpn_backbone(
        PICO, out_indices=(0, 1), fpn_channels=16, extra_levels="p6p7", depths=(1, 1), num_heads=(1, 2)
    )
    model = FPNFeatures(backbone).eval()
    assert default_size_range(model) == (17, 2048)  # p7 at stride 16 at least 2 x 2
    graph = export_program(model, torch.randn(2, 3, 80, 96), (17, 512)).module()  # strides up to 16 (p7)
    for size in [(97, 131), (17, 70)]:
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            for got, want in zip(graph(x), model(x), strict=True):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_dynamic_int8_quantizes_every_matmul_and_keeps_the_metadata(onnx_classifier, classifier, tmp_path, caplog):
    matmuls = sum(node.op_type in ("MatMul", "Gemm") for node in onnx.load(onnx_classifier[1]).graph.node)
    with caplog.at_level(logging.INFO):
        int8 = quantize_dynamic(onnx_classifier[1], tmp_path / "int8.onnx")
    assert "pre-processing" not in caplog.text  # ONNX Runtime's advice, a bare WARNING:root: line before
    assert not logging.getLogger().filters
    proto = onnx.load(int8)
    ops = [node.op_type for node in proto.graph.node]
    # the linear layers, the head (a Gemm) and the attention products (two activations) alike: no fp32 MatMul left
    assert "MatMul" not in ops and ops.count("MatMulInteger") == matmuls > 0 and "DynamicQuantizeLinear" in ops
    meta = {p.key: json.loads(p.value) for p in proto.metadata_props}
    assert meta["quantization"] == "dynamic" and meta["classes"] == ["cat", "dog", "éclair"]
    error = onnx_max_abs_error(int8, classifier, torch.randn(2, 3, 37, 53))
    assert 0 < error < 0.5  # quantized: close, not equal


def test_bad_export_arguments():
    model = build_exportable(PICO)
    with pytest.raises(ValueError, match=r"\[B >= 2, C, H, W\]"):
        export_program(model, torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match="must lie in the range 2..16"):
        export_program(model, torch.randn(2, 3, 32, 32), (2, 16))
    with pytest.raises(ValueError, match="1 <= min <= max"):
        export_program(model, torch.randn(2, 3, 32, 32), (40, 16))
    # below one patch: the eager model refuses such an image, but the trace asserted nothing and the export went on
    with pytest.raises(ValueError, match="starts at 1, below one patch: the model takes images from 2 pixels"):
        export_program(model, torch.randn(2, 3, 32, 32), (1, 64))
    # in training mode (timm.create_model's), or a module of it: its dropout and stochastic depth were traced, a graph
    # whose outputs changed at every call (0.19 with drop_rate=drop_path_rate=0.3)
    with pytest.raises(ValueError, match=r"^export_program expects a model in eval mode; call model.eval\(\) first$"):
        export_program(timm.create_model(PICO), torch.randn(2, 3, 32, 32))
    model.layers[1].train()
    with pytest.raises(ValueError, match=r"in eval mode \(its layers.1 is in training mode\); call model.eval\(\)"):
        export_program(model, torch.randn(2, 3, 32, 32))
    model.eval()


def test_a_program_traced_in_training_mode_is_not_converted(tmp_path):
    """torch.export's own program of a model in training mode became an ONNX file that drew its dropout at every
    call; one traced in eval mode, whose dropout draws nothing, converts (every export of this file's tests)."""
    program = torch.export.export(nn.Dropout(0.5), (torch.randn(2, 3),))
    said = r"^export_onnx expects a program traced in eval mode; this one draws random numbers \(aten.dropout.default"
    for convert in (export_onnx, write_onnx):
        with pytest.raises(ValueError, match=said):
            convert(program, tmp_path / "dropout.onnx", ["y"], {})
    assert not list(tmp_path.iterdir())
    export.check_traced_in_eval_mode(torch.export.export(nn.Dropout(0.5).eval(), (torch.randn(2, 3),)), "export_onnx")
    # attention through SDPA (tagged as seeded for its dropout) draws nothing at dropout_p 0: it was refused
    for p, draws in ((0.0, False), (0.5, True)):
        attend = torch.export.export(_Attend(p), (torch.randn(1, 2, 4, 8),))
        [node] = [n for n in attend.graph.nodes if n.op == "call_function"]
        assert export._draws_random(node) is draws


class _Attend(nn.Module):
    def __init__(self, dropout_p: float) -> None:
        super().__init__()
        self.dropout_p = dropout_p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(x, x, x, dropout_p=self.dropout_p)


@pytest.mark.parametrize("missing", ["onnx", "onnxscript", "onnxruntime"])
def test_a_function_of_the_export_extra_without_it_names_it(missing, tmp_path, monkeypatch):
    """Without the [export] extra these functions raised a bare ModuleNotFoundError (No module named 'onnx'); the
    scripts alone named the extra. Each names it as they do, before it writes anything."""
    program = torch.export.export(nn.Flatten(1).eval(), (torch.randn(2, 3, 4, 5),))
    monkeypatch.setitem(sys.modules, missing, None)  # an import of it fails as for a package not installed
    calls = {
        "export_onnx": lambda: export_onnx(program, tmp_path / "f.onnx", ["flat"]),
        "write_onnx": lambda: write_onnx(program, tmp_path / "f.onnx", ["flat"], {}, "dynamic"),
        "quantize_dynamic": lambda: quantize_dynamic(tmp_path / "f.onnx", tmp_path / "int8.onnx"),
        "onnx_max_abs_error": lambda: onnx_max_abs_error(tmp_path / "f.onnx", nn.Flatten(1), torch.randn(2, 3, 4, 5)),
    }
    needs = {"onnx": ["export_onnx", "write_onnx", "quantize_dynamic"], "onnxscript": ["export_onnx", "write_onnx"]}
    for name in needs.get(missing, ["write_onnx", "quantize_dynamic", "onnx_max_abs_error"]):
        said = f"swinlite.export.{name} needs the optional package '{missing}': pip install -e \".[export]\""
        with pytest.raises(ModuleNotFoundError, match=re.escape(said)) as raised:
            calls[name]()
        assert raised.value.name == missing  # a script's run() names the extra from it
    assert not list(tmp_path.iterdir())


def test_a_range_whose_last_stage_is_one_window_exports(three_levels):
    """At 32..64 pico's last stage is one window: the graph assumes ``batch * windows == batch`` over the sizes and
    all 65536 batch sizes, too many to check one by one (refused, as was Swin-T's 100..224); an equation polynomial
    in the batch is checked at degree + 1 of them, and the graph serves the range (its ONNX file: the tests above).
    Pico's first three stages, one block each, at 9..32 (its last stage, at stride 8, one window; the three_levels
    fixture's export, its levels the graph's outputs): the trace makes the same assumption, over 24 x 24 sizes and
    65536 batches (37.7M points, above the 20M checked one by one), in half the time of four stages at 32..64."""
    model, graph = three_levels
    with torch.no_grad():
        for batch, height, width in [(5, 32, 32), (3, 10, 32), (1, 32, 9)]:
            x = torch.randn(batch, 3, height, width)
            for got, want in zip(graph(x), model(x), strict=True):
                torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_an_equation_polynomial_in_a_size_is_checked_at_degree_plus_one_points():
    batch, side = sympy.symbols("batch side", integer=True, positive=True)
    sizes = range(1, 65537)
    assert export._points_to_check(sympy.Eq(batch * (side // 7), batch), batch, sizes) == range(1, 3)
    assert export._points_to_check(sympy.Eq(batch**2 * side, batch), batch, sizes) == range(1, 4)
    assert export._points_to_check(sympy.Eq((batch // 2) * 2, batch), batch, sizes) == sizes  # not a polynomial
    assert export._points_to_check(sympy.Le(batch * side, 9), batch, sizes) == sizes  # not an equation
    assert export._points_to_check(sympy.Eq(batch * (side // 7), batch), side, sizes) == sizes


class _FunctionalPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, 3)


@pytest.mark.parametrize("pool", [_FunctionalPool(), nn.AdaptiveMaxPool2d((1, 2)), nn.AdaptiveAvgPool1d(6)])
def test_adaptive_pooling_to_several_bins_is_refused_at_varying_sizes(pool):
    """ONNX would hold the traced size's bins (measured: ONNX Runtime fails, or gives other values, at other sizes)."""
    head = nn.Sequential(nn.Flatten(2), pool) if isinstance(pool, nn.AdaptiveAvgPool1d) else pool  # [B, C, H*W]
    example = torch.randn(2, 3, 16, 20)
    with pytest.raises(ValueError, match=r"pools a map of varying size to \d+(x\d+)? bins"):
        export_program(head.eval(), example, (7, 40))
    export_program(head.eval(), example, fixed_size=True)  # one size: its bins are right
    export_program(nn.AdaptiveAvgPool2d(1).eval(), example, (7, 40))  # a global pool serves every size


class _TwoPyramidPools(nn.Module):
    """A strided conv, then its map (an output too) pooled by two nn.AdaptiveAvgPool2d modules: 2 x 3 and 6 x 6
    bins."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=4)
        self.pools = nn.ModuleList([nn.AdaptiveAvgPool2d((2, 3)), nn.AdaptiveAvgPool2d((6, 6))])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.conv(x)
        return y, *(pool(y) for pool in self.pools)


@pytest.fixture(scope="module")
def pools_file(tmp_path_factory) -> tuple[_TwoPyramidPools, Path]:
    """(a _TwoPyramidPools, its ONNX file for heights and widths 7..200): one export and one conversion for the pooling
    and dim-naming tests, which never change either."""
    torch.manual_seed(0)
    model = _TwoPyramidPools().eval()
    program = export_program(model, torch.randn(2, 3, 64, 80), (7, 200))
    path = tmp_path_factory.mktemp("pools") / "pool.onnx"
    return model, export_onnx(program, path, ["maps", "pooled_2x3", "pooled_6x6"])


def test_adaptive_average_pooling_modules_export_for_every_size(pools_file):
    """nn.AdaptiveAvgPool2d modules (UperNet's pyramid pooling) trace as BinAverage2d: ONNX Runtime equals PyTorch's
    own pooling at sizes other than the traced one, including maps smaller than the bins; the modules are put back.
    Both bin shapes in one graph: one export and one conversion."""
    model, path = pools_file
    assert [type(pool) for pool in model.pools] == [nn.AdaptiveAvgPool2d] * 2
    for size in [(7, 9), (31, 200), (64, 80), (150, 41)]:
        assert onnx_max_abs_error(path, model, torch.randn(2, 3, *size)) < 1e-5


def test_swin_t_geometry_in_one_graph_and_nothing_outside_its_range():
    """Swin-T's patch 4 and window 7 (narrow and one or two blocks per stage): the issue's sizes at which the last
    stages are one window (no shift) and at which they are several, and shifts on in one dimension and off in the
    other, from one exported program; a size outside its range is refused; the eager model keeps no traced tensor."""
    torch.manual_seed(0)
    # the last stage's two blocks (shifted second) hold every case: one window at 224 and (1, 4, 9), several at 250 x
    # 333, shifts on in one dimension and off in the other at (1, 9, 300) and (3, 300, 9)
    narrow = dict(embed_dim=8, depths=(1, 1, 1, 2), num_heads=(1, 1, 1, 1))
    model = build_exportable("swinlite_tiny_patch4_window7_224", **narrow)
    graph = export_program(model, torch.randn(2, 3, 224, 224), (4, 400)).module()
    for b, h, w in [(1, 224, 224), (2, 97, 131), (1, 250, 333), (1, 4, 9), (1, 9, 300), (3, 300, 9)]:
        x = torch.randn(b, 3, h, w)
        with torch.no_grad():
            torch.testing.assert_close(graph(x), model(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="<= 400"):  # torch.export's own input check names the range
        graph(torch.randn(1, 3, 401, 8))
    assert type(model(torch.randn(1, 3, 20, 24))) is torch.Tensor  # no traced tensor left in a cache


def test_swin_v2_geometry_in_one_graph():
    """The V2 fast block defers to the reference's in-graph window geometry and attention formula while exporting, as
    V1's does (through SDPA, torch 2.11's trace assumed more than one window per batch in the last stage)."""
    torch.manual_seed(0)
    # pico's first two stages (the second's two blocks, shifted second, after a V2 patch merging): at 9..64 the last
    # stage is one window at the smallest sizes and several at the largest, with and without its shift; each stage
    # more is a block more to trace
    model = build_exportable("swinlite_v2_pico_patch2_window4_32", depths=(1, 2), num_heads=(1, 2))
    program = export_program(model, torch.randn(2, 3, 40, 56), (9, 64))
    assert not [n for n in program.graph.nodes if "scaled_dot_product" in str(n.target)]
    graph = program.module()
    for b, h, w in [(1, 9, 14), (2, 64, 33)]:  # one window in the last stage (3 x 4 tokens), several (16 x 9)
        x = torch.randn(b, 3, h, w)
        with torch.no_grad():
            torch.testing.assert_close(graph(x), model(x), rtol=1e-5, atol=1e-5)


def _killed_in_the_check(output: Path) -> int:
    """Run an export's check to ``output`` in a forked child that is SIGKILLed inside it (as kill -9 during the check:
    a process of its own, without the seconds a fresh interpreter takes to import torch); the child's wait status."""
    pid = os.fork()
    if pid == 0:  # the child: nothing of it may return into pytest
        try:
            with checked_output(output) as path:
                path.write_bytes(b"written, not checked")
                os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(1)  # reached only if the kill failed: the parent's assertion says so
    return os.waitpid(pid, 0)[1]


def test_a_kill_during_the_check_leaves_the_output_and_a_hidden_folder_the_next_export_removes(tmp_path):
    """An export killed during its check left its complete, unchecked file under the output's name (and a quantization
    killed left its fp32 model at ``<stem>.fp32.tmp.onnx``), for predict.py --onnx to use. Now the output keeps its
    earlier file and the run leaves a hidden folder, which the next export to that output removes; a folder an export
    still running holds (locked) is left to it."""
    output = tmp_path / "m.onnx"
    output.write_bytes(b"an earlier export")
    (tmp_path / "m.fp32.tmp.onnx").write_bytes(b"what a killed quantization of an earlier version left")
    status = _killed_in_the_check(output)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    (left,) = [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert left.name.startswith(".m.onnx.export-") and (left / "m.onnx").read_bytes() == b"written, not checked"
    assert output.read_bytes() == b"an earlier export"
    with scratch_folder(output) as running:  # another export, still running: its folder is locked
        assert not left.exists() and not (tmp_path / "m.fp32.tmp.onnx").exists()
        with checked_output(output) as path:
            path.write_bytes(b"checked")
        assert running.is_dir() and output.read_bytes() == b"checked"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_a_symlinked_output_stays_a_link_and_its_target_gets_the_export(tmp_path):
    """export_onnx.py --output LINK replaced the link by a file; its target kept the earlier export."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "m.onnx"
    target.write_bytes(b"an earlier export")
    (tmp_path / "m.onnx").symlink_to(target)
    with checked_output(tmp_path / "m.onnx") as path:
        path.write_bytes(b"checked")
    assert (tmp_path / "m.onnx").is_symlink() and target.read_bytes() == b"checked"


def test_the_fp32_model_a_quantization_starts_from_is_hidden(tmp_path, monkeypatch):
    """write_onnx(quantize="dynamic") wrote the fp32 model to ``<stem>.fp32.tmp.onnx`` beside the output, a fixed
    name ONNX Runtime runs, and a kill during the quantization left it there. Now it lies in a hidden folder of this
    run, removed whatever happens; the INT8 file, written at checked_output's path, reaches the output name."""
    program = export_program(nn.Flatten(1).eval(), torch.randn(2, 3, 4, 5), fixed_size=True)
    output, seen = tmp_path / "m.onnx", []

    def crashing_quantization(source: Path, target: Path) -> Path:
        seen.append((source, sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))))
        raise RuntimeError("killed during the quantization")

    with monkeypatch.context() as patched:  # the fp32 file's place is the check: its bytes need no conversion
        patched.setattr(export, "export_onnx", lambda program, path, *args: path.write_bytes(b"fp32") and path)
        patched.setattr(export, "quantize_dynamic", crashing_quantization)
        with pytest.raises(RuntimeError, match="killed during the quantization"):
            write_onnx(program, output, ["flat"], {}, "dynamic")
    ((source, visible),) = seen
    assert source.parent.parent == tmp_path and source.parent.name.startswith(".m.onnx.export-") and visible == []
    assert list(tmp_path.iterdir()) == []
    with checked_output(output) as path:
        write_onnx(program, path, ["flat"], {}, "dynamic")
        assert onnx.load(path).metadata_props[0].key == "quantization" and not output.exists()
    assert list(tmp_path.iterdir()) == [output]
