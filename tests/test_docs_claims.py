"""The docs say what the code does: claims of README.md and docs/*.md checked against the code they describe, and
figures that name the command that measured them (tests/test_readme.py runs the README's commands)."""

from __future__ import annotations

import argparse
import inspect
import re
import subprocess
import sys
import warnings
from dataclasses import asdict
from pathlib import Path

import pytest
import timm
import torch
from scriptkit import SCRIPTS, script_env

import swinlite  # noqa: F401  (registers the swinlite_* models)
from swinlite import seq
from swinlite.classification.config import Config
from swinlite.convert import convert_pretrained
from swinlite.fast.first_order import DOUBLE_BACKWARD_ERROR
from swinlite.models import swin

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
    ("doc", "figure", "command"),
    [
        ("README.md", "costs 0–0.28 top-1 points", "`scripts/predict.py --onnx`"),
        ("README.md", "Ahead of timm on the CPU", "`OUT=/tmp/bench BUDGET_S=2400 bash benchmarks/cpu_run.sh`"),
        ("README.md", "On an H200", "`bash benchmarks/gpu_run.sh`"),
        # the README's summary links these; its detail lives in docs/performance.md's "In short"
        ("docs/performance.md", "runs 1.06–1.20× timm compiled", "`scripts/benchmark.py --compile`"),
        ("docs/performance.md", "1.19–1.23× in bf16", "`TIMM_FUSED_ATTN=2 python scripts/benchmark.py"),
    ],
)
def test_summary_figures_name_their_commands(doc: str, figure: str, command: str) -> None:
    assert command in paragraph_with((ROOT / doc).read_text(), figure)


def test_readme_cpu_command_runs_every_quoted_run_and_keeps_the_committed_tables() -> None:
    """The README said `bash benchmarks/cpu_run.sh`: its default budget (1500 s) runs the compiled train step only if
    the other runs end within 1020 s, and without OUT the run writes over the committed benchmarks/cpu_tiny_* tables."""
    script = (ROOT / "benchmarks" / "cpu_run.sh").read_text()
    default = int(re.search(r"BUDGET_S=\$\{BUDGET_S:-(\d+)\}", script).group(1))
    limits = [int(n) for n in re.findall(r"^run \w+ (\d+) ", script, flags=re.M)]
    command = re.search(r"`((?:\w+=\S+ )*)bash benchmarks/cpu_run\.sh`", one_line(ROOT / "README.md")).group(1)
    env = dict(word.split("=", 1) for word in command.split())
    assert env.get("OUT", "benchmarks").rstrip("/") != "benchmarks", command
    assert len(limits) >= 8 and int(env.get("BUDGET_S", default)) >= sum(limits), (command, limits)


def test_training_md_compile_example_names_its_command() -> None:
    paragraph = paragraph_with((ROOT / "docs" / "training.md").read_text(), "the first step took")
    assert "`python scripts/train.py train.compile=true" in paragraph


def test_models_md_double_backward_sentence_matches_the_error() -> None:
    assert "fast=False" in DOUBLE_BACKWARD_ERROR
    sentence = paragraph_with((ROOT / "docs" / "models.md").read_text(), "create_graph=True")
    assert "raises a RuntimeError saying so and naming `fast=False`" in sentence


def wall_seconds(row: str) -> float:
    """The wall time of a demo table row, its last cell: ``3 min 24 s``."""
    minutes, seconds = re.search(r"(\d+) min (\d+) s \|\s*$", row).groups()
    return 60 * int(minutes) + int(seconds)


def test_detection_md_demo_log_is_of_the_row_it_names() -> None:
    text = (ROOT / "docs" / "detection.md").read_text()
    intro = paragraph_with(text, "read AP50 35.7 / 55.0 / 65.1")
    epoch_s = float(re.search(r"epoch 4/4: .*, ([\d.]+) s \(", text).group(1))
    row = next(line for line in text.splitlines() if line.startswith("|") and "load 9–11" in line)
    assert "The load 9–11 run" in intro
    assert wall_seconds(row) >= 4 * epoch_s, f"4 epochs of {epoch_s} s do not fit in the row's wall time: {row}"


