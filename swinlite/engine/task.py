"""What a task gives the run engine: its data, its model, its loss step, its evaluation, its "best" metric.

Everything else of a run (output folder and lock, resume, RNG, AMP, accumulation, clipping, EMA, DDP,
progress, metrics, weights files) is the engine's. A new task is a subclass of :class:`Task` and a config (a
:class:`~swinlite.engine.sections.RunConfig` subclass) in any package; swinlite's own live in
``swinlite/<task>/task.py``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn
from torch.utils.data import Dataset

from .config import load_config
from .distributed import DistInfo
from .val_content import Sample

if TYPE_CHECKING:
    from .loop import StepSettings


@dataclass
class StepOutput:
    """One micro-batch's training loss (a scalar to minimise), its named parts for the metrics, and its size.

    Under torchrun the epoch's means are summed over the processes part by part: every process's ``parts`` must name
    the same keys (the run stops naming each process's where they differ).
    """

    loss: torch.Tensor
    size: int  # samples in the micro-batch: the loss is averaged over epochs by it
    # e.g. {"loss_classifier": ...}: curves.png draws the parts named loss_* beside train_loss and val_loss
    parts: dict[str, torch.Tensor | float] = field(default_factory=dict)


@dataclass
class RunContext:
    """What a task may use of the run: its config, where it runs, its output folder, rank-0 logging."""

    cfg: Any
    device: torch.device
    dist: DistInfo
    out: Path
    settings: StepSettings  # device, AMP dtype, channels_last, ...

    def log(self, message: str) -> None:
        if self.dist.is_main:
            print(message, flush=True)


class Task(abc.ABC):
    """A training task. Subclasses set the class attributes and implement the abstract methods.

    Attributes:
        name: written into the weights metadata (``task``) and the resume file, e.g. ``"classification"``.
        config: the task's config dataclass (its defaults are the task's recipe).
        metric: the ``evaluate`` key that picks ``best.safetensors`` (higher is better), e.g. ``"val_top1"``.
        metric_format: how the log lines print the best :attr:`metric` (a format spec): two decimals, as a percent
            reads (``97.50``); e.g. ``".4g"`` for a small score such as a negated loss (``-0.04623``).
        drop_last: whether the training loader drops the last incomplete batch.
        reserved_kwargs: the ``model.kwargs`` keys set otherwise, each with who sets it, for the error that refuses
            one (``model.kwargs.in_chans: set by the task (its loaders give RGB images: 3 channels), ...``).
        output_files: files the task keeps in the output folder, written as it builds its datasets (e.g. its data
            scan's cache): ``--overwrite`` removes the old run's files only after that build, so by then these are
            the new run's (the old ones read where they still hold, else replaced); a run of another task removes
            them.
        evaluation_files: what the task's evaluate script writes beside the checkpoint by default: they describe
            the replaced run's weights, so ``--overwrite`` (of any task) removes them too. The first of them, a JSON
            object with a ``"checkpoint"``, the path of the weights file evaluated (as the shipped scripts'
            ``eval.json``: :func:`swinlite.images.evaluated_data`; a task's own ``reg_eval.json`` alike), is their
            record: a run removes them all before it replaces the weights file it names
            (:func:`~swinlite.engine.checkpoint.clear_evaluation`, which reads the first file alone); without such a
            record first they stay beside new weights. The names of both that
            swinlite's tables of its own tasks' files do not hold, the run records in ``task_files.json`` in its
            folder before the task writes any (:data:`swinlite.files.TASK_RECORD`): that record is what tells a later
            ``--overwrite`` which files are a run's; a file of another name stays.

    The engine checks a task class before anything is read or written: one that leaves an abstract method
    undefined is refused, naming it.
    """

    name: ClassVar[str]
    config: ClassVar[type]
    metric: ClassVar[str]
    metric_format: ClassVar[str] = ".2f"
    drop_last: ClassVar[bool] = True
    reserved_kwargs: ClassVar[dict[str, str]] = {
        "num_classes": "the task (from the data)",
        "in_chans": "the task (its loaders give RGB images: 3 channels)",
    }
    output_files: ClassVar[tuple[str, ...]] = ()
    evaluation_files: ClassVar[tuple[str, ...]] = ()

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg

    @classmethod
    def load_config(cls, path: str | Path | None = None, overrides: list[str] | None = None) -> Any:
        """The task's defaults, then the YAML file's overrides, then ``key=value`` overrides, checked."""
        return load_config(cls.config(), path, overrides)

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """ValueError for a task setting that cannot work; runs before any data is read."""
        return None

    @classmethod
    def check_inputs(cls, cfg: Any) -> None:
        """ValueError naming a data file or folder the run reads that does not exist, in the task's words (checked
        before the pretrained weights are looked for, so a mistyped ``--data-dir`` is named before they are
        fetched); default: none (the data is checked when read)."""
        return None

    @classmethod
    def inputs(cls, cfg: Any) -> list[Path]:
        """The files and folders the run reads (no output may lie inside or replace one); default ``data.data_dir``."""
        return [Path(cfg.data.data_dir)]

    @classmethod
    def model_name(cls, cfg: Any) -> str:
        """The timm model whose constructor takes ``model.kwargs`` (checked before any data is read)."""
        return cfg.model.name

    @abc.abstractmethod
    def build_datasets(self) -> tuple[Dataset, Dataset]:
        """Check the data and return (train, val) datasets; ``train[i]`` draws its augmentation from the global
        generators, which the engine seeds per sample (so that resuming anywhere gives the same samples)."""

    def val_samples(self, val: Dataset) -> list[Sample]:
        """Each sample of ``val`` (the val set :meth:`build_datasets` returned) as what tells it from another: its files
        (as :class:`~pathlib.Path`: compared by path and size, never read) and its labels, e.g. classification's
        ``(image, class name)``. ``--resume`` compares their fingerprint with the one the resume file records
        (:mod:`~swinlite.engine.val_content`): a file removed, added or relabelled restarts the best. Default: none
        (only the settings that name the set are compared)."""
        return []

    def collate(self, batch: list[Any]) -> Any:
        """Batches of the datasets' samples (default: torch's stacking)."""
        return torch.utils.data.default_collate(batch)

    @classmethod
    @abc.abstractmethod
    def model_for(cls, cfg: Any, classes: list[str]) -> nn.Module:
        """The task's model as ``cfg`` describes it for ``classes``: what :meth:`build_model` returns, and what the
        engine builds on the meta device with stand-in classes (``preflight.STAND_IN_CLASSES``) before any data is
        read, so that weights that do not fit are refused before the data scan; a task without classes ignores them.

        Its Swin must be built through :func:`swinlite.engine.model.create_model` (the model, or its backbone): it
        loads ``model.pretrained``'s weights and applies ``model.kwargs`` and ``model.grad_checkpointing``. A model
        of plain ``timm.create_model`` trains from random weights while ``config.yaml`` records the file (swinlite's
        detection and segmentation builders apply the same settings themselves).

        ``model.pretrained`` reads a Swin's weights at the top level of a file, or behind a shipped task's prefix
        (:data:`swinlite.convert.RUN_SWIN_PREFIXES`): a model holding its Swin under a name of its own
        (``self.backbone = create_model(...)``) writes files that start no model with ``model.pretrained``, its own
        task's neither (refused: "checkpoint keys did not map onto SwinTransformer"). Keep the Swin at the top level
        (the model is the Swin, its classifier the task's output: ``create_model(cfg.model, num_classes=1)``), or load
        such a file in :meth:`build_model` from a config key of the task's own, ``model.pretrained`` false: the whole
        model (``model.load_state_dict(swinlite.io.read_state_dict(path))``), or its Swin alone (its keys, the prefix
        removed, through :func:`swinlite.load_checkpoint`); ``--resume`` continues the run itself."""

    @abc.abstractmethod
    def build_model(self) -> nn.Module:
        """The model to train (on the CPU; the engine moves and wraps it), e.g. ``self.model_for(self.cfg, classes)``;
        pretrained weights loaded (through :func:`~swinlite.engine.model.create_model`, as :meth:`model_for` says).
        With ``model.grad_checkpointing`` the engine calls its ``set_grad_checkpointing(True)``; a model without one
        is refused unless a module inside checkpoints already (a backbone of ``create_model``)."""

    @abc.abstractmethod
    def train_step(self, model: nn.Module, batch: Any) -> StepOutput:
        """Move a batch to the device, run the model, return the loss (the engine runs it under autocast, and
        detaches the parts for the metrics). Its :attr:`StepOutput.parts` must have the same keys on every process,
        none named as an engine column (``train_loss``, ``lr``, ``epoch``, ...: refused, the run stops).

        ``model`` may be wrapped (``DistributedDataParallel`` under torchrun, ``torch.compile``): call only
        ``model(...)``, and put anything else (``forward_head``, ...) in the model's ``forward``. The engine converts
        the model to channels-last with ``train.channels_last``; the batch is the task's to convert
        (``self.ctx.settings.channels_last``), as the shipped tasks do."""

    @abc.abstractmethod
    def evaluate(self, model: nn.Module, loader: torch.utils.data.DataLoader) -> dict[str, float]:
        """``val_*`` metrics of ``model`` over this process's shard, combined over all processes (e.g. by
        :func:`~swinlite.engine.distributed.all_reduce_sum`), as real numbers (Python's, NumPy's or 0-d tensors: taken
        as floats); they must hold :attr:`metric`. :attr:`metric` missing, a value that is no number, a key of an
        engine column (``epoch``, ``lr``, ``train_loss``, ``loss_*``, ...) or, under torchrun, a value that differs
        between processes (not combined) stops the run, naming it, the trained epoch kept to resume. ``curves.png``
        draws a ``val_loss`` beside the training losses.

        The engine calls it with ``model`` in eval mode and under ``torch.no_grad()`` (its mode restored after): the
        task need not set either. ``model`` may be wrapped, as :meth:`train_step`'s: call only ``model(...)``. The
        engine does not autocast it (only :meth:`train_step`): run the model under
        ``swinlite.engine.loop.autocast(self.ctx.settings)``, and convert the batch with
        ``self.ctx.settings.channels_last``, as classification's evaluation does (``classification/evaluation.py``)."""

    @abc.abstractmethod
    def summary(self, row: dict[str, float]) -> str:
        """The epoch line's metrics part, e.g. ``"val loss 0.1, top-1 97.50%"`` (EMA columns end in ``_ema``)."""

    def curves(self, row: dict[str, float]) -> dict[str, str]:
        """Columns drawn on the metric panel of ``curves.png``, with their labels (its loss panel draws
        ``train_loss``, the :attr:`StepOutput.parts` named ``loss_*`` and a ``val_loss`` that :meth:`evaluate`
        returns)."""
        return {self.metric: self.metric}

    @abc.abstractmethod
    def weights_metadata(self) -> dict[str, Any]:
        """What rebuilds the model from a weights file (model name and arguments, classes, preprocessing, ...), as
        values JSON holds (Python numbers, not NumPy's: the engine calls it once the model is built, before the first
        epoch, and refuses one it cannot write); the engine adds ``format``, ``task``, ``weights``, ``swinlite``,
        ``epoch`` and the metric.

        The data's ``mean`` and ``std`` are read under ``data`` or ``preprocessing`` (a dict holding them, e.g.
        ``{"preprocessing": {"mean": [...], "std": [...], ...}}``: :data:`swinlite.metadata.RUN_RECORDS`), by a run
        started from the file with ``model.pretrained``, which takes them where its own are unset: where neither
        records one, the engine adds the run's resolved ``data.mean`` / ``data.std`` under ``preprocessing``
        (:func:`swinlite.metadata.with_normalization`)."""

    def state(self) -> dict[str, Any]:
        """What the resume file keeps of the task (e.g. its classes), checked by :meth:`check_resumed`."""
        return {}

    def check_resumed(self, state: dict[str, Any], path: Path) -> None:
        """ValueError when the resumed run's task state no longer fits the data (e.g. a class folder went away)."""
        return None
