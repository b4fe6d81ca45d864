"""ARCHITECTURE.md against the code it describes: the fast path's dispatch table is the one in the docstring of
swinlite/fast/blocks.py (it said so, with other rows: no torch.export row, no AVX2 rule), the package map names every
module at the top of the library, the scripts' last line is the one it quotes, and its config vocabulary names every
key of every task's config."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import swinlite.fast.blocks
from swinlite.classification.config import Config
from swinlite.detection.config import DetConfig
from swinlite.engine.config import sections
from swinlite.engine.sections import RunConfig
from swinlite.segmentation.config import SegConfig

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = (REPO / "ARCHITECTURE.md").read_text()
HEADER = ("situation", "shift + partition", "attention", "MLP")


def _table(text: str) -> list[tuple[str, ...]]:
    """The rows of the dispatch table in ``text`` (a Markdown or reST-in-docstring one), cells stripped, ``code``
    as `code`, the rule row left out."""
    lines = text.replace("``", "`").splitlines()
    start = next(i for i, line in enumerate(lines) if tuple(c.strip() for c in line.strip("| ").split("|")) == HEADER)
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            break
        cells = tuple(cell.strip() for cell in line.strip().strip("|").split("|"))
        if not all(set(cell) <= set("-") for cell in cells):
            rows.append(cells)
    return rows


def test_the_dispatch_table_is_the_docstrings():
    ours, code = _table(ARCHITECTURE), _table(swinlite.fast.blocks.__doc__)
    assert len(code) >= 10 and ours == code


def test_the_package_map_names_every_top_level_module():
    """seg_views.py, wording.py and versions.py were missing."""
    block = ARCHITECTURE.split("## The library and the applications", 1)[1].split("```")[1]
    named = set(re.findall(r"[\w]+\.py", block))
    modules = {path.name for path in (REPO / "swinlite").glob("*.py")} - {"__init__.py"}
    assert modules <= named, f"the package map lacks {sorted(modules - named)}"


def test_every_export_module_is_named():
    """swinlite/segmentation/export.py was left out: only the detector's was named as a whole-model export."""
    text = " ".join(ARCHITECTURE.split())
    for path in sorted((REPO / "swinlite").rglob("export.py")):
        assert f"`{path.relative_to(REPO)}`" in text


def test_the_scripts_end_as_it_says():
    """It quoted `sys.exit(_cli.run(main))`; the scripts import run from _cli."""
    assert "`sys.exit(run(main))` (`from _cli import run`)" in " ".join(ARCHITECTURE.split())
    for script in sorted((REPO / "scripts").glob("[!_]*.py")):
        text = script.read_text()
        assert "from _cli import" in text and re.search(r"\n    sys\.exit\(run\(main[,)]", text), script.name


def test_the_config_vocabulary_names_every_key():
    """The table of shared keys, section by section, left out train.ema_warmup; the paragraph after it names each
    task's own keys."""
    block = ARCHITECTURE.split("## One config vocabulary", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", block, re.MULTILINE))
    adds = block.split("Classification adds", 1)[1]
    base = RunConfig()
    for section in sections(base):
        shared = [f.name for f in dataclasses.fields(getattr(base, section))]
        assert [key for key in shared if f"`{key}`" not in rows[section]] == [], section
        for config in (Config(), DetConfig(), SegConfig()):
            own = [f.name for f in dataclasses.fields(getattr(config, section)) if f.name not in shared]
            unnamed = [key for key in own if f"`{key}`" not in adds and f"`{section}.{key}`" not in adds]
            assert unnamed == [], f"{type(config).__name__}.{section}"