@pytest.mark.parametrize(
    ("doc", "figure", "origin"),
    [
        ("detection.md", "a score 0.035 apart", "2026-12-05, its script not committed"),
        ("detection.md", "had not finished after 9", "2026-12-05, its exact command not recorded"),
        ("detection.md", "FPN maps cast to fp32", "not committed: run 2026-12-05 for commit 4b8b2b8"),
        ("segmentation.md", "tied 65× as often", "2026-12-05 for commit 895bde9, its script not committed"),
        ("segmentation.md", "about 1.3 ms a pair", "2026-12-01, its script not committed"),
    ],
)
def test_seg_and_detection_figures_name_their_origin(doc: str, figure: str, origin: str) -> None:
    assert origin in paragraph_with((ROOT / "docs" / doc).read_text(), figure)


def help_text(script: str) -> str:
    """``python scripts/<script> --help``'s output."""
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--help"], capture_output=True, text=True, check=True, env=script_env()
    ).stdout


def help_options(help_: str) -> set[str]:
    """The ``--options`` of a script's ``--help`` output (its options section)."""
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", help_.split("options:", 1)[1])) - {"--help"}


@pytest.mark.parametrize(
    ("script", "doc"), [("evaluate_detection.py", "detection.md"), ("evaluate_segmentation.py", "segmentation.md")]
)
def test_evaluation_docs_name_every_flag_and_split(script: str, doc: str) -> None:
    help_ = help_text(script)
    text = one_line(ROOT / "docs" / doc)
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", " ".join(re.findall(r"`[^`]*`", text))))
    unnamed = sorted(help_options(help_) - named)
    assert not unnamed, f"docs/{doc} does not name {script}'s {unnamed}"
    choices, default = re.search(r"--split \{([\w,]+)\}\s+\(default: (\w+)\)", help_).groups()
    (other,) = set(choices.split(",")) - {default}
    assert f"`--split {default}` (the default) or `{other}`" in text


def test_ema_sentence_matches_ema_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from _cli import ema_weights
    from safetensors.torch import save_file

    ema = tmp_path / "ema.safetensors"
    save_file({"w": torch.zeros(1)}, str(ema), metadata={"weights": "ema"})
    assert ema_weights(argparse.Namespace(checkpoint=ema, ema=True)) == ema
    assert capsys.readouterr().err == ""
    for doc in ("detection.md", "segmentation.md"):
        sentence = "`EMA weights: PATH` when that is another file than `--checkpoint` (nothing is printed for"
        assert sentence in one_line(ROOT / "docs" / doc)


def test_segmentation_md_build_upernet_example_runs() -> None:
    from swinlite.segmentation import build_upernet
    from swinlite.segmentation.config import SegModelConfig

    text = (ROOT / "docs" / "segmentation.md").read_text()
    (example,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "build_upernet(" in b]
    scope = {"build_upernet": build_upernet, "SegModelConfig": SegModelConfig, "torch": torch}
    exec(example, scope)
    assert scope["out"].logits.shape == (1, 5, 64, 64) and scope["out"].aux_logits is None


@pytest.mark.parametrize(
    "name", ["RelativePositionBias", "ContinuousPositionBias", "RelPosSelfAttention1d", "RelPosSeqEncoder"]
)
def test_models_md_signatures_name_the_real_parameters(name: str) -> None:
    """docs/models.md wrote ``RelPosSelfAttention1d(dim, heads, max_len, ...)``: ``heads=8`` was a TypeError, the
    parameter being ``num_heads``. Every parameter a documented call names is the class's."""
    parameters = inspect.signature(getattr(seq, name, None) or getattr(swin, name)).parameters
    calls = re.findall(rf"`(?:swinlite\.seq\.)?{name}\(([^`]*)\)", one_line(ROOT / "docs" / "models.md"))
    names = {p.split("=")[0].strip() for call in calls for p in call.split(",") if re.fullmatch(r"\s*[a-z_]+(=.*)?", p)}
    assert calls and names - {"..."} <= set(parameters), names - set(parameters)
