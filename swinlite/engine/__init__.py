"""The run engine: one training loop, output folder, resume and logging for every task.

Design. A task (``swinlite/classification/task.py``, ``swinlite/detection/task.py``) is a subclass of
:class:`Task` that supplies its data (two datasets), its model, its loss step, its evaluation and the metric
that picks "best"; its config subclasses :class:`~swinlite.engine.sections.RunConfig`, whose five sections
(``model``, ``data``, ``optim``, ``schedule``, ``train``) mean the same in every task. :func:`run` does the rest,
identically for every task:

- before anything is read: every config value against its field's range (``config.check_values``), the settings
  that involve several keys (``preflight``), the model name, ``model.kwargs`` against the model's constructor
  and the pretrained weights (``model``);
- the output folder: its lock, ``--resume`` / ``--overwrite``, ``config.yaml`` (``run``);
- the loaders: a resumable sampler and per-sample seeded augmentation, one shard per process (``loaders``,
  ``sampling``);
- under ``torchrun``, before the processes join: each one's startup checks and settings compared through the
  launch's rendezvous store (``handshake``);
- the steps: AMP, gradient accumulation, clipping, EMA, the divergence check (``loop``), DDP with the
  collective timeout and the stalled-rank error (``distributed``), each warning
  once (``rank_warnings``), ``torch.compile``, channels-last;
- the files: ``metrics.csv``, ``curves.png``, TensorBoard (``metrics``); ``last`` / ``best`` / EMA weights with
  one metadata schema carrying ``task`` and ``resume.pt`` at epoch and step granularity, bit-equal on resume
  (``checkpoint``, ``trainer``); a failed evaluation keeps the trained epoch;
- the scripts' error lines and exit codes (``cli``).

The engine imports no task: a new task is a :class:`Task` subclass in any package (the shipped ones in
``swinlite/<task>/``), and no engine change.
"""

from .run import run
from .sections import RunConfig
from .task import RunContext, StepOutput, Task

__all__ = ["RunConfig", "RunContext", "StepOutput", "Task", "run"]
