"""Swin models; importing this registers the ``swinlite_*`` variants with timm."""

from ..layers.swin_block import SwinBlock
from . import variants
from .seq_encoder import RelPosSeqEncoder
from .swin import SwinStage, SwinTransformer

__all__ = ["RelPosSeqEncoder", "SwinBlock", "SwinStage", "SwinTransformer", "variants"]
