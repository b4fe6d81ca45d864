"""swinlite: a readable, fast Swin Transformer backbone registered with timm."""

from typing import Any

from . import versions  # noqa: F401  (first: an older torch or timm is refused before anything registers with them)
from .convert import convert_state_dict, detect_layout, to_timm_state_dict
from .models import SwinTransformer, clear_caches
from .weights import load_checkpoint, load_model

__version__ = "0.1.0"

__all__ = [
    "SwinTransformer",
    "__version__",
    "clear_caches",
    "convert_state_dict",
    "detect_layout",
    "load_checkpoint",
    "load_model",
    "optimize_for_inference",
    "to_timm_state_dict",
]


def __getattr__(name: str) -> Any:
    if name == "optimize_for_inference":  # loaded on first use: the compiler stack is not needed to build a model
        from .optimize import optimize_for_inference

        return optimize_for_inference
    raise AttributeError(f"module 'swinlite' has no attribute {name!r}")
