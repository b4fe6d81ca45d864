"""detect.py --onnx / segment.py --onnx given both --device and --amp named --device alone in their refusal: the
rerun without it was refused again for --amp. Each flag the ONNX path does not take is named in the one error."""

import pytest
from scriptkit import run_script


@pytest.mark.parametrize("script", ["detect", "segment"])
@pytest.mark.parametrize(
    ("extra", "named"),
    [(["--device", "cpu", "--amp", "bf16"], "--device and --amp do"), (["--amp", "bf16"], "--amp does"),
     (["--device", "cpu"], "--device does")],
)  # fmt: skip
def test_every_flag_the_onnx_path_does_not_take_is_named(tmp_path, capsys, script, extra, named):
    argv = ["--onnx", tmp_path / "x.onnx", *extra, "--input", tmp_path, "--output-dir", tmp_path / "out"]
    assert run_script(script, argv) == 2
    error = capsys.readouterr().err
    assert f"error: --onnx runs the exported file in ONNX Runtime on the CPU: {named} not apply" in error
    assert not (tmp_path / "out").exists()
