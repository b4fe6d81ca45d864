"""scripts/_cli.py's runner, the one every script runs under: what a user sees besides the script's own output;
--help before the heavy imports."""

import os
import subprocess
import sys

import pytest
from scriptkit import SCRIPTS

# A script whose work warns and then prints a file name that is not UTF-8 (as os.listdir gives it).
SCRIPT = """
import os, sys, warnings
sys.path.insert(0, sys.argv[1])
import _cli

def main(argv):
    warnings.warn("skipping a linked folder:\\n  a loop")
    print("done:", os.fsdecode(b"caf\\xe9.png"))

sys.exit(_cli.run(main))
"""


def test_warnings_are_one_line_and_file_names_that_are_not_utf8_print_escaped():
    """A non-UTF-8 name failed printing after the work (exit 2); a warning took two lines with file and line."""
    env = os.environ | {"PYTHONIOENCODING": "utf-8:strict", "PYTHONWARNINGS": "default"}  # a console's UTF-8
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(SCRIPTS)], capture_output=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"done: caf\\udce9.png\n"
    assert result.stderr == b"warning: skipping a linked folder: a loop\n"


def test_help_answers_before_torch_and_timm_load():
    """Each script parses its arguments before importing the package (detect.py's and evaluate_detection.py's --help
    took about 5 s; train_detection.py's, which listed every config key read from the config classes, 3.8 s)."""
    names = sorted(p.name for p in SCRIPTS.glob("*.py") if p.name != "_cli.py")
    code = f"""
import runpy, sys
sys.path.insert(0, {str(SCRIPTS)!r})
for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    try:
        runpy.run_path({str(SCRIPTS)!r} + "/" + name, run_name="__main__")
    except SystemExit as e:
        assert e.code == 0, name
    assert "torch" not in sys.modules and "timm" not in sys.modules, name
"""
    result = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert len(names) == 14 and result.stdout.count("usage:") == len(names)
    assert "--score-thresh" in result.stdout and "--split" in result.stdout  # detect.py's, evaluate_detection.py's


def test_the_scripts_offer_the_autocast_names_of_the_library():
    """_cli names them without importing torch (--help stays light); they must be the library's."""
    import _cli  # on the path: scriptkit puts scripts/ there

    from swinlite.device import AUTOCAST_DTYPES

    assert _cli.AMP == tuple(AUTOCAST_DTYPES)


OFF, ON = ("", "0", "false", "No", "off"), ("1", "yes", "true")


@pytest.mark.parametrize(("value", "traceback"), [(v, False) for v in OFF] + [(v, True) for v in ON])
def test_swinlite_traceback_0_false_no_off_keep_the_one_line_error(value: str, traceback: bool, monkeypatch, capsys):
    """Any non-empty value turned the traceback on, SWINLITE_TRACEBACK=0 included."""
    import _cli

    def main(argv):
        raise ValueError("a bad setting")

    monkeypatch.setenv("SWINLITE_TRACEBACK", value)
    if traceback:
        with pytest.raises(ValueError, match="a bad setting"):
            _cli.run(main, [])
    else:
        with pytest.raises(SystemExit) as exit:
            _cli.run(main, [])
        assert exit.value.code == 2 and capsys.readouterr().err == "error: a bad setting\n"


def test_the_help_shows_a_config_file_as_the_config_loader_reads_it(tmp_path):
    """The help showed Python's reprs (model.pretrained = True, model.kwargs = {'drop_path_rate': 0.1}) of PyYAML's
    YAML 1.1 reading (epochs 017 as 15, lr 1e-1 as the string '1e-1'); it shows YAML, read with YAML 1.2 numbers."""
    import _cli

    text = "model:\n  pretrained: yes\n  kwargs: {drop_path_rate: 0.1}\noptim:\n  lr: 1e-1\n"
    (path := tmp_path / "c.yaml").write_text(text + "train:\n  epochs: 017\n  output_dir: '0010'\n")
    assert _cli.config_file_lines(path).splitlines() == [
        "      model.pretrained = true",
        "      model.kwargs = {drop_path_rate: 0.1}",
        "      optim.lr = 0.1",
        "      train.epochs = 17",
        "      train.output_dir = '0010'",
    ]
