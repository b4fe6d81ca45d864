"""torch.export and ONNX at one fixed size (--fixed-size: the batch stays dynamic), and the script's bad input. The
export for every size is tested in tests/test_export.py."""

import json
import os
import re
import shutil
import warnings
from pathlib import Path

import pytest
import timm
import torch
from onnxkit import write_classifier
from pico import PICO

from swinlite import export
from swinlite.export import build_exportable, check_sizes, export_metadata, export_program
from swinlite.io import save_safetensors


def test_fixed_size_export_matches_eager_at_another_batch():
    torch.manual_seed(0)
    # pico's first stage alone, two blocks (shifted second) on 18 x 22 tokens, padded to 20 x 24: two blocks traced
    model = build_exportable(PICO, depths=(2,), num_heads=(1,))
    size = (36, 44)  # not a window multiple: padding and masks are in the graph
    graph = export_program(model, torch.randn(2, 3, *size), fixed_size=True).module()
    for batch in (1, 3):
        x = torch.randn(batch, 3, *size)
        with torch.no_grad():
            torch.testing.assert_close(graph(x), model(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="36"):  # the size is fixed
        graph(torch.randn(1, 3, 40, 44))


def test_script_bad_input(load_script, tmp_path, capsys):
    script = load_script("export_onnx")
    with pytest.raises(ValueError, match=r"unknown model \(expected swinlite_\*\) 'swin_tiny_patch4_window7_224'"):
        script.main(["--model", "swin_tiny_patch4_window7_224", "--output", str(tmp_path / "m.onnx")])
    for low in (99, 64):  # 64 = 64: an AssertionError traceback from torch.export.Dim before
        with pytest.raises(ValueError, match=rf"^--min-size must be in 1..--max-size \(64\) and below it, got {low}"):
            script.main(["--model", PICO, "--output", str(tmp_path / "m.onnx"), "--min-size", str(low), "--max-size",
                         "64"])  # fmt: skip
    with pytest.raises(SystemExit):  # the range was ignored without a word
        script.main(["--model", PICO, "--fixed-size", "--max-size", "64", "--output", str(tmp_path / "m.onnx")])
    assert "--fixed-size serves --size only: --min-size and --max-size set a range" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["--model", PICO, "--fpn", "--output", str(tmp_path / "m.onnx")])
    assert "--fpn exports the FPN backbone of a detection --checkpoint" in capsys.readouterr().err
    # an ImageNet classifier's weights have no per-level norms to export (the key list of the strict load before)
    checkpoint = write_classifier(tmp_path / "classifier.safetensors")
    with pytest.raises(ValueError, match=r"--out-norm adds a LayerNorm per level, and .*classifier.safetensors holds"):
        script.main(["--checkpoint", str(checkpoint), "--features", "--out-norm", "--output", str(tmp_path / "m.onnx")])
    # timm's layout (converted on load): the refusal came after a warning that the norms were left at initial values
    timm_pico = timm.create_model("swin_tiny_patch4_window7_224", embed_dim=32, depths=(1, 1, 2, 1),
                                  num_heads=(1, 2, 4, 8), img_size=32, patch_size=2, window_size=4)  # fmt: skip
    torch.save(timm_pico.state_dict(), tmp_path / "timm.pth")
    with warnings.catch_warnings(record=True) as shown, pytest.raises(ValueError, match="--out-norm adds a LayerNorm"):
        warnings.simplefilter("always")
        script.main(["--model", PICO, "--checkpoint", str(tmp_path / "timm.pth"), "--features", "--out-norm",
                     "--output", str(tmp_path / "m.onnx")])  # fmt: skip
    assert not [str(w.message) for w in shown if "out_norms" in str(w.message)]


def test_a_fixed_size_file_asks_for_its_size():
    """--fixed-size --size 48 40: the metadata's preprocessing feeds 48x40, the size the graph takes (it said the
    model's 32x32, which predict.py --onnx then refused as outside the file's sizes)."""
    model = build_exportable(PICO)
    fixed = json.loads(export_metadata(model, None, ((48, 48), (40, 40)))["preprocessing"])
    ranged = json.loads(export_metadata(model, None, ((2, 2048), (2, 2048)))["preprocessing"])
    narrow = json.loads(export_metadata(model, None, ((40, 48), (2, 24)))["preprocessing"])  # the nearest served
    assert fixed["input_size"] == [3, 48, 40] and ranged["input_size"] == [3, 32, 32]
    assert narrow["input_size"] == [3, 40, 24]


