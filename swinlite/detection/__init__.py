"""Object detection on a Swin backbone: the COCO task the run engine trains.

``config`` · ``data`` (COCO via pycocotools, the ``detection`` extra) · ``transforms`` · ``models`` (torchvision
detectors, anchors per stride) · ``evaluation`` (COCO mAP) · ``task`` (the engine's task, ``predict``) ·
``predictor`` · ``demo_data``. The FPN backbone is library code, :mod:`swinlite.fpn` (re-exported here).
"""

from ..fpn import SwinFPNBackbone, build_fpn_backbone

__all__ = ["SwinFPNBackbone", "build_fpn_backbone"]
