"""Training and evaluation on ImageFolder data: config, data, engine, checkpoints, runs."""

from .config import Config, load_config
from .runner import train

__all__ = ["Config", "load_config", "train"]
