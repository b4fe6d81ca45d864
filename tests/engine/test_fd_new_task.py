"""The run engine as a task it does not ship meets it: a regression of an image's mean colour, written here."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest
import timm
import torch
from enginekit import overrides, script_main
from rankforks import forked_pair, report_and_exit
from single_thread import one_thread_only
from torch import nn
from torch.utils.data import TensorDataset

from swinlite.detection.config import DetModelConfig
from swinlite.detection.models import build_detector
from swinlite.engine import RunConfig, StepOutput, Task, distributed, handshake, run
from swinlite.engine.cli import run_from_cli
from swinlite.engine.distributed import DistInfo
from swinlite.engine.model import create_model
from swinlite.engine.preflight import pretrained_data
from swinlite.engine.sections import DataConfig, ModelConfig
from swinlite.engine.trainer import EvaluationFailed, Trainer, evaluating, score_text
from swinlite.io import read_metadata, read_state_dict
from swinlite.weights import check_not_run_resume


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
        return create_model(cfg.model, num_classes=3)  # model.pretrained, model.kwargs, grad checkpointing

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


NORMALIZATION = {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}  # colour_run's data.mean and data.std


@pytest.fixture(scope="module")
def colour_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of one finished ColourTask run (its own mean and std), read by the tests below and copied by those
    that change it."""
    normalization = {f"data.{key}": values for key, values in NORMALIZATION.items()}
    with one_thread_only():
        return train(ColourTask, tmp_path_factory.mktemp("colour") / "out", **normalization)


def test_a_run_started_from_the_weights_of_a_task_of_your_own_takes_their_mean_and_std(colour_run: Path):
    """model.pretrained=<its best.safetensors> normalised with ImageNet's, silently: its weights_metadata records no
    mean and std (its resume.pt gave them, from the config.yaml beside it)."""
    cfg = ColourTask.load_config(None, [f"model.pretrained={colour_run / 'best.safetensors'}"])
    assert {key: list(values) for key, values in pretrained_data(cfg).items()} == NORMALIZATION


def test_a_run_leaves_torchs_deterministic_settings_as_it_found_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """train.deterministic=true is the run's: a sweep's next run in the process (or the caller's code) had
    deterministic algorithms on, cuDNN's benchmark off and CUBLAS_WORKSPACE_CONFIG set. Each comes back as found: here
    the other way round (deterministic algorithms on but warn_only, the benchmark on, the variable unset)."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = True
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        train(ColourTask, tmp_path / "out")  # train.deterministic=true: errors, not warnings, and no benchmark
        found = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
        assert found == (True, True) and torch.backends.cudnn.benchmark
        assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    finally:  # torch's defaults, for the tests after this one
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.benchmark = False


def test_overwrite_removes_what_the_new_tasks_earlier_run_wrote(colour_run: Path, tmp_path: Path):
    """Its own --overwrite removed eval.json but kept errors.csv (Task.evaluation_files): one folder held two runs'."""
    out = shutil.copytree(colour_run, tmp_path / "out")
    evaluated(out)
    (out / "notes.txt").write_text("the user's own file")
    train(ColourTask, out, overwrite=True)
    held = {p.name for p in out.iterdir()}
    assert not {"eval.json", "errors.csv"} & held
    assert {"notes.txt", "colour_stats.json", "best.safetensors"} <= held


def test_another_tasks_overwrite_removes_the_new_tasks_files(colour_run: Path, folder: Path, tmp_path: Path):
    """scripts/train.py --overwrite into the new task's folder kept colour_stats.json and errors.csv beside the
    classifier's weights; what no run wrote stays."""
    out = shutil.copytree(colour_run, tmp_path / "out")
    evaluated(out)
    (out / "notes.txt").write_text("the user's own file")
    tiny = overrides("classification", folder, out, **{"train.epochs": 1})
    assert script_main("classification", ["--overwrite", *tiny]) == 0
    held = {p.name for p in out.iterdir()}
    assert not {"eval.json", "errors.csv", "colour_stats.json", "task_files.json"} & held
    assert {"notes.txt", "scan.json.gz", "best.safetensors"} <= held


class WrongMetric(ColourTask):
    metric = "val_mse"


