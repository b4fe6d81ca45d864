"""scripts/_cli.py's runner, the one every script runs under: what a user sees besides the script's own output."""

import os
import subprocess
import sys

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
