"""Object detection as a task of the run engine: COCO data, a torchvision detector on a Swin FPN, the detector's
own losses, COCO box (and mask) mAP; ``val_map`` picks the best weights."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from pycocotools.coco import COCO
from torch import nn
from torch.utils.data import DataLoader

from ..engine.distributed import DistInfo, SharedError, all_gather_object, broadcast_object
from ..engine.loop import SINGLE, StepSettings, autocast
from ..engine.preflight import check_demo_paths, warn_unused
from ..engine.rank_warnings import SharedWarnings
from ..engine.task import RunContext, StepOutput, Task
from ..engine.val_content import Sample
from ..images import LeftOut
from ..io import file_sha256
from .config import DetConfig
from .data import (
    Categories,
    CocoDetection,
    CocoSplit,
    categories_of,
    check_categories,
    check_data_root,
    check_own_annotations,
    check_split_paths,
    check_splits_apart,
    collate,
    load_split,
    split_paths,
    without_thin_images,
)
from .demo_data import build_digit_scenes
from .evaluation import (
    EVALUATION_FILES,
    check_scorable,
    check_scored,
    coco_ap,
    scoring_ground_truth,
    to_coco_results,
)
from .models import SWIN_SET_BY, TWO_STAGE, build_detector, min_level
from .transforms import build_eval_transform, build_train_transform, size_step_problem, smallest_train_resize


def loss_column(name: str) -> str:
    """torchvision's loss names as metrics columns: ``loss_classifier`` stays, RetinaNet's ``classification``
    becomes ``loss_classification``."""
    return name if name.startswith("loss_") else f"loss_{name}"


@torch.no_grad()
def predict(
    model: nn.Module, loader: DataLoader, categories: Categories, settings: StepSettings, dist: DistInfo = SINGLE
) -> tuple[list[dict[str, object]], list[LeftOut]]:
    """(COCO result dicts, the images left out) for the images of ``loader`` (each process its shard; all
    processes' on return). Batches are (images, targets, left out) (``data.collate``: the records of the images an
    evaluation ``CocoDetection`` could not read)."""
    model.eval()
    results, left_out = [], []
    for batch_images, targets, left in loader:
        left_out += left
        if not batch_images:
            continue
        images = [im.to(settings.device, non_blocking=True) for im in batch_images]
        with autocast(settings):
            outputs = model(images)
        for output, target in zip(outputs, targets, strict=True):
            results += to_coco_results(output, target["image_id"], categories)
    parts = all_gather_object((results, left_out), dist)
    return [r for part, _ in parts for r in part], [item for _, items in parts for item in items]


def scored_ids(split: CocoSplit, left_out: list[LeftOut]) -> list[int]:
    """The image ids of ``split`` an evaluation over its ``CocoDetection`` scored: all but those left out."""
    gone = {split.image_ids[item.index] for item in left_out}
    return [i for i in split.image_ids if i not in gone]


def unread_settings(detector: str) -> dict[str, str]:
    """The ``model`` settings ``detector`` does not read (:func:`~swinlite.detection.models.build_detector`), each
    with why: the R-CNN heads' and samplers' without region proposals, the anchors' scale where FCOS sizes its anchors
    by each level's stride alone."""
    unread: dict[str, str] = {}
    if detector not in TWO_STAGE:
        why = f"model.detector={detector} does not read it, only model.detector={' or '.join(TWO_STAGE)}"
        unread |= dict.fromkeys(("box_head_dim", "rpn_batch_size_per_image", "box_batch_size_per_image"), why)
    if detector == "fcos":
        unread["anchor_scale"] = "model.detector=fcos sizes its anchors by each level's stride alone"
    return unread


