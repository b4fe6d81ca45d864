"""Swin models; importing this registers the ``swinlite_*`` variants with timm."""

from . import variants
from ..layers.swin_block import SwinBlock
from .swin import SwinStage, SwinTransformer

__all__ = ["SwinBlock", "SwinStage", "SwinTransformer", "variants"]
