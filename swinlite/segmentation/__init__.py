"""Semantic segmentation on a Swin backbone: the label-map task the run engine trains.

``config`` · ``classes`` (ADE20K's names and colours) · ``data`` (image and mask folders, checked once) ·
``transforms`` (mmsegmentation's ADE20K pipeline with ``torchvision.transforms.v2``) · ``models`` (UperNet with an
auxiliary FCN head) · ``inference`` (whole, sliding-window, multi-scale and flip prediction) · ``evaluation``
(mIoU, mAcc, aAcc) · ``convert`` (mmsegmentation and Hugging Face UperNet checkpoints) · ``predictor`` (rebuild a
model from its checkpoint, draw label maps) · ``demo_data`` · ``task`` (the engine's task).
"""

from .config import SegModelConfig
from .models import SegOutput, UperNet, build_upernet

__all__ = ["SegModelConfig", "SegOutput", "UperNet", "build_upernet"]
