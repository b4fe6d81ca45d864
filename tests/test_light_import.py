"""``import swinlite`` stays light: no training, plotting or 1-D stack, no compiler, and no ``matplotlib.use``
anywhere; a module that draws, imported without matplotlib, names the extra to install."""

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Runs in a fresh interpreter. timm and torch import yaml and tqdm themselves, so a spy on ``import`` records
# which swinlite module imports what, rather than looking only at sys.modules.
PROBE = """
import builtins, os, sys
heavy = {"matplotlib", "sklearn", "yaml", "tqdm", "pandas"}
seen, real_import = [], builtins.__import__

def spy(name, globals=None, locals=None, fromlist=(), level=0):
    importer = (globals or {}).get("__name__", "")
    if level == 0 and name.split(".")[0] in heavy and importer.startswith("swinlite"):
        seen.append(f"{importer} imports {name}")
    return real_import(name, globals, locals, fromlist, level)

builtins.__import__ = spy
import swinlite
import timm
model = timm.create_model("swinlite_pico_patch2_window4_32")  # the registry's path; the smallest to initialize
print(type(model).__name__)
print(*seen, sep="\\n")
print(*sorted(m for m in sys.modules if m.split(".")[0] in {"matplotlib", "sklearn", "pandas"}), sep="\\n")
apps = ("swinlite.engine", "swinlite.classification", "swinlite.detection", "swinlite.segmentation", "swinlite.fpn")
compiler = ("swinlite.optimize", "torch._inductor.compile_fx")  # optimize_for_inference imports them when called
print(*sorted(m for m in sys.modules if m.startswith((*apps, "swinlite.seq", "swinlite.visualize", *compiler))))
sys.stdout.flush()
os._exit(0)  # what it loaded is printed: not the second of tearing torch and timm down
"""


def test_import_swinlite_loads_no_training_or_plotting_stack():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    assert result.stdout.split() == ["SwinTransformer"], result.stdout


def test_no_module_calls_matplotlib_use():
    offenders = [p.relative_to(REPO) for p in (REPO / "swinlite").rglob("*.py") if "matplotlib.use(" in p.read_text()]
    assert offenders == []


def test_without_matplotlib_the_modules_that_draw_name_the_extra(monkeypatch):
    """``import swinlite.visualize`` and the classification task (whose evaluation draws the confusion matrix) were a
    bare "No module named 'matplotlib'": only the scripts named the [train] extra. Hidden here as the scripts' test
    hides it (tests/scripts/test_optional_packages.py, where the classification config and data load without it)."""
    for name in [name for name in sys.modules if name.split(".")[0] == "matplotlib"] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: import raises ModuleNotFoundError
    for name in ("swinlite.visualize", "swinlite.classification.task", "swinlite.classification.evaluation"):
        monkeypatch.delitem(sys.modules, name, raising=False)  # imported again, and put back after
    extra = re.escape("""needs the optional package 'matplotlib': pip install -e ".[train]" """)
    extra += r"\(or pip install matplotlib\)"
    with pytest.raises(ModuleNotFoundError, match=rf"^swinlite\.visualize {extra}$") as caught:
        importlib.import_module("swinlite.visualize")
    assert caught.value.name.split(".")[0] == "matplotlib"  # what the scripts name the extra by
    importlib.import_module("swinlite.classification")  # its config and data need no matplotlib
    with pytest.raises(ModuleNotFoundError, match=rf"^swinlite\.classification\.ClassificationTask {extra}$"):
        from swinlite.classification import ClassificationTask  # noqa: F401
