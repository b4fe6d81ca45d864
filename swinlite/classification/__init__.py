"""Image classification on ImageFolder data (``root/train/<class>/*``, ``root/val/<class>/*``): the task the run
engine trains (``task.ClassificationTask``), its config, data, scan cache, demo data and evaluation.

``ClassificationTask`` loads on first use: its evaluation draws the confusion matrix with matplotlib (the ``[train]``
extra), which the config and data modules do not need; without it, the error names the extra.
"""

from typing import Any

from ..script import extra_error
from .config import Config

__all__ = ["ClassificationTask", "Config"]


def __getattr__(name: str) -> Any:
    if name == "ClassificationTask":
        try:
            from .task import ClassificationTask
        except ModuleNotFoundError as e:
            raise extra_error(e, "swinlite.classification.ClassificationTask") from None
        return ClassificationTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