def test_a_range_that_does_not_hold_the_models_size(load_script, initial_weights):
    """--min-size 40 --max-size 48 for a 32x32 model was refused ("the example's size (32, 32) must lie in the range
    40..48"): the example is now the model's size brought into the range, the check's sizes lie in it (the metadata's:
    test_a_fixed_size_file_asks_for_its_size), and a --size outside it is named before anything is exported."""
    script = load_script("export_onnx")
    argv = ["--model", PICO, "--checkpoint", str(initial_weights(PICO)), "--min-size", "40", "--max-size", "48",
            "--output", "m.onnx"]  # fmt: skip
    with pytest.raises(ValueError, match=r"--size 32 32 must lie in the range served, 40\.\.48"):
        script.main([*argv, "--size", "32", "32"])
    assert script.example_size(script.parse_args(argv), (32, 32), (40, 48)) == (40, 40)
    assert script.example_size(script.parse_args(argv), (224, 224), (64, 96)) == (96, 96)
    assert script.example_size(script.parse_args([*argv, "--size", "44", "41"]), (32, 32), (40, 48)) == (44, 41)
    sizes = check_sizes((40, 40), (40, 48))
    assert sizes[-1] == (40, 40) and len(sizes) == 3 and all(40 <= side <= 48 for size in sizes for side in size)


@pytest.fixture
def exported_again(onnx_classifier, monkeypatch) -> list[str]:
    """The arguments of the session's ``onnx_classifier`` export (conftest.py) but --output, with which its export (the
    trace and the conversion, seconds) writes that file again: what the script does with the file, the check against
    PyTorch included, is the script's own."""
    checkpoint, path = onnx_classifier
    argv = ["--checkpoint", str(checkpoint), "--max-size", "512"]
    monkeypatch.setattr(export, "export_program", lambda *args: None)
    monkeypatch.setattr(export, "export_onnx", lambda program, target, *args: shutil.copyfile(path, target))
    return argv


def test_a_file_that_fails_its_check_leaves_the_earlier_output(load_script, tmp_path, exported_again):
    """--tolerance 1e-15 (ONNX Runtime differs from PyTorch by ~1e-7): the file was written to --output and checked
    there, then removed, so a good file already at --output was lost with it; now the refused file never reaches
    --output, which keeps its earlier file, and nothing of the run is left beside it. A refusal before anything is
    written leaves an earlier file alone too."""
    script, output = load_script("export_onnx"), tmp_path / "m.onnx"
    argv = [*exported_again, "--output", str(output)]
    with pytest.raises(
        ValueError, match=r"is above --tolerance 1e-15; the export failed its check: nothing was written"
    ):
        script.main([*argv, "--tolerance", "1e-15"])
    assert list(tmp_path.iterdir()) == []
    output.write_bytes(b"an earlier export")
    with pytest.raises(ValueError, match=r"is above --tolerance 1e-12; .*: .*m\.onnx keeps its earlier file"):
        script.main([*argv, "--tolerance", "1e-12"])
    assert output.read_bytes() == b"an earlier export"
    assert list(tmp_path.iterdir()) == [output]
    with pytest.raises(ValueError, match="unknown model"):
        script.main(["--model", "swinlite_nope", "--output", str(output)])
    assert output.read_bytes() == b"an earlier export"


