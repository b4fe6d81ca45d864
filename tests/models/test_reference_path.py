"""The reference model is swinlite/models/swin.py as written: no kernel imported, one file per block forward,
scriptable; the fast path stays within three files (the layout ARCHITECTURE.md describes)."""

import ast
import copy
import sys
from pathlib import Path

import pytest
import timm
import torch
from pico import PICO

import swinlite
from swinlite.fast import accelerate
from swinlite.models.swin import SwinBlock

PACKAGE = Path(swinlite.__file__).parent
CACHE = "swinlite/models/tensor_cache.py"  # the lookup of the cached masks and indices, what lru_cache was: not read


def test_reference_file_imports_no_kernel():
    tree = ast.parse((PACKAGE / "models" / "swin.py").read_text())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 0]
    imported += [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names]
    assert imported and not [m for m in imported if "fast" in m or "kernel" in m or m.startswith("swinlite")]


def traced_functions(block: torch.nn.Module, x: torch.Tensor) -> list[str]:
    """``file:function`` of every Python function under swinlite/ that one eval forward without autograd calls."""
    seen = []

    def profile(frame, event, arg):
        path = Path(frame.f_code.co_filename)
        if event == "call" and path.is_relative_to(PACKAGE):
            name = f"{path.relative_to(PACKAGE.parent)}:{frame.f_code.co_qualname}"
            if name not in seen:
                seen.append(name)

    with torch.no_grad():
        block(x)  # fills the caches
        previous = sys.getprofile()
        sys.setprofile(profile)
        try:
            block(x)
        finally:
            sys.setprofile(previous)
    return seen


@pytest.fixture(scope="module")
def block_and_input() -> tuple[SwinBlock, torch.Tensor]:
    torch.manual_seed(0)
    return SwinBlock(32, 2, (4, 4), shift=True).eval(), torch.randn(2, 10, 10, 32)  # padded and shifted


def test_reference_block_runs_in_the_reference_file(block_and_input):
    block, x = block_and_input
    files = {name.split(":")[0] for name in traced_functions(block, x)} - {CACHE}
    assert files == {"swinlite/models/swin.py"}


def test_fast_block_runs_in_three_files(block_and_input):
    block, x = block_and_input
    files = {name.split(":")[0] for name in traced_functions(accelerate(copy.deepcopy(block)), x)} - {CACHE}
    assert "swinlite/models/swin.py" in files and len(files) <= 3, files


def test_scripted_reference_model_equals_eager():
    torch.manual_seed(0)
    model = timm.create_model(PICO, fast=False).eval()
    x = torch.randn(2, 3, 36, 28)
    scripted = torch.jit.script(model)
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), model(x))