def test_a_metric_evaluate_does_not_return_is_named_and_the_epoch_kept(tmp_path: Path):
    """KeyError: 'val_mse' in trainer._best_candidate after a full epoch, the epoch lost."""
    with pytest.raises(EvaluationFailed) as e:
        train(WrongMetric, tmp_path / "out")
    assert "WrongMetric.evaluate() returned no 'val_mse', the task's metric (Task.metric); it returned val_neg_mse" in (
        str(e.value)
    )
    assert (tmp_path / "out" / "resume.pt").is_file()  # the trained epoch, to --resume


class Returning(ColourTask):
    """Its evaluate returns ``returns(val_neg_mse)`` (:func:`returning` makes one per test)."""

    returns: ClassVar[Callable[[float], dict[str, Any]]]

    def evaluate(self, model: nn.Module, loader: torch.utils.data.DataLoader) -> dict[str, Any]:
        return type(self).returns(super().evaluate(model, loader)["val_neg_mse"])


def returning(scores: Callable[[float], dict[str, Any]]) -> type[Task]:
    return type("Returning", (Returning,), {"returns": staticmethod(scores)})


@pytest.mark.parametrize("kind", [torch.tensor, np.float32, np.int64, np.array])  # np.array(0.5): 0-d, was refused
def test_scores_held_as_tensors_or_numpy_numbers_are_taken_as_floats(kind: Callable[[float], Any], tmp_path: Path):
    """0-d tensors and NumPy numbers failed the first save (the weights' metadata is JSON) after the epoch trained."""
    train(returning(lambda score: {"val_neg_mse": kind(score)}), tmp_path / "out")
    assert type(read_metadata(tmp_path / "out" / "best.safetensors")["val_neg_mse"]) is float


@pytest.mark.parametrize(
    ("scores", "said"),
    [
        (lambda score: {"val_neg_mse": torch.tensor([score])}, r"val_neg_mse=tensor\(\[-[\d.]+\]\) \(Tensor\): expec"),
        (lambda score: {"val_neg_mse": score, "lr": 0.1}, r"returned 'lr', a column of the engine's metrics \(epoch"),
    ],
    ids=["1-d tensor", "lr"],
)
def test_a_score_that_is_no_number_or_an_engine_column_is_named_and_the_epoch_kept(scores, said, tmp_path: Path):
    """A 1-element tensor failed the first save with a TypeError, the epoch lost; an ``lr`` was replaced silently."""
    with pytest.raises(EvaluationFailed, match=said):
        train(returning(scores), tmp_path / "out")
    assert (tmp_path / "out" / "resume.pt").is_file()


class Unreduced(ColourTask):
    """Each process's score of its own shard, as an evaluate that does not all-reduce its sums returns it."""

    shards: ClassVar[list[float]] = []  # by rank

    def evaluate(self, model: nn.Module, loader: torch.utils.data.DataLoader) -> dict[str, float]:
        return {"val_neg_mse": self.shards[self.ctx.dist.rank]}


def _scoring_rank(rank: int, port: int, shards: list[float], reports: list[Path]) -> None:
    """One process: joins the group and reports the trainer's scores of Unreduced's evaluation, or its error."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    info = distributed.launched()
    distributed.init_distributed(torch.device("cpu"), 10.0, handshake.launch_store(info, 10.0))
    Unreduced.shards = shards
    trainer = SimpleNamespace(task=Unreduced(SimpleNamespace(cfg=None, dist=info)), dist=info)
    try:
        said = f"scores {Trainer.scores(trainer, nn.Identity(), None)}"
    except ValueError as e:
        said = str(e)
    report_and_exit(reports, rank, said)


@pytest.mark.parametrize(
    ("shards", "said"),
    [
        (
            [-0.105, -0.124],
            "Unreduced.evaluate() must reduce its metrics over processes: val_neg_mse is -0.105 on rank 0, -0.124 on "
            "rank 1; combine each process's sums before returning (swinlite.engine.distributed.all_reduce_sum)",
        ),
        ([math.nan, math.nan], "scores {'val_neg_mse': nan}"),  # all-reduced: the same everywhere, NaN too
    ],
    ids=["differ", "nan"],
)
def test_scores_that_differ_between_processes_stop_every_one_alike(shards: list[float], said: str, tmp_path: Path):
    """Each process kept its own shard's score: rank 0's went into metrics.csv and picked its best weights, while
    rank 1 picked by its own. Every process raises the same error now (an evaluation failed on every process: the
    trained epoch is saved, rank 0 alone says it)."""
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    forked_pair(_scoring_rank, (shards, reports), timeout=30)
    assert [r.read_text() if r.exists() else "" for r in reports] == [said, said]


class Head(nn.Module):
    """A task's own model around a Swin, without set_grad_checkpointing."""

    def __init__(self, swin: nn.Module) -> None:
        super().__init__()
        self.swin = swin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.swin(x)


