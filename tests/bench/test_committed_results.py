"""Benchmark JSON is committed only beside the markdown table generated from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
AD_HOC = "benchmark.json"  # a plain `scripts/benchmark.py` run's default output, gitignored: never committed


def _figures(row: dict) -> str:
    """A row's measured figure as the report writes it into the table."""
    return f"{row['ms']:.1f}" if "ms" in row else f"{row['images_per_s']:.2f}"


@pytest.mark.parametrize(
    "result", sorted(p for p in BENCHMARKS.glob("*.json") if p.name != AD_HOC), ids=lambda p: p.name
)
def test_json_has_its_table(result: Path) -> None:
    table = result.with_suffix(".md")
    assert table.is_file(), f"{result.name} has no {table.name}: commit a run's JSON only with its table"
    text = table.read_text()
    missing = [_figures(row) for row in json.loads(result.read_text())["rows"] if f"| {_figures(row)} |" not in text]
    assert not missing, f"{table.name} is not the table of {result.name}: figures {missing} are not in it"
