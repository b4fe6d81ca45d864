"""Object detection on a Swin backbone: FPN backbone, COCO data, torchvision detectors, training and COCO mAP."""

from .backbone import SwinFPNBackbone, build_fpn_backbone

__all__ = ["SwinFPNBackbone", "build_fpn_backbone"]
