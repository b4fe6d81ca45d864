"""Swin models; importing this registers the ``swinlite_*`` variants with timm."""

from ..layers.swin_block import SwinBlock
from . import variants
from .swin import SwinStage, SwinTransformer

__all__ = ["SwinBlock", "SwinStage", "SwinTransformer", "variants"]
