"""swinlite: a readable, fast Swin Transformer backbone registered with timm."""

from .convert import convert_state_dict, detect_layout, load_checkpoint
from .models import SwinTransformer
from .weights import load_model

__version__ = "0.1.0"

__all__ = ["SwinTransformer", "__version__", "convert_state_dict", "detect_layout", "load_checkpoint", "load_model"]
