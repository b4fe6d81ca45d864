"""Semantic segmentation as a task of the run engine: label-map data (ADE20K's layout), UperNet on a swinlite
backbone, per-pixel cross-entropy (+ the auxiliary head's), mIoU over the val split; ``val_miou`` picks the best
weights."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from ..device import resolve_device
from ..engine.distributed import DistInfo, SharedError, broadcast_object, launched
from ..engine.preflight import check_demo_paths, warn_unused
from ..engine.task import RunContext, StepOutput, Task
from ..engine.val_content import Sample
from ..seg_views import stride_problem, stride_unused
from ..wording import counted
from .config import SegConfig, SegDataConfig
from .data import (
    Labels,
    SegmentationDataset,
    Split,
    check_data_root,
    check_labelled,
    check_not_too_large,
    check_split_folders,
    collate,
    labels_of,
    scan_split,
    split_folders,
    warn_mostly_ignored,
    warn_skipped,
    warn_unlearned,
    warn_unmeasured,
    without_thin_pairs,
)
from .demo_data import build_shape_scenes
from .evaluation import EVALUATION_FILES, per_class_table, scores
from .inference import InferenceSettings, check_counted, confusion_of, large_check, thin_check
from .models import EVERY_LEVEL, LEVEL_KWARGS, build_upernet
from .transforms import build_eval_transform, build_train_transform


def seg_loss(logits: torch.Tensor, target: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """Per-pixel cross-entropy averaged over all pixels, ignored ones counting zero: mmsegmentation's default
    (``avg_non_ignore=False``), the loss its published results trained with; a crop of ignored pixels only gives 0.

    Args:
        logits: [B, K, H, W].
        target: [B, H, W] labels in 0..K-1 or ``ignore_index``.
    """
    return F.cross_entropy(logits.float(), target, ignore_index=ignore_index, reduction="sum") / target.numel()


def _warn_if_every_crop_is_padded(data: SegDataConfig) -> None:
    """Warn when no training image, rescaled (:class:`~swinlite.segmentation.transforms.RandomRescale`: at most
    data.img_scale x the top ratio, long and short side), covers data.crop_size: then every crop is partly padding,
    which the loss ignores and the step computes all the same."""
    ratio = data.ratio_range[1]
    long_side, short_side = (int(side * ratio) for side in sorted(data.img_scale, reverse=True))
    crop = sorted(data.crop_size, reverse=True)
    if crop[0] > long_side or crop[1] > short_side:
        warnings.warn(
            f"data.crop_size {list(data.crop_size)} is larger than every rescaled training image (at most "
            f"{long_side}x{short_side}, long x short side: data.img_scale {list(data.img_scale)} x {ratio}, the top "
            "of data.ratio_range): every crop is partly padding, which the loss ignores; lower data.crop_size or "
            "raise data.img_scale",
            stacklevel=3,
        )


def syncs_batchnorm(dist: DistInfo, device: torch.device) -> bool:
    """Whether the heads' BatchNorm becomes SyncBatchNorm, normalising over every process's images: under torchrun on
    CUDA. torch's SyncBatchNorm does not run on the CPU, so there (gloo) each process normalises its own batch, which
    needs 2 images at least, as a single process's does."""
    return dist.enabled and device.type == "cuda"


