"""Swin-T narrowed for the benchmark's plumbing tests: its layout (patch 4, window 7, the stages' maps and windows at
every input size) at 32 channels (heads 1, 2, 4, 8: Swin-T's 32-channel heads) and fewer blocks in each stage, and a
small matmul ceiling. The tests of those runs check rows, ratios, tables and the comparison's code paths, none of which
depend on the width or depth; the benchmark builds its models by name (``timm.create_model``), which this narrows."""

from __future__ import annotations

from functools import partial

import pytest
import timm
from swinbench import swin

NARROW = {"embed_dim": 32, "num_heads": (1, 2, 4, 8)}


def narrow_swin_t(monkeypatch: pytest.MonkeyPatch, blocks: int = 1) -> None:
    """For the rest of the test: timm's and swinlite's Swin-T built by name are :data:`NARROW` with ``blocks`` blocks
    in each stage (2: a shifted block after each plain one), and the benchmark's matmul ceiling is timed on 256 x 256
    matrices instead of 2048 x 2048."""
    create = timm.create_model

    def narrowed(name: str, *args: object, **kwargs: object):
        if name in ("swin_tiny_patch4_window7_224", "swinlite_tiny_patch4_window7_224"):
            kwargs = NARROW | {"depths": (blocks,) * 4} | kwargs
        return create(name, *args, **kwargs)

    monkeypatch.setattr(timm, "create_model", narrowed)
    monkeypatch.setattr(swin, "matmul_step", partial(swin.matmul_step, n=256))