def built(build: Callable[[Any], nn.Module]) -> type[Task]:
    """ColourTask with the model ``build(cfg)``."""
    return type("Built", (ColourTask,), {"model_for": classmethod(lambda cls, cfg, classes: build(cfg))})


@pytest.mark.parametrize(
    "build",
    [
        lambda cfg: timm.create_model(cfg.model.name, num_classes=3),  # the engine applies it
        lambda cfg: Head(create_model(cfg.model, num_classes=3)),  # create_model applied it to the Swin inside
        lambda cfg: build_detector(DetModelConfig(cfg.model.name, grad_checkpointing=True), 3, 32, 32),  # its body
    ],
    ids=["timm.create_model", "create_model inside", "detector"],
)
def test_grad_checkpointing_reaches_a_model_built_without_create_model(build: Callable, tmp_path: Path):
    """model.grad_checkpointing=true was ignored silently where the task built its model with timm.create_model."""
    task = built(build)
    cfg = task.load_config(None, settings(tmp_path, **{"model.grad_checkpointing": True}))
    model = Trainer(task, cfg, DistInfo(), torch.device("cpu"), tmp_path).model
    stages = [m for m in model.modules() if hasattr(m, "grad_checkpointing")]
    assert stages and all(stage.grad_checkpointing for stage in stages)


def test_grad_checkpointing_of_a_model_that_cannot_is_refused_before_the_data_is_read(tmp_path: Path):
    """The run refused it only as it built its model, after the data scan."""
    task = built(lambda cfg: Head(timm.create_model(cfg.model.name, num_classes=3)))
    refusal = r"^model.grad_checkpointing=true, but the task's model \(Head\) has no set_"
    cfg = task.load_config(None, settings(tmp_path, **{"model.grad_checkpointing": True}))
    with pytest.raises(ValueError, match=refusal):
        Trainer(task, cfg, DistInfo(), torch.device("cpu"), tmp_path)
    unread = type("Unread", (task,), {"build_datasets": lambda self: pytest.fail("the data was read")})
    with pytest.raises(ValueError, match=refusal):
        train(unread, tmp_path / "out", **{"model.grad_checkpointing": True})
    assert not (tmp_path / "out").exists()


class LossPart(ColourTask):
    def train_step(self, model: nn.Module, batch: Any) -> StepOutput:
        out = super().train_step(model, batch)
        return StepOutput(out.loss, out.size, {"train_loss": out.loss.detach() * 0})


def test_a_loss_part_named_as_an_engine_column_is_refused(tmp_path: Path):
    """A part named train_loss replaced the training loss in metrics.csv, silently."""
    with pytest.raises(ValueError, match=r"^the task's train_step returned StepOutput.parts\['train_loss'\], a column"):
        train(LossPart, tmp_path / "out")


class EmaEvaluationFails(ColourTask):
    scored: ClassVar[list[nn.Module]] = []

    def evaluate(self, model: nn.Module, loader: torch.utils.data.DataLoader) -> dict[str, float]:
        EmaEvaluationFails.scored.append(model)
        if len(EmaEvaluationFails.scored) == 2:  # the raw weights are scored first, then their EMA
            raise RuntimeError("the EMA copy cannot be scored")
        return super().evaluate(model, loader)


def test_a_failed_evaluation_of_the_ema_weights_keeps_the_trained_epoch(tmp_path: Path):
    """Only the raw weights' evaluation saved the trained epoch when it failed: the EMA's stopped the run unsaved."""
    with pytest.raises(EvaluationFailed, match=r"epoch 1/1 \(EMA weights\) failed \(RuntimeError: the EMA copy"):
        train(EmaEvaluationFails, tmp_path / "out", **{"train.ema_decay": 0.5})
    assert (tmp_path / "out" / "resume.pt").is_file()


class NumpyMetadata(ColourTask):
    def weights_metadata(self) -> dict[str, Any]:
        return {"mean": np.float32(0.5)}


