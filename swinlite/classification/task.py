"""Image classification as a task of the run engine: ImageFolder data, a timm classifier, cross-entropy (with
mixup / label smoothing), top-1 / top-k evaluation; ``val_top1`` picks the best weights."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from timm.data import Mixup
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
from torch import nn

from ..convert import other_classes
from ..engine.distributed import SharedError, broadcast_object
from ..engine.model import create_model, meta_model, pretrained_file
from ..engine.preflight import inherited_setting, warn_unused
from ..engine.task import RunContext, StepOutput, Task
from ..engine.val_content import Sample
from ..files import TASK_FILES
from ..metadata import read_info, weights_metadata
from .config import Config, DataConfig
from .data import ImageFolderDataset, Split, build_datasets, check_augment, check_data_dir, collate, normalisation_note
from .demo_data import build_digits, check_digits
from .evaluation import EVALUATION_FILES, evaluate
from .scan_cache import cached_scan


def _unused_augment(data: DataConfig) -> dict[str, str]:
    """The augmentation settings timm's training transform leaves out, each with why: the fill of a random erasing
    that never runs, the colour jitter that an auto-augment policy replaces (with its colour ops: not a 3-Augment
    policy, whose name holds ``3a``, which keeps it)."""
    unused = {"re_mode": "data.re_prob=0 (no random erasing)"} if data.re_prob == 0 else {}
    if data.color_jitter and data.auto_augment and "3a" not in data.auto_augment:  # 0: no jitter either way
        unused["color_jitter"] = f"data.auto_augment={data.auto_augment} leaves it out (its colour ops take its place)"
    return unused


class ClassificationTask(Task):
    name = "classification"
    config = Config
    metric = "val_top1"
    reserved_kwargs = Task.reserved_kwargs | {
        "num_classes": "the task (one output per class folder of the training split)"
    }
    output_files = TASK_FILES["classification"]  # its data scan's cache
    evaluation_files = EVALUATION_FILES

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.classes: list[str] = []
        self.mixup: Mixup | None = None  # built once the classes are known
        self.loss_fn = _loss(_mixes(self.cfg), self.cfg.train.label_smoothing)

    @classmethod
    def check_config(cls, cfg: Config) -> None:
        if _mixes(cfg) and cfg.data.batch_size % 2:
            raise ValueError(f"mixup/cutmix need an even data.batch_size, got {cfg.data.batch_size}")
        check_augment(cfg.data, inherited_setting(cfg, "interpolation") if cfg.data.auto_augment else None)
        warn_unused(cfg.data, "data", _unused_augment(cfg.data))
        check_input_size(cfg)

    @classmethod
    def check_inputs(cls, cfg: Config) -> None:
        check_data_dir(Path(cfg.data.data_dir), demo=cfg.data.dataset == "digits")  # the demo is written on first use
        if cfg.data.dataset == "digits":  # unless a build of another size is there
            check_digits(cfg.data.data_dir, size=cfg.data.img_size)

    @classmethod
    def inputs(cls, cfg: Config) -> list[Path]:
        return [Path(cfg.data.data_dir) / "train", Path(cfg.data.data_dir) / "val"]

    def build_datasets(self) -> tuple[Any, Any]:
        """Rank 0 builds the demo data if asked and scans the folders once (or reads the scan it cached in the
        output folder); the other ranks get its result."""
        ctx, cfg = self.ctx, self.cfg
        found: tuple[Split, Split] | str | None = None
        if ctx.dist.is_main:
            try:
                if cfg.data.dataset == "digits":
                    build_digits(cfg.data.data_dir, size=cfg.data.img_size)
                found, _, note = cached_scan(cfg.data, ctx.out)
                if note:
                    ctx.log(f"data: {note}")
                for warning in class_warnings(found[0]):
                    ctx.log(f"warning: {warning}")
            except ValueError as e:
                found = str(e)
        found = broadcast_object(found, ctx.dist)
        if isinstance(found, str):  # rank 0's problem, every process raises it: said once
            raise SharedError(found)
        train_ds, val_ds, self.classes, skipped = build_datasets(cfg.data, found)
        if _mixes(cfg):
            self.mixup = Mixup(mixup_alpha=cfg.data.mixup, cutmix_alpha=cfg.data.cutmix,
                               label_smoothing=cfg.train.label_smoothing, num_classes=len(self.classes))  # fmt: skip
        ctx.log(
            f"data: {len(train_ds)} train / {len(val_ds)} val images, {len(self.classes)} classes, {skipped} skipped"
        )
        return train_ds, val_ds

    def val_samples(self, val: ImageFolderDataset) -> list[Sample]:
        return [(Path(path), self.classes[label]) for path, label in val.samples]

    @classmethod
    def model_for(cls, cfg: Config, classes: list[str]) -> nn.Module:
        return create_model(cfg.model, num_classes=len(classes))

    def build_model(self) -> nn.Module:
        _warn_other_classes(pretrained_file(self.cfg.model), self.classes)
        return self.model_for(self.cfg, self.classes)

    def collate(self, batch: list[Any]) -> Any:
        return collate(batch)

    def train_step(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> StepOutput:
        settings = self.ctx.settings
        images = batch[0].to(settings.device, non_blocking=True)
        targets = batch[1].to(settings.device, non_blocking=True)
        if settings.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        if self.mixup is not None:
            images, targets = self.mixup(images, targets)
        logits = model(images).float()  # CPU autocast leaves timm's smoothed / soft-target CE's log_softmax in bf16
        return StepOutput(self.loss_fn(logits, targets), len(images))

    def evaluate(self, model: nn.Module, loader: torch.utils.data.DataLoader) -> dict[str, float]:
        result = evaluate(model, loader, len(self.classes), self.ctx.settings, self.ctx.dist)
        row = {"val_loss": result.loss, "val_top1": result.top1}
        return row | ({f"val_top{result.k}": result.topk} if result.k > 1 else {})

    def summary(self, row: dict[str, float]) -> str:
        k = _topk(row)
        text = f"val loss {row['val_loss']:.4f}, top-1 {row['val_top1']:.2f}%"
        text += f", top-{k} {row[f'val_top{k}']:.2f}%" if k else ""
        return text + (f", EMA top-1 {row['val_top1_ema']:.2f}%" if "val_top1_ema" in row else "")

    def curves(self, row: dict[str, float]) -> dict[str, str]:
        k = _topk(row)
        curves = {"val_top1": "val top-1 (%)"} | ({f"val_top{k}": f"val top-{k} (%)"} if k else {})
        return curves | ({"val_top1_ema": "EMA val top-1 (%)"} if "val_top1_ema" in row else {})

    def weights_metadata(self) -> dict[str, Any]:
        """Model, constructor arguments, classes and the eval transform (schema: ``swinlite.weights``)."""
        data = self.cfg.data
        preprocessing = {
            "input_size": [3, data.img_size, data.img_size],
            "interpolation": data.interpolation,
            "mean": list(data.mean),
            "std": list(data.std),
            "crop_pct": data.crop_pct,
            "crop_mode": "center",  # build_transforms' eval transform
        }
        model_args = {**self.cfg.model.kwargs, "num_classes": len(self.classes)}
        return weights_metadata(self.cfg.model.name, model_args, self.classes, preprocessing)

    def state(self) -> dict[str, Any]:
        return {"classes": self.classes}

    def check_resumed(self, state: dict[str, Any], path: Path) -> None:
        saved = state.get("classes", [])
        if saved != self.classes:
            gone, new = sorted(set(saved) - set(self.classes)), sorted(set(self.classes) - set(saved))
            changes = "; ".join(part for part in (
                f"class folders gone: {', '.join(map(repr, gone))}" if gone else "",  # quoted: a name may hold ", "
                f"new class folders: {', '.join(map(repr, new))}" if new else "",
            ) if part) or "the classes are in another order"  # fmt: skip
            note = normalisation_note(new, gone, "the run")  # two names that look the same
            raise ValueError(f"{path}: the run trained on other classes than {self.cfg.data.data_dir} now has "
                             f"({changes}){note}; restore them, or start over with --overwrite")  # fmt: skip


def check_input_size(cfg: Config) -> None:
    """ValueError, before any data is read, when the model does not take ``data.img_size`` images: one forward of a
    single image through the model built on the meta device (no memory, no weights; a tenth of a second for Swin-B).
    timm's fixed-size models (ViT, timm's own Swin: built for 224) asserted on the first batch, after the data scan;
    a swinlite model refuses images smaller than a patch. A failure of the meta device itself is left to the run."""
    name, size = cfg.model.name, cfg.data.img_size
    model = meta_model(name, cfg.model.kwargs).eval()
    try:
        with torch.no_grad():
            model(torch.empty(1, 3, size, size, device="meta"))
    except (AssertionError, ValueError, RuntimeError) as e:
        if "meta" in str(e).lower():  # an op without a meta kernel, or one that reads values
            return
        embed = getattr(model, "patch_embed", None)
        if getattr(embed, "strict_img_size", False):  # timm's PatchEmbed of a fixed-size model: its size
            hint = f"model.kwargs.img_size={size} builds it for that size, or data.img_size={embed.img_size[0]}"
        else:
            hint = "choose another data.img_size"
        reason = str(e).strip().rstrip(".") or type(e).__name__
        raise ValueError(f"model {name} does not take data.img_size={size} images ({reason}); {hint}") from None


def _topk(row: dict[str, float]) -> int | None:
    """The k of the row's ``val_top{k}`` column (k > 1), or None."""
    return next((int(key[7:]) for key in row if key.startswith("val_top") and key[7:].isdigit() and key[7:] != "1"),
                None)  # fmt: skip


