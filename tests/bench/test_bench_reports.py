"""What the side-by-side report says about the comparison itself: timm's attention path, read from the built model;
where swinlite and timm compute different functions by design (decided from the geometry); the logit difference in
each measured precision. Swin-T at 56² and 64², batch 1 (its layout narrowed where the models run: narrowswin):
nothing is timed."""

import pytest
import timm
import timm.layers.config
from narrowswin import narrow_swin_t
from swinbench import swin
from swinbench.report import markdown_table

EXPLICIT = "explicit (fused_attn=False; TIMM_FUSED_ATTN=2 turns timm's fused path on)"


def test_timm_attention_is_read_from_the_built_model(monkeypatch):
    """timm's Swin reads TIMM_FUSED_ATTN once, at import, into the flag ``use_fused_attn(experimental=True)`` reads
    when a model is built: setting that flag builds what TIMM_FUSED_ATTN=2 builds."""
    build = lambda name: timm.create_model(name, img_size=64, device="meta")  # noqa: E731
    model = build("swin_tiny_patch4_window7_224")
    assert swin.timm_attention(model) == EXPLICIT
    model.layers[0].blocks[0].attn.fused_attn = True
    assert swin.timm_attention(model) == "mixed (fused_attn=True in 1 of 12 attention layers)"
    monkeypatch.setattr(timm.layers.config, "_USE_FUSED_ATTN", 2)
    assert swin.timm_attention(build("swin_tiny_patch4_window7_224")).startswith("fused (fused_attn=True")
    assert swin.timm_attention(build("swinv2_tiny_window8_256")) == (
        "explicit (this timm model has no fused attention path)"
    )


@pytest.mark.parametrize(
    ("name", "img_size", "stages"),
    [
        ("swinlite_tiny_patch4_window7_224", 224, []),  # 56, 28, 14, 7: window multiples
        ("swinlite_tiny_patch4_window7_224", 112, []),  # 28, 14, 7, then 4: one window, timm's shrunk to it
        ("swinlite_tiny_patch4_window7_224", 64, ["stage 0, 16×16 map", "stage 1, 8×8 map"]),
        ("swinlite_tiny_patch4_window7_224", 256, [f"stage {i}, {64 >> i}×{64 >> i} map" for i in range(4)]),
        ("swinlite_v2_tiny_window8_256", 64, []),  # windows 8, 8, 4, 2: timm's, shrunk to the maps
        ("swinlite_v2_tiny_window8_256", 96, ["stage 1, 12×12 map, 8×8 window"]),
    ],
)
def test_differences_by_design_follow_each_stages_map_and_window(name, img_size, stages):
    reasons = swin.differences_by_design(timm.create_model(name, img_size=img_size, device="meta"), img_size)
    assert len(reasons) == bool(stages)
    if stages:
        assert reasons[0].startswith(f"at {img_size} px some stages pad their windows (")
        assert reasons[0].endswith('swinlite masks the padded keys, timm does not (docs/models.md, "Any input size")')
        assert all(stage in reasons[0] for stage in stages) and reasons[0].count("stage ") == len(stages)


def test_an_image_that_is_not_a_patch_multiple_differs_by_design():
    model = timm.create_model("swinlite_tiny_patch4_window7_224", img_size=66, device="meta")
    reasons = swin.differences_by_design(model, 66)
    assert reasons[0] == (
        "at 66 px the image is not a multiple of the 4×4 patch: swinlite pads it to whole patches, timm's patch "
        "embedding drops the remainder"
    )
    assert "(stage 0, 17×17 map, 7×7 window; stage 1, 9×9 map, 7×7 window)" in reasons[1]


def started(img_size: int) -> dict:
    """The common fields of a run of Swin-T at ``img_size``, fp32 and bf16, as the report gets them."""
    cfg = swin.BenchConfig(batch=1, img_size=img_size, models=("swinlite", "timm"), precisions=("fp32", "bf16"))
    result = swin.start_run(cfg, ("inference",))[2]
    result.update(matmul_gflops={}, rows=[])
    return result


def test_report_says_where_the_logits_differ_by_design_and_gives_the_bf16_difference(monkeypatch):
    """At 64² Swin-T's first two stages pad their windows: the logits differ by 6e-2, which the report printed
    without a word (the build_models docstring said the two compute the same function). At 56² they do not, and
    the fp32 logits agree; the bf16 fast path was never compared."""
    narrow_swin_t(monkeypatch, blocks=2)  # shifted windows too
    padded, plain = started(64), started(56)
    assert padded["max_output_difference"]["swinlite"] > 1e-3 and padded["differences_by_design"]
    assert plain["max_output_difference"]["swinlite"] < 1e-5 and plain["differences_by_design"] == []
    header = markdown_table(padded).split("\n\n")[0]
    assert "; the two compute different functions here, by design: at 64 px some stages pad their windows" in header
    assert "timm does not" not in markdown_table(plain)
    for result in (padded, plain):  # both models under bf16 autocast: bf16's rounding, no more
        assert set(result["max_output_difference"]) == {"swinlite", "swinlite bf16"}
        assert 0 < result["max_output_difference"]["swinlite bf16"] < 0.1
    text = markdown_table(plain)
    assert f"swinlite bf16 {plain['max_output_difference']['swinlite bf16']:.1e}." in text
    assert plain["timm_attention"] == EXPLICIT and f"timm attention: {EXPLICIT}." in text