def test_weights_metadata_json_cannot_hold_is_named_before_training(tmp_path: Path, capsys):
    """np.float32 in weights_metadata() was a TypeError at the first save, after an epoch."""
    with pytest.raises(ValueError, match=r"NumpyMetadata.weights_metadata\(\) returned mean=.*\(float32\)"):
        train(NumpyMetadata, tmp_path / "out")
    assert "epoch 1/1:" not in capsys.readouterr().out


def test_evaluate_runs_in_eval_mode_without_grad_and_train_mode_returns(tmp_path: Path, recwarn):
    """A task that forgot model.eval() was scored with drop-path on; a part with grad warned at every step."""
    ColourTask.seen.clear()
    train(ColourTask, tmp_path / "out", **{"train.epochs": 2, "model.kwargs": "{drop_path_rate: 0.5}"})
    assert ColourTask.seen == [(False, False), (False, False)]
    assert not [w for w in recwarn if "requires_grad" in str(w.message)]
    model = nn.Dropout().train()
    with evaluating(model):
        assert not model.training and not torch.is_grad_enabled()
    assert model.training and torch.is_grad_enabled()


# ColourTask as a user wrote it without model_for
Incomplete = type(
    "Incomplete", (Task,), {k: v for k, v in vars(ColourTask).items() if k not in ("model_for", "__dict__")}
)


def test_an_incomplete_task_is_refused_before_anything_is_written(tmp_path: Path):
    """A Task subclass without model_for failed with a raw TypeError traceback after the output folder was locked."""
    with pytest.raises(ValueError) as e:
        run_from_cli(Incomplete, None, settings(tmp_path / "out"))
    assert str(e.value) == (
        "task Incomplete does not define model_for (abstract methods of swinlite.engine.Task, each needed by the "
        "run): define them in the class"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        (("stats/x.json",), "'stats/x.json' is not a plain file name"),
        (("config.yaml",), "'config.yaml' is a file swin"),
    ],
)
def test_a_task_declaring_files_no_record_may_hold_is_refused_before_anything_is_written(tmp_path, files, problem):
    """Such a task was refused as its files' record was written, in the locked output folder."""
    declared = type("Declared", (ColourTask,), {"evaluation_files": files})
    with pytest.raises(ValueError, match=f"task Declared's output_files and evaluation_files: {problem}"):
        run_from_cli(declared, None, settings(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_metric_format_that_formats_no_score_is_refused_before_anything_is_written(tmp_path: Path):
    """It failed the run's last line ('Invalid format specifier'), after training and every save."""
    bad = type("BadFormat", (ColourTask,), {"metric_format": "{:.3f}"})
    with pytest.raises(ValueError, match=r"^task BadFormat's metric_format '\{:\.3f\}' formats no score \("):
        run_from_cli(bad, None, settings(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_the_resume_state_of_a_task_of_your_own_is_read_as_a_models_weights(colour_run: Path):
    """83cc7ca refused any task's resume.pt but a classifier's, naming its best.safetensors, which the classifier's
    scripts refuse next (it names its task): its model was read with --model, and is again."""
    out = colour_run
    check_not_run_resume(out / "resume.pt")
    state = read_state_dict(out / "resume.pt")
    assert torch.equal(state["head.fc.weight"], read_state_dict(out / "last.safetensors")["head.fc.weight"])


@pytest.mark.parametrize(("spec", "score", "text"), [(".2f", 97.5, "97.50"), (".2f", 0.631188, "0.63"),
                                                    (".2f", 0.0, "0.00"), (".4g", -0.04623, "-0.04623")])  # fmt: skip
def test_best_scores_print_in_the_tasks_format(spec: str, score: float, text: str):
    """A best of -0.0462 printed -0.05 (two decimals, as a percent reads): a task gives its metric's format."""
    assert score_text(score, type("T", (), {"metric_format": spec})) == text


class SmallScore(ColourTask):
    metric_format = ".4g"

    def evaluate(self, model: nn.Module, loader: torch.utils.data.DataLoader) -> dict[str, float]:
        return {"val_neg_mse": -0.0462}


def test_the_done_line_of_a_small_metric(tmp_path: Path, capsys):
    train(SmallScore, tmp_path / "out")
    assert "done: best val_neg_mse -0.0462 at epoch 1\n" in capsys.readouterr().out
