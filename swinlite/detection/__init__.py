"""Object detection on a Swin backbone.

``backbone`` (the FPN backbone, importable without extras) · ``config`` · ``data`` (COCO via pycocotools, the
``detection`` extra) · ``transforms`` · ``models`` (torchvision detectors, anchors per stride) · ``optim`` ·
``engine`` · ``evaluation`` (COCO mAP) · ``metrics`` · ``runner`` (a whole run) · ``predictor`` · ``demo_data``.
"""

from .backbone import SwinFPNBackbone, build_fpn_backbone

__all__ = ["SwinFPNBackbone", "build_fpn_backbone"]