def test_the_check_reads_a_hidden_file_and_only_a_checked_one_becomes_the_output(
    load_script, tmp_path, monkeypatch, exported_again
):
    """The file was written under --output before its check: a kill during the check left it there, unchecked, for
    predict.py --onnx to use. Now the check reads a hidden file beside --output while --output still holds the
    earlier file (what a kill at that moment leaves); a crash in the check leaves --output and no file of the run
    behind; a check that passes renames the checked file itself over --output."""
    script, output = load_script("export_onnx"), tmp_path / "m.onnx"
    argv = [*exported_again, "--output", str(output)]
    output.write_bytes(b"an earlier export")
    seen = []

    def crashing_check(path, *args, **kwargs):
        seen.append((Path(path), Path(path).read_bytes(), output.read_bytes()))
        raise RuntimeError("killed during the check")

    monkeypatch.setattr(export, "check_onnx", crashing_check)
    with pytest.raises(RuntimeError, match="killed during the check"):
        script.main(argv)
    ((checked, content, at_output),) = seen
    assert checked.parent.parent == tmp_path and checked.parent.name.startswith(".m.onnx.export-")
    assert content.startswith(b"\x08") and at_output == b"an earlier export"  # an ONNX model; the earlier file
    assert output.read_bytes() == b"an earlier export" and list(tmp_path.iterdir()) == [output]

    def passing_check(path, *args, **kwargs):
        seen.append((Path(path), os.stat(path).st_ino))
        return 0.0

    monkeypatch.setattr(export, "check_onnx", passing_check)
    assert script.main(argv) == 0.0
    checked, inode = seen[-1]
    assert output.stat().st_ino == inode and output.read_bytes() != b"an earlier export"  # the file checked
    assert list(tmp_path.iterdir()) == [output]


def test_out_indices_are_checked_as_features_only_checks_them(
    load_script, tmp_path, capsys, initial_weights, monkeypatch
):
    """--out-indices was not checked: without --features it was ignored (a classifier exported, exit 0), 5 was an
    IndexError traceback, 2 1 exported stage2 before stage1, -1 an output named stage-1, and 1 1 failed after the
    trace in torch's "Output names cannot be duplicated". Now the library's check of ``features_only``'s out_indices
    refuses them, as timm.create_model does, before the export; negative ones are resolved. (What the export is
    given is checked here; the export of feature levels itself in tests/test_export.py.)"""
    seen = {}

    def program(model, example, *args):
        seen["channels"] = [level.shape[1] for level in model(example)]

    monkeypatch.setattr(export, "export_program", program)

    def convert(program, path, names, *args):
        seen["names"] = list(names)
        path.write_bytes(b"onnx")

    monkeypatch.setattr(export, "export_onnx", convert)
    script, output = load_script("export_onnx"), tmp_path / "m.onnx"
    argv = ["--model", PICO, "--checkpoint", str(initial_weights(PICO)), "--fixed-size", "--no-check", "--output",
            str(output)]  # fmt: skip
    with pytest.raises(SystemExit):
        script.main([*argv, "--out-indices", "1"])
    assert "--out-indices selects the levels of --features: add --features, or drop" in capsys.readouterr().err
    for indices in ((5,), (2, 1), (1, 1), (3, -1)):
        with pytest.raises(ValueError) as library:
            timm.create_model(PICO, features_only=True, out_indices=indices)
        with pytest.raises(ValueError) as told:
            script.main([*argv, "--features", "--out-indices", *map(str, indices)])
        assert str(told.value) == str(library.value) and "strictly increasing" in str(told.value)
    assert list(tmp_path.iterdir()) == []
    script.main([*argv, "--features", "--out-indices", "0", "-1"])
    assert "outputs stage0, stage3)" in capsys.readouterr().out
    assert seen == {"channels": [32, 256], "names": ["stage0", "stage3"]}  # pico's first and last levels


