"""Image classification on ImageFolder data (``root/train/<class>/*``, ``root/val/<class>/*``): the task the run
engine trains (``task.ClassificationTask``), its config, data, scan cache, demo data and evaluation."""

from .config import Config
from .task import ClassificationTask

__all__ = ["ClassificationTask", "Config"]