def _mixes(cfg: Config) -> bool:
    return cfg.data.mixup > 0 or cfg.data.cutmix > 0


def _loss(mixup: bool, label_smoothing: float) -> nn.Module:
    """Soft-target CE after mixup (which smooths labels itself), else label-smoothing or plain CE."""
    if mixup:
        return SoftTargetCrossEntropy()
    if label_smoothing > 0:
        return LabelSmoothingCrossEntropy(smoothing=label_smoothing)
    return nn.CrossEntropyLoss()


def class_warnings(split: Split) -> list[str]:
    """Warnings about the training split's classes: a single class, or over 10x imbalance."""
    if len(split.classes) == 1:
        return [
            f"the training split has 1 class ({split.classes[0]}): every prediction will be that class, so "
            "val top-1 is 100% whatever the model learns; add a folder per class"
        ]
    counts = Counter(label for _, label in split.samples)
    (most, high), (least, low) = counts.most_common()[0], counts.most_common()[-1]
    if high > 10 * low:
        return [
            f"class imbalance over 10x: '{split.classes[most]}' has {high} training images, "
            f"'{split.classes[least]}' {low} ({high / low:.1f}x); top-1 favours the large classes, "
            "look at the per-class accuracy (scripts/evaluate.py)"
        ]
    return []


def _warn_other_classes(path: str | None, classes: list[str]) -> None:
    """A warning when ``model.pretrained`` is a classifier's file that records as many classes as the data has, but
    other ones (or in another order): timm loads a classifier of the model's size, so row i of the file's starts
    this run's class i without a word (the evaluate and predict scripts refuse such a mismatch)."""
    try:
        info = read_info(path) if path is not None else None
    except ValueError:  # another task's file, or unreadable: the loader says what it makes of it
        return
    renamed = other_classes(list(info.classes), classes) if info is not None else None
    if renamed:
        warnings.warn(
            f"model.pretrained {path}: its classifier was trained on other classes {renamed}; it is kept, row i now "
            "class i of the data",
            stacklevel=2,
        )