class SegmentationTask(Task):
    name = "segmentation"
    config = SegConfig
    metric = "val_miou"
    reserved_kwargs = Task.reserved_kwargs | {
        "num_classes": "the task (UperNet's classes are the data's)",
        **dict.fromkeys(LEVEL_KWARGS, f"the task ({EVERY_LEVEL}: models.build_upernet)"),
    }
    evaluation_files = EVALUATION_FILES

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.labels: Labels = labels_of(self.cfg.data)
        self.test = InferenceSettings.of(self.cfg.data)
        self.val_ds: SegmentationDataset | None = None
        self._model: nn.Module | None = None  # built by build_datasets (before its scan), handed over by build_model

    @classmethod
    def check_config(cls, cfg: SegConfig) -> None:
        if not cfg.model.name.startswith("swinlite_"):
            raise ValueError(
                f"model.name must be a swinlite model (swinlite_*) for segmentation, got {cfg.model.name!r}"
            )
        _warn_if_every_crop_is_padded(cfg.data)
        if cfg.model.aux_weight == 0:  # models.build_upernet builds no auxiliary head
            warn_unused(cfg.model, "model", {"aux_channels": "model.aux_weight=0 (no auxiliary head)"})
        stride = cfg.data.test_stride  # None: 2/3 of the crop, which always fits
        unused = stride_unused(stride, cfg.data.test_mode, None, "data.test_stride", "set data.test_mode=slide")
        if unused:  # ignored, while config.yaml and the checkpoint's preprocessing recorded it
            raise ValueError(unused)
        problem = stride and stride_problem(cfg.data.crop_size, stride, "data.crop_size", "data.test_stride")
        if problem:
            raise ValueError(f"{problem} (unset: 2/3 of data.crop_size)")
        if not cfg.data.test_ratios:
            raise ValueError("data.test_ratios needs at least one ratio, e.g. [1.0]")
        launch = launched()  # this process's place and device, as run() resolved them before these checks
        device = resolve_device(cfg.train.device, launch.local_rank, option="train.device")
        if cfg.data.batch_size < 2 and not syncs_batchnorm(launch, device):
            raise ValueError(
                "data.batch_size=1: the heads' BatchNorm needs at least 2 images per step and process (under torchrun "
                "on GPUs SyncBatchNorm pools every process's; not on the CPU)"
            )
        if cfg.train.deterministic and device.type == "cuda":  # else torch raises at the first step
            raise ValueError(
                f"train.deterministic=true on {device}: torch has no deterministic CUDA kernel for the per-pixel "
                "cross-entropy (nll_loss2d, summed) nor for the backward of UperNet's adaptive average pooling "
                "(adaptive_avg_pool2d_backward_cuda) and bilinear upsampling (upsample_bilinear2d_backward_out_cuda); "
                "set train.deterministic=false on CUDA, or train deterministically on the CPU (train.device=cpu)"
            )
        folders = ("train_images", "train_masks", "val_images", "val_masks")
        check_demo_paths(cfg.data, "shapes", folders, "data.dataset=folder with data.classes (or ade20k)")
        labels_of(cfg.data)

    @classmethod
    def check_inputs(cls, cfg: SegConfig) -> None:
        if cfg.data.dataset != "shapes":  # the demo is written on first use
            for split in ("train", "val"):
                check_data_root(cfg.data, split)
                check_split_folders(*split_folders(cfg.data, split))

    @classmethod
    def inputs(cls, cfg: SegConfig) -> list[Path]:
        return [*split_folders(cfg.data, "train"), *split_folders(cfg.data, "val")]

    def _scan(self) -> tuple[Split, Split]:
        """Rank 0 builds the demo data if asked and checks both splits; the other ranks get its result."""
        ctx, cfg = self.ctx, self.cfg
        found: tuple[Split, Split] | str | None = None
        if ctx.dist.is_main:
            try:
                if cfg.data.dataset == "shapes":
                    build_shape_scenes(cfg.data.data_dir)
                workers, splits = max(cfg.data.num_workers, 1), []
                for split, other in (("train", "val"), ("val", "train")):
                    images, masks = split_folders(cfg.data, split)
                    apart = split_folders(cfg.data, other)  # a link into the other split: val images trained on
                    ctx.log(f"data: reading every mask of {masks} once ({counted(workers, 'thread')})")
                    splits.append(scan_split(images, masks, self.labels, cfg.data.verify_images, workers, apart))
                found = tuple(splits)
            except ValueError as e:
                found = str(e)
        found = broadcast_object(found, ctx.dist)
        if isinstance(found, str):  # rank 0's problem, every process raises it: said once
            raise SharedError(found)
        return found

    def build_datasets(self) -> tuple[SegmentationDataset, SegmentationDataset]:
        data = self.cfg.data
        # built before the scan (the classes are the settings'): the val split's thin check below needs its patch
        self._model = self.model_for(self.cfg, list(self.labels.classes))
        train, val = self._scan()
        for split, name in ((train, "train"), (val, "val")):
            warn_skipped(f"{name} images", split.skipped)  # rank 0's scan: the engine shows it once (SharedWarnings)
            check_labelled(split, name, split_folders(data, name)[1], self.labels)
            warn_mostly_ignored(split, name, split_folders(data, name)[1], self.labels)
        warn_unlearned(train, split_folders(data, "train")[1], self.labels)
        # the val images the test settings cannot predict (a view thinner than the backbone's patch) are left out
        # now, named once, before the loaders fix the split
        too_thin = thin_check(self._model, self.test)
        val_images, val_masks = split_folders(data, "val")
        val = without_thin_pairs(val, too_thin, val_images, "raise data.test_ratios or data.img_scale")
        check_not_too_large(val, large_check(self._model, self.test, "data.test_ratios"))  # memory: an error, first
        check_labelled(val, "val", val_masks, self.labels)  # those left hold a class still
        warn_unmeasured(val, "val", val_masks, self.labels)  # of the pairs scored
        classes = self.labels.classes
        shown = f": {', '.join(classes)}" if len(classes) <= 20 else ""
        self.ctx.log(f"data: {len(train.pairs)} train / {len(val.pairs)} val images, {len(classes)} classes{shown}")
        train_ds = SegmentationDataset(train.pairs, self.labels, build_train_transform(data, self.labels.ignore_index))
        val_transform = build_eval_transform(data.mean, data.std)
        self.val_ds = SegmentationDataset(
            val.pairs, self.labels, val_transform, evaluation=True, too_thin=too_thin
        )  # an image replaced since the scan: left out as read
        return train_ds, self.val_ds

    def val_samples(self, val: SegmentationDataset) -> list[Sample]:
        return [(pair.image, pair.mask) for pair in val.pairs]

    def collate(self, batch: list[Any]) -> Any:
        return collate(batch)

    @classmethod
    def model_for(cls, cfg: SegConfig, classes: list[str]) -> nn.Module:
        return build_upernet(cfg.model, len(classes), classes)

    def build_model(self) -> nn.Module:
        model, self._model = self._model, None  # built with the datasets (before the scan; the val split's thin check)
        if syncs_batchnorm(self.ctx.dist, self.ctx.device):
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        return model

    def train_step(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> StepOutput:
        settings, ignore = self.ctx.settings, self.labels.ignore_index
        images = batch[0].to(settings.device, non_blocking=True)
        masks = batch[1].to(settings.device, non_blocking=True)
        if settings.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        out = model(images)
        loss = decode = seg_loss(out.logits, masks, ignore)
        parts = {"loss_decode": decode.detach()}
        if out.aux_logits is not None:
            aux = seg_loss(out.aux_logits, masks, ignore)
            loss = decode + self.cfg.model.aux_weight * aux
            parts["loss_aux"] = aux.detach()
        return StepOutput(loss, len(images), parts)

    def evaluate(self, model: nn.Module, loader: DataLoader) -> dict[str, float]:
        """mIoU, mAcc and aAcc (%) of ``model`` over the val split, as the test settings predict; the per-class IoU
        and accuracy go to the log as a table (``scripts/evaluate_segmentation.py`` also writes them as a CSV)."""
        counts, images, left_out = confusion_of(model, loader, self.test, len(self.labels.classes),
                                                self.labels.ignore_index, self.ctx.settings, self.ctx.dist)  # fmt: skip
        check_counted(counts, images, left_out, "val")  # no pixel scored: stop (resumable), not a NaN epoch
        result = scores(counts)
        self.ctx.log(f"val per class (%):\n{per_class_table(result, self.labels.classes)}")
        return {"val_miou": result.miou, "val_macc": result.macc, "val_aacc": result.aacc}

    def summary(self, row: dict[str, float]) -> str:
        text = f"val mIoU {row['val_miou']:.2f}, mAcc {row['val_macc']:.2f}, aAcc {row['val_aacc']:.2f}"
        return text + (f", EMA mIoU {row['val_miou_ema']:.2f}" if "val_miou_ema" in row else "")

    def curves(self, row: dict[str, float]) -> dict[str, str]:
        names = {"val_miou": "mIoU", "val_macc": "mAcc", "val_aacc": "aAcc", "val_miou_ema": "EMA mIoU"}
        return {key: f"{label} (%)" for key, label in names.items() if key in row}

    def weights_metadata(self) -> dict[str, Any]:
        """What ``segment.py`` and ``evaluate_segmentation.py`` need (see ``swinlite.segmentation.predictor``)."""
        data, labels = self.cfg.data, self.labels
        model = dataclasses.asdict(self.cfg.model) | {"pretrained": False, "grad_checkpointing": False}
        preprocessing = {"mean": list(data.mean), "std": list(data.std), **self.test.to_dict()}
        return {"segmenter": model, "classes": list(labels.classes), "palette": [list(c) for c in labels.palette],
                "ignore_index": labels.ignore_index, "reduce_zero_label": labels.reduce_zero_label,
                "preprocessing": preprocessing}  # fmt: skip

    def state(self) -> dict[str, Any]:
        labels = self.labels
        return {"classes": list(labels.classes), "ignore_index": labels.ignore_index,
                "reduce_zero_label": labels.reduce_zero_label}  # fmt: skip

    def check_resumed(self, state: dict[str, Any], path: Path) -> None:
        """ValueError for other classes, or another reading of the masks' values (``data.ignore_index``,
        ``data.reduce_zero_label``): each changes what the trained classifier's outputs mean."""
        if state.get("classes") != list(self.labels.classes):
            raise ValueError(
                f"{path}: the run trained on classes {str(state.get('classes'))[:200]}, the settings now give "
                f"{str(list(self.labels.classes))[:200]}; restore them, or start over with --overwrite"
            )
        now = self.state()
        effects = {"ignore_index": "which changes the label value the loss and the scores leave out",
                   "reduce_zero_label": "which changes the class of every label value"}  # fmt: skip
        for key, effect in effects.items():  # absent from resume files older than this check
            if key in state and state[key] != now[key]:
                raise ValueError(
                    f"{path}: the run read its masks with data.{key}={state[key]}, the settings now give "
                    f"data.{key}={now[key]}, {effect}; restore it, or start over with --overwrite"
                )