def test_features_export_every_level_of_a_swin_with_fewer_stages(load_script, tmp_path, monkeypatch):
    """--features of a segmentation run whose Swin has two stages (``model.kwargs.depths``) failed with the default
    levels: "feature indices must be ... in 0..1, got (0, 1, 2, 3)", the default set before the model was read. The
    default is now every level of the model: outputs stage0 and stage1, at strides 2 and 4. (What the export is given
    is checked here, as in test_out_indices_are_checked_as_features_only_checks_them: a real export takes 12 s; the
    export of feature levels itself in tests/test_export.py.)"""
    import dataclasses

    from swinlite.segmentation.config import SegModelConfig
    from swinlite.segmentation.models import build_upernet

    seen = {}
    monkeypatch.setattr(export, "export_program", lambda model, example, *args: seen.update(
        shapes=[tuple(level.shape) for level in model(example)]))  # fmt: skip
    monkeypatch.setattr(export, "export_onnx", lambda program, path, names, metadata, *args: seen.update(
        names=list(names), levels=json.loads(metadata["out_indices"])) or path.write_bytes(b"onnx"))  # fmt: skip
    cfg = SegModelConfig(name=PICO, head_channels=8, aux_channels=0, pool_scales=(1,), pretrained=False,
                         kwargs={"depths": (1, 1), "num_heads": (1, 2)})  # fmt: skip
    meta = {"task": "segmentation", "segmenter": dataclasses.asdict(cfg), "classes": ["x", "y"],
            "preprocessing": {"mean": [0.5] * 3, "std": [0.25] * 3, "crop_size": [32, 32]}}  # fmt: skip
    checkpoint, output = tmp_path / "best.safetensors", tmp_path / "levels.onnx"
    save_safetensors(checkpoint, build_upernet(cfg, 2).state_dict(), meta)
    load_script("export_onnx").main(["--checkpoint", str(checkpoint), "--features", "--fixed-size", "--no-check",
                                     "--output", str(output)])  # fmt: skip
    assert seen == {"shapes": [(2, 32, 16, 16), (2, 64, 8, 8)], "names": ["stage0", "stage1"], "levels": [0, 1]}
    assert output.read_bytes() == b"onnx"


def test_cached_published_weights_are_not_loaded_before_the_export(load_script, offline_hub, monkeypatch):
    """--model TAG alone, its weights in the cache, built Swin-T twice and converted and checked its weights four
    times: published_weights loaded them (swinlite.weights.pretrained_model) to check them, then the export loaded
    the file again. Now it returns the cached file unread, for the export's one load; weights to download are still
    fetched and loaded by pretrained_model, and a name without any is its one error (tests/scripts/test_model_alone.py,
    which also checks that what is exported is the file's)."""
    import swinlite.weights

    tag = "swinlite_tiny_patch4_window7_224.ms_in1k"
    cached = offline_hub.add(timm.models.get_pretrained_cfg(tag).hf_hub_id, {"w": torch.zeros(1)})
    monkeypatch.setattr(swinlite.weights, "pretrained_model", lambda *args: pytest.fail("loaded before the export"))
    assert load_script("export_onnx").published_weights(tag) == cached


@pytest.mark.parametrize("tolerance", ["-1", "0", "nan", "inf"])
def test_a_tolerance_that_is_not_a_positive_number_is_refused_before_the_export(
    tolerance, load_script, tmp_path, capsys
):
    """--tolerance -1 or nan was taken, and failed only after the export, in its check."""
    with pytest.raises(SystemExit):
        load_script("export_onnx").main(
            ["--model", PICO, "--output", str(tmp_path / "m.onnx"), "--tolerance", tolerance]
        )
    assert f"error: --tolerance must be a positive finite number, got {float(tolerance)}" in capsys.readouterr().err


@pytest.mark.parametrize("other", [["--no-check"], ["--quantize", "dynamic"], ["detection"]])
def test_a_tolerance_that_bounds_no_check_is_refused(other, load_script, tmp_path, capsys):
    """--tolerance 1e-12 was ignored without a word where no check compares against it: with --no-check, for an INT8
    file (its check looks for finite outputs only) and for a whole detector (its check pairs detections by label,
    score and box, with bounds of its own); each wrote its file, exit 0."""
    argv = ["--model", PICO, "--output", str(tmp_path / "m.onnx"), "--tolerance", "1e-12"]
    if other == ["detection"]:  # refused from the checkpoint's task, before the detector loads
        save_safetensors(tmp_path / "det.safetensors", {"w": torch.zeros(1)}, {"task": "detection"})
        with pytest.raises(ValueError, match=r"^--tolerance: not for a detection checkpoint, which exports its whole"):
            load_script("export_onnx").main([*argv[2:], "--checkpoint", str(tmp_path / "det.safetensors")])
    else:
        with pytest.raises(SystemExit):
            load_script("export_onnx").main([*argv, *other])
        assert "error: --tolerance bounds the check of an fp32 file: " in capsys.readouterr().err
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("sizes", [["--min-size", "3000"], ["--max-size", "0"]])
def test_a_detection_checkpoint_refuses_the_size_options_before_their_values(sizes, load_script, tmp_path):
    """--min-size 3000 or --max-size 0 with a detection checkpoint was refused as the arguments were read, as a size
    to fix ("pass a --max-size above it"), though a whole detector takes neither option: its sizes follow its resize."""
    save_safetensors(tmp_path / "det.safetensors", {"w": torch.zeros(1)}, {"task": "detection"})
    argv = ["--checkpoint", str(tmp_path / "det.safetensors"), "--output", str(tmp_path / "m.onnx"), *sizes]
    with pytest.raises(ValueError, match=rf"^{sizes[0]}: not for a detection checkpoint, which exports its whole"):
        load_script("export_onnx").main(argv)