class DetectionTask(Task):
    name = "detection"
    config = DetConfig
    metric = "val_map"
    drop_last = False
    reserved_kwargs = Task.reserved_kwargs | {
        "num_classes": "the task (the detector's classes are the training annotations' categories)",
        **SWIN_SET_BY,
    }
    evaluation_files = EVALUATION_FILES

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.val_split: CocoSplit | None = None
        self.val_truth: COCO | None = None  # what evaluation scores against (scoring_ground_truth)
        self.categories: Categories | None = None

    @classmethod
    def check_config(cls, cfg: DetConfig) -> None:
        model = cfg.model
        if model.detector == "fcos" and (model.fpn_channels % 32 or model.fpn_channels < 64):
            raise ValueError(  # torchvision's FCOS head: GroupNorm(32, C), which refuses one value per group
                f"model.fpn_channels must be a multiple of 32 and at least 64 for fcos (its head's GroupNorm has 32 "
                f"groups: with 32 channels a 1x1 map of the coarsest level fails), got {model.fpn_channels}"
            )
        if not model.name.startswith("swinlite_"):
            raise ValueError(f"model.name must be a swinlite model (swinlite_*) for detection, got {model.name!r}")
        if model.min_level is not None and model.min_level > 3:
            raise ValueError(f"model.min_level must be a Swin level, 0..3, got {model.min_level}")
        if not cfg.data.lsj and (problem := size_step_problem(cfg.data)) is not None:  # lsj draws no train_sizes
            raise ValueError(problem)
        warn_unused(model, "model", unread_settings(model.detector))
        check_demo_paths(
            cfg.data, "digits", ("train_ann", "train_images", "val_ann", "val_images"), "data.dataset=coco"
        )

    @classmethod
    def check_inputs(cls, cfg: DetConfig) -> None:
        if cfg.data.dataset == "coco":  # the digits demo is written on first use
            for split in ("train", "val"):
                check_data_root(cfg.data, split)
                check_split_paths(*split_paths(cfg.data, split))

    @classmethod
    def inputs(cls, cfg: DetConfig) -> list[Path]:
        return [*split_paths(cfg.data, "train"), *split_paths(cfg.data, "val")]

    def _load_splits(self) -> tuple[CocoSplit, CocoSplit, Categories]:
        """Rank 0 builds the demo data if asked; every rank then reads and checks both annotation files, and that
        the splits share no image (a refusal each rank meets alike: the engine's ``refused_alike`` says it once)."""
        cfg, dist = self.cfg, self.ctx.dist
        problem: str | None = None
        if cfg.data.dataset == "digits" and dist.is_main:
            try:
                build_digit_scenes(cfg.data.data_dir)
            except ValueError as e:
                problem = str(e)
        problem = broadcast_object(problem, dist)  # the others wait for the demo here
        if problem is not None:  # rank 0's problem, every process raises it: said once
            raise SharedError(problem)
        train_paths, val_paths = split_paths(cfg.data, "train"), split_paths(cfg.data, "val")
        check_own_annotations(train_paths[0], val_paths[0])
        masks = cfg.model.detector == "maskrcnn"  # Mask R-CNN trains on no object without a valid mask ...
        train_split = load_split(*train_paths, verify=cfg.data.verify_images, masks=masks)
        # ... but its box AP scores every object of the file, as pycocotools does (mask AP ignores those: coco_ap)
        val_split = load_split(*val_paths, verify=cfg.data.verify_images)
        # images too thin for the train transform's smallest resize, or for the detector's in evaluation, left out
        train_split = without_thin_images(train_split, *smallest_train_resize(cfg.data))
        val_split = without_thin_images(val_split, cfg.data.test_size, cfg.data.max_size)
        check_splits_apart(train_split, val_split)
        categories = categories_of(train_split)
        check_categories(categories, val_split)  # names both files, and the val ids with their names
        return train_split, val_split, categories

    def build_datasets(self) -> tuple[CocoDetection, CocoDetection]:
        cfg = self.cfg  # every process reads the files; the engine shows their warnings once (SharedWarnings)
        train_split, self.val_split, self.categories = self._load_splits()
        masks = cfg.model.detector == "maskrcnn"
        train_ds = CocoDetection(train_split, self.categories, build_train_transform(cfg.data), masks=masks)
        val_ds = CocoDetection(self.val_split, self.categories, build_eval_transform(), evaluation=True)
        if not any(train_ds.objects):
            raise ValueError(f"the training annotations ({split_paths(cfg.data, 'train')[0]}) hold no usable object")
        check_scorable(val_ds, "val")
        self.val_truth = scoring_ground_truth(val_ds)
        self.ctx.log(f"data: {len(train_ds)} train / {len(self.val_split.image_ids)} val images, "
                     f"{len(self.categories.ids)} classes: {', '.join(self.categories.names)}")  # fmt: skip
        return train_ds, val_ds

    def val_samples(self, val: CocoDetection) -> list[Sample]:
        """Each val image with the annotation file's content (an object relabelled or moved keeps the file's size)."""
        annotations = file_sha256(val.split.ann_file)
        return [(val.split.image_path(i), annotations) for i in val.split.image_ids]

    def collate(self, batch: list[Any]) -> Any:
        return collate(batch)

    @classmethod
    def model_for(cls, cfg: DetConfig, classes: list[str]) -> nn.Module:
        data = cfg.data
        return build_detector(cfg.model, len(classes), data.test_size, data.max_size, data.mean, data.std, classes)

    def build_model(self) -> nn.Module:
        return self.model_for(self.cfg, self.categories.names)

    def train_step(self, model: nn.Module, batch: tuple[list, list]) -> StepOutput:
        device = self.ctx.device
        images = [im.to(device, non_blocking=True) for im in batch[0]]
        targets = [{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in t.items()} for t in batch[1]]
        losses = model(images, targets)
        parts = {loss_column(k): v.detach() for k, v in sorted(losses.items())}
        return StepOutput(sum(losses.values()), len(images), parts)

    def evaluate(self, model: nn.Module, loader: DataLoader) -> dict[str, float]:
        """COCO AP of ``model`` on the val split (``val_map``, ..., plus ``val_mask_*`` for masks)."""
        results, left_out = predict(model, loader, self.categories, self.ctx.settings, self.ctx.dist)
        coco, ids = self.val_truth, scored_ids(self.val_split, left_out)
        check_scored(coco, ids, left_out, "val")  # nothing scored: stop (resumable), not a NaN epoch that picks no best
        with SharedWarnings(self.ctx.dist) as shared:  # every process scores all processes' results alike
            row = {f"val_{k}": v for k, v in coco_ap(coco, results, ids).ap.items()}
            if self.cfg.model.detector == "maskrcnn":
                row |= {f"val_mask_{k}": v for k, v in coco_ap(coco, results, ids, "segm").ap.items()}
        shared.settle()
        return row

    def summary(self, row: dict[str, float]) -> str:
        text = f"val AP {row['val_map']:.2f}, AP50 {row['val_map50']:.2f}, AP75 {row['val_map75']:.2f}"
        text += f", mask AP {row['val_mask_map']:.2f}" if "val_mask_map" in row else ""
        return text + (f", EMA AP {row['val_map_ema']:.2f}" if "val_map_ema" in row else "")

    def curves(self, row: dict[str, float]) -> dict[str, str]:
        names = {"val_map": "AP", "val_map50": "AP50", "val_map75": "AP75", "val_mask_map": "mask AP",
                 "val_map_ema": "EMA AP"}  # fmt: skip
        return {key: f"{label} (%)" for key, label in names.items() if key in row}

    def weights_metadata(self) -> dict[str, Any]:
        """What ``detect.py`` and ``evaluate_detection.py`` need to rebuild the detector from a weights file; its
        ``min_level`` resolved (the same detector), for the library to read which Swin levels the FPN reads
        (:func:`swinlite.export.read_levels`: the others' per-level norms were never trained)."""
        resolved = {"pretrained": False, "grad_checkpointing": False, "min_level": min_level(self.cfg.model)}
        model = dataclasses.asdict(self.cfg.model) | resolved
        data = {k: getattr(self.cfg.data, k) for k in ("test_size", "max_size", "mean", "std")}
        return {"detector": model, "data": data, "classes": self.categories.names, "category_ids": self.categories.ids}

    def state(self) -> dict[str, Any]:
        return {"category_ids": self.categories.ids, "classes": self.categories.names}

    def check_resumed(self, state: dict[str, Any], path: Path) -> None:
        """The categories, ids and names, must be the run's (a resume file of a version that kept only the ids:
        those)."""
        ids, names = state.get("category_ids"), state.get("classes")
        now = self.categories
        if ids != now.ids or (names is not None and names != now.names):
            then = _listed(ids, names) if isinstance(ids, list) and isinstance(names, list) else str(ids)
            raise ValueError(
                f"{path}: the run trained on categories (id name) {then}, the annotations now have "
                f"{_listed(now.ids, now.names)}; restore them, or start over with --overwrite"
            )


def _listed(ids: list[int], names: list[str], limit: int = 300) -> str:
    """Categories as "3 'square', 7 'bar'", cut at ``limit`` characters."""
    text = ", ".join(f"{i} {n!r}" for i, n in zip(ids, names, strict=False))
    return text if len(text) <= limit else text[:limit] + "..."
