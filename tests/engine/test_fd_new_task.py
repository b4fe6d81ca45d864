"""The run engine as a task it does not ship meets it: a regression of an image's mean colour, written here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import timm
import torch
from enginekit import overrides, script_main
from torch import nn
from torch.utils.data import TensorDataset

from swinlite.engine import RunConfig, StepOutput, Task, run
from swinlite.engine.sections import DataConfig, ModelConfig


@dataclass
class ColourConfig(RunConfig):
    model: ModelConfig = field(default_factory=lambda: ModelConfig(name="swinlite_pico_patch2_window4_32"))
    data: DataConfig = field(default_factory=lambda: DataConfig(batch_size=4, num_workers=0))


def images(count: int, seed: int) -> TensorDataset:
    """``count`` noisy 16 px images and their mean colour."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(count, 3, 16, 16, generator=g)
    return TensorDataset(x, x.mean(dim=(2, 3)))


class ColourTask(Task):
    name = "colour_regression"
    config = ColourConfig
    metric = "val_neg_mse"
    output_files = ("colour_stats.json",)
    evaluation_files = ("eval.json", "errors.csv")
    seen: ClassVar[list[tuple[bool, bool]]] = []  # (model.training, grad enabled) in each evaluate call

    @classmethod
    def inputs(cls, cfg: Any) -> list[Path]:
        return []

    @classmethod
    def model_for(cls, cfg: Any, classes: list[str]) -> nn.Module:
        return timm.create_model(cfg.model.name, num_classes=3, **cfg.model.kwargs)

    def build_datasets(self) -> tuple[TensorDataset, TensorDataset]:
        (self.ctx.out / "colour_stats.json").write_text(json.dumps({"mean": 0.5}))
        return images(8, 0), images(4, 1)

    def build_model(self) -> nn.Module:
        return self.model_for(self.cfg, [])

    def train_step(self, model: nn.Module, batch: Any) -> StepOutput:
        x, y = (t.to(self.ctx.device) for t in batch)
        loss = nn.functional.mse_loss(model(x).float(), y)
        return StepOutput(loss, len(x), {"loss_mse": loss})  # a part with grad, as a task may return it

    def evaluate(self, model: nn.Module, loader: torch.utils.data.DataLoader) -> dict[str, float]:
        ColourTask.seen.append((model.training, torch.is_grad_enabled()))
        errors = [nn.functional.mse_loss(model(x), y, reduction="sum").item() for x, y in loader]
        return {"val_neg_mse": -sum(errors) / len(loader.dataset)}

    def summary(self, row: dict[str, float]) -> str:
        return f"val neg mse {row['val_neg_mse']:.4f}"

    def weights_metadata(self) -> dict[str, Any]:
        return {"model": self.cfg.model.name}


def settings(out: Path, **extra: object) -> list[str]:
    values = {"train.output_dir": out, "train.epochs": 1, "train.deterministic": True, **extra}
    return [f"{k}={v}" for k, v in values.items()]


def train(task: type[Task], out: Path, overwrite: bool = False, **extra: object) -> Path:
    return run(task, task.load_config(None, settings(out, **extra)), overwrite=overwrite)


def evaluated(out: Path) -> None:
    """What the task's evaluate script writes beside the checkpoint."""
    (out / "eval.json").write_text("{}")
    (out / "errors.csv").write_text("image,error\n")


def test_overwrite_removes_what_the_new_tasks_earlier_run_wrote(tmp_path: Path):
    """Its own --overwrite removed eval.json but kept errors.csv (Task.evaluation_files): one folder held two runs'."""
    out = train(ColourTask, tmp_path / "out")
    evaluated(out)
    (out / "notes.txt").write_text("the user's own file")
    train(ColourTask, out, overwrite=True)
    held = {p.name for p in out.iterdir()}
    assert not {"eval.json", "errors.csv"} & held
    assert {"notes.txt", "colour_stats.json", "best.safetensors"} <= held


def test_another_tasks_overwrite_removes_the_new_tasks_files(folder: Path, tmp_path: Path):
    """scripts/train.py --overwrite into the new task's folder kept colour_stats.json and errors.csv beside the
    classifier's weights; what no run wrote stays."""
    out = train(ColourTask, tmp_path / "out")
    evaluated(out)
    (out / "notes.txt").write_text("the user's own file")
    tiny = overrides("classification", folder, out, **{"train.epochs": 1})
    assert script_main("classification", ["--overwrite", *tiny]) == 0
    held = {p.name for p in out.iterdir()}
    assert not {"eval.json", "errors.csv", "colour_stats.json", "task_files.json"} & held
    assert {"notes.txt", "scan.json.gz", "best.safetensors"} <= held