def test_a_min_size_is_checked_against_the_exports_own_default_max(segmenter_file, tmp_path):
    """--min-size 2100 without --max-size was refused as the arguments were read, being above a fixed 2048, though a
    segmenter serves up to its test settings' longest side by default (ADE20K's multi-scale test: 3584); the default
    of the export at hand is named."""
    from swinlite.segmentation.export import export_segmenter, served_sizes
    from swinlite.segmentation.inference import InferenceSettings
    from swinlite.segmentation.predictor import load_segmenter

    default = served_sizes(load_segmenter(segmenter_file)[0], InferenceSettings(ratios=(0.5, 1.75)))
    assert default[1] == 3584 and export.served_range(default, 2100, None, maps=True) == (2100, 3584)
    said = r"^--min-size 3000 is not below the largest size this export serves by default \(2048, --max-size's"
    with pytest.raises(ValueError, match=said):  # its own test settings: whole images of 2048 at most
        export_segmenter(segmenter_file, tmp_path / "s.onnx", (3000, None))
    assert list(tmp_path.iterdir()) == []


MAPS = "a map of more than one cell at its coarsest level, stride"


@pytest.mark.parametrize(
    ("source", "min_size", "smallest"),
    [
        (["--checkpoint", "SEGMENTER"], 5, f"17 ({MAPS} 16)"),
        (["--checkpoint", "SEGMENTER", "--features"], 5, f"17 ({MAPS} 16)"),
        (["--checkpoint", "SEGMENTER", "--features", "--out-indices", "0"], 2, f"3 ({MAPS} 2)"),
        (["--model", PICO, "--checkpoint", "CLASSIFIER"], 1, "2 (one patch)"),
    ],
    ids=["segmenter", "features", "first_level", "classifier"],
)  # fmt: skip
def test_a_min_size_below_the_smallest_served_is_refused_before_the_trace(
    load_script, segmenter_file, initial_weights, tmp_path, source, min_size, smallest
):
    """--min-size 5 --max-size 100 of a segmenter (or --features) traced for 40 s, then failed with "the exported graph
    assumes Ne((((((((s54 + 1)//2)) + 1)//2)) + 1)//2), 1), which fails at s54=5": a symbolic name and no usable
    minimum. The smallest size served is known before the trace: named, with the --min-size to use."""
    files = {"SEGMENTER": str(segmenter_file), "CLASSIFIER": str(initial_weights(PICO))}
    argv = [files.get(arg, arg) for arg in source] + ["--output", str(tmp_path / "m.onnx"), "--max-size", "100"]
    said = rf"^--min-size {min_size} is below the smallest size this export serves, {re.escape(smallest)}: use "
    with pytest.raises(ValueError, match=rf"{said}--min-size {smallest.split()[0]}$"):
        load_script("export_onnx").main([*argv, "--min-size", str(min_size)])
    assert list(tmp_path.iterdir()) == []


def test_help_shows_the_defaults(load_script, capsys):
    with pytest.raises(SystemExit):
        load_script("export_onnx").parse_args(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "(default: every level of the model, all its stages" in shown and "(default: 1e-4)" in shown
    # it said "one patch" for --features (its range started one pixel above the coarsest stride), "the model's" size
    # for a run's (its test or crop size), and batches 1 and 2 swapped (tests/test_export.py runs check_onnx)
    assert "(default, and the least it takes: one patch; for --features, --fpn and a segmenter one pixel more" in shown
    assert "the detector's test_size or the segmenter's crop_size" in shown
    assert "3/2 of its width (224x224: 197x339), at batch 2; the range's smallest at batch 1" in shown
    assert load_script("export_onnx").MAX_SIZE == export.MAX_SIZE  # named for parsing without torch
