"""torch.export and ONNX (run in ONNX Runtime) for the classifier and the feature extractor."""

import pytest
import torch

from swinlite.export import build_exportable, export_onnx, export_program, onnx_max_abs_error

PICO = "swinlite_pico_patch2_window4_32"


@pytest.mark.parametrize("features", [False, True], ids=["classifier", "features"])
def test_torch_export_and_onnx_match_eager_at_another_batch(tmp_path, features):
    torch.manual_seed(0)
    model = build_exportable(PICO, features=features, out_norm=features)
    size = (36, 44)  # not a window multiple: padding and masks are in the graph
    program = export_program(model, torch.randn(2, 3, *size))
    x = torch.randn(3, 3, *size)
    with torch.no_grad():
        eager = model(x)
        exported = program.module()(x)
    eager, exported = ([eager], [exported]) if not features else (eager, exported)
    assert [e.shape for e in exported] == [e.shape for e in eager]
    for a, b in zip(exported, eager, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert type(model(x) if not features else model(x)[0]) is torch.Tensor  # no traced tensor left in a cache

    names = [f"stage{i}" for i in range(4)] if features else ["logits"]
    path = export_onnx(program, tmp_path / "model.onnx", names)
    assert onnx_max_abs_error(path, model, x) <= 1e-4
    assert onnx_max_abs_error(path, model, torch.randn(1, 3, *size)) <= 1e-4
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_script_bad_input(load_script, tmp_path, capsys):
    script = load_script("export_onnx")
    with pytest.raises(ValueError, match=r"unknown model \(expected swinlite_\*\) 'swin_tiny_patch4_window7_224'"):
        script.main(["--model", "swin_tiny_patch4_window7_224", "--output", str(tmp_path / "m.onnx")])
    with pytest.raises(ValueError, match=r"\[B >= 2, C, H, W\]"):
        export_program(build_exportable(PICO), torch.randn(1, 3, 32, 32))
