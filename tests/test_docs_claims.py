"""The docs say what the code does: claims of README.md and docs/*.md checked against the code they describe, and
figures that name the command that measured them (tests/test_readme.py runs the README's commands)."""

from __future__ import annotations

import re
import warnings
from dataclasses import asdict
from pathlib import Path

import pytest
import timm
import torch

import swinlite  # noqa: F401  (registers the swinlite_* models)
from swinlite.classification.config import Config
from swinlite.convert import convert_pretrained
from swinlite.fast.first_order import DOUBLE_BACKWARD_ERROR

ROOT = Path(__file__).resolve().parents[1]


def one_line(path: Path) -> str:
    """``path``'s text with every run of whitespace made one space, so a sentence reads whole across lines."""
    return re.sub(r"\s+", " ", path.read_text())


def test_readme_pretrained_strict_sentence_matches_the_loader() -> None:
    model = timm.create_model("swinlite_pico_patch2_window4_32")
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    key = "layers.0.blocks.0.norm1.weight"
    missing = {k: v for k, v in weights.items() if k != key}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        convert_pretrained(missing, model, strict=False)
    assert any(key in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="NaN or infinite"):
        convert_pretrained({**weights, key: torch.full_like(weights[key], float("nan"))}, model, strict=False)

    readme = one_line(ROOT / "README.md")
    assert "a NaN or infinite one is refused either way" in readme


def config_keys() -> list[str]:
    """Every ``section.key`` of classification's config, as ``scripts/train.py --print-config`` shows them."""
    return [f"{section}.{key}" for section, keys in asdict(Config()).items() for key in keys]


def test_training_md_names_every_classification_config_key() -> None:
    text = (ROOT / "docs" / "training.md").read_text()
    unnamed = [key for key in config_keys() if not re.search(rf"`{re.escape(key)}(?![\w.])", text)]
    assert not unnamed, f"docs/training.md describes no {unnamed}"
    assert "`schedule.kind=poly`" in text


def paragraph_with(text: str, figure: str) -> str:
    """The blank-line-separated paragraph of ``text`` (whitespace made one space) that holds ``figure``."""
    found = [re.sub(r"\s+", " ", p) for p in text.split("\n\n") if figure in re.sub(r"\s+", " ", p)]
    assert len(found) == 1, f"{figure!r} is in {len(found)} paragraphs"
    return found[0]


@pytest.mark.parametrize(
    ("figure", "command"),
    [
        ("costs 0–0.28 top-1 points", "`scripts/predict.py --onnx`"),
        ("runs 1.09–1.20× timm compiled", "`scripts/benchmark.py --compile`"),
        ("On an H200", "`bash benchmarks/gpu_run.sh`"),
        ("1.19–1.23× in bf16", "`TIMM_FUSED_ATTN=2 python scripts/benchmark.py"),
    ],
)
def test_readme_figures_name_their_commands(figure: str, command: str) -> None:
    assert command in paragraph_with((ROOT / "README.md").read_text(), figure)


def test_training_md_compile_example_names_its_command() -> None:
    paragraph = paragraph_with((ROOT / "docs" / "training.md").read_text(), "the first step took")
    assert "`python scripts/train.py train.compile=true" in paragraph


def test_models_md_double_backward_sentence_matches_the_error() -> None:
    assert "fast=False" in DOUBLE_BACKWARD_ERROR
    sentence = paragraph_with((ROOT / "docs" / "models.md").read_text(), "create_graph=True")
    assert "raises a RuntimeError saying so and naming `fast=False`" in sentence
