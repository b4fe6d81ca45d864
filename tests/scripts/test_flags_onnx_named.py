"""predict.py / detect.py / segment.py --onnx --ema --device cpu named --ema alone (the parser refused it before the
script's --onnx check), and the rerun without it was refused again for --device. Every option the --onnx path does not
take is named in the one error, before any file is read or written."""

import pytest
from scriptkit import run_script

HINT = " (scripts/export_onnx.py --ema exports a run's EMA weights)"
CPU = "--onnx runs the exported file in ONNX Runtime on the CPU:"
ALONE = "--onnx runs the exported file alone:"
IMAGES = {"predict": ["--output", "{t}/o.csv", "{t}"], "detect": ["--input", "{t}", "--output-dir", "{t}/out"]}
IMAGES["segment"] = IMAGES["detect"]
CASES = [
    ("predict", ["--ema", "--device", "cpu"], f"{ALONE} --ema and --device do not apply{HINT}"),
    ("predict", ["--checkpoint", "c.safetensors", "--model", "m", "--compile", "--num-workers", "2", "--ema",
                 "--device", "cpu", "--amp", "bf16"],
     f"{ALONE} --checkpoint, --model, --compile, --num-workers, --ema, --device and --amp do not apply{HINT}"),
    ("predict", ["--ema"], f"{ALONE} --ema does not apply{HINT}"),
    ("detect", ["--ema", "--device", "cpu"], f"{CPU} --ema and --device do not apply{HINT}"),
    ("detect", ["--ema", "--device", "cpu", "--amp", "bf16"], f"{CPU} --ema, --device and --amp do not apply{HINT}"),
    ("segment", ["--ema", "--amp", "bf16"], f"{CPU} --ema and --amp do not apply{HINT}"),
    ("segment", ["--device", "cpu", "--amp", "bf16"], f"{CPU} --device and --amp do not apply"),
]  # fmt: skip


@pytest.mark.parametrize(("script", "extra", "error"), CASES, ids=[f"{s} {' '.join(e)}" for s, e, _ in CASES])
def test_every_option_the_onnx_path_does_not_take_is_named_at_once(tmp_path, capsys, script, extra, error):
    argv = ["--onnx", tmp_path / "m.onnx", *extra, *(a.format(t=tmp_path) for a in IMAGES[script])]
    assert run_script(script, argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {error} (see "), lines
    assert list(tmp_path.iterdir()) == []
