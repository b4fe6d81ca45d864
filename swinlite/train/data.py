"""ImageFolder data (``root/train/<class>/*``, ``root/val/<class>/*``) with timm's transforms.

Problems in the folders are found before training starts: a missing root or split, an empty class
folder, a val class train does not have are ValueErrors; unreadable images are skipped with a
warning that names them. Every image is converted to RGB (grayscale, RGBA, palette, CMYK, ...).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps
from timm.data import create_transform
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset
from torchvision.datasets.folder import IMG_EXTENSIONS

from .config import DataConfig


def load_rgb(path: str | Path) -> Image.Image:
    """Open an image as 8-bit RGB, upright, whatever its mode.

    The EXIF orientation is applied (photos from phones are stored sideways); 16-bit images (PNG
    ``I;16``, ``I``) are scaled from 0..65535 to 0..255 rather than clipped; transparent palette images
    go through RGBA first.
    """
    with Image.open(path) as img:
        img = ImageOps.exif_transpose(img)
        if img.mode.startswith("I;16") or img.mode == "I":
            pixels = np.asarray(img, dtype=np.float64)  # (H, W) in 0..65535
            img = Image.fromarray(np.clip(pixels / 257.0 + 0.5, 0, 255).astype(np.uint8))
        elif img.mode == "P" and "transparency" in img.info:
            img = img.convert("RGBA")
        return img.convert("RGB")


def _is_image_file(path: Path) -> bool:
    return path.suffix.lower() in IMG_EXTENSIONS  # upper-case extensions (.JPG, .PNG) count too


def _readable(path: Path) -> str | None:
    """None when PIL can decode ``path``, else the reason it cannot."""
    try:
        with Image.open(path) as img:
            img.load()
        return None
    except Exception as e:  # PIL raises many exception types for bad files
        return f"{type(e).__name__}: {e}"


@dataclass
class Split:
    """A scanned split: ``samples`` of (path, class index) and what was skipped, with reasons."""

    samples: list[tuple[str, int]]
    classes: list[str]
    skipped: list[tuple[str, str]]


def scan_split(split_dir: Path, classes: list[str] | None = None, verify: bool = True) -> Split:
    """List ``split_dir/<class>/**/<image>``; ValueError for anything that would fail training later.

    Args:
        split_dir: the split folder, e.g. ``root/train``.
        classes: the class list to index against (train's, for val); None: this split's own folders.
        verify: decode every image once and skip those that fail.
    """
    if not split_dir.is_dir():
        raise ValueError(f"missing split folder {split_dir}: expected {split_dir}/<class>/<image files>")
    folders = sorted(p.name for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise ValueError(f"{split_dir} holds no class folders: expected {split_dir}/<class>/<image files>")
    classes = folders if classes is None else classes
    unknown = sorted(set(folders) - set(classes))
    if unknown:
        raise ValueError(f"{split_dir} has classes the training split does not have: {', '.join(unknown)}")
    samples, skipped = [], []
    for name in folders:
        label, count = classes.index(name), len(samples)
        files = sorted(p for p in (split_dir / name).rglob("*") if p.is_file() and not p.name.startswith("."))
        for path in files:
            reason = "not an image file extension" if not _is_image_file(path) else None
            if reason is None and verify:
                reason = _readable(path)
            if reason is None:
                samples.append((str(path), label))
            else:
                skipped.append((str(path), reason))
        if len(samples) == count:
            raise ValueError(f"class folder {split_dir / name} has no readable images ({', '.join(IMG_EXTENSIONS)})")
    for path, reason in skipped:
        warnings.warn(f"skipping {path}: {reason}", stacklevel=2)
    return Split(samples, classes, skipped)


class ImageFolderDataset(Dataset):
    """(image tensor, class index) pairs; an image that fails to load is replaced by the next one, with a warning."""

    def __init__(self, samples: list[tuple[str, int]], transform: torch.nn.Module | None = None) -> None:
        self.samples = samples
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        for offset in range(len(self.samples)):
            path, label = self.samples[(index + offset) % len(self.samples)]
            try:
                img = load_rgb(path)
            except Exception as e:  # a file broken after the scan must not stop training mid-epoch
                warnings.warn(f"skipping unreadable image {path}: {e}", stacklevel=2)
                continue
            return (self.transform(img) if self.transform else img), label
        raise RuntimeError("no image in the dataset could be read")


def build_transforms(cfg: DataConfig) -> tuple[torch.nn.Module, torch.nn.Module]:
    """timm train (random-resized crop, flips, jitter, RandAugment, erasing) and eval transforms."""
    common = dict(input_size=cfg.img_size, interpolation=cfg.interpolation, mean=cfg.mean, std=cfg.std)
    train = create_transform(
        is_training=True,
        scale=cfg.scale,
        ratio=cfg.ratio,
        hflip=cfg.hflip,
        color_jitter=cfg.color_jitter,
        auto_augment=cfg.auto_augment,
        re_prob=cfg.re_prob,
        **common,
    )
    return train, create_transform(is_training=False, crop_pct=cfg.crop_pct, **common)


def scan_data_dir(cfg: DataConfig) -> tuple[Split, Split]:
    """Check and list ``cfg.data_dir``'s train and val splits (val indexed by train's classes)."""
    root = Path(cfg.data_dir)
    if not root.is_dir():
        raise ValueError(f"--data-dir {root} does not exist: expected {root}/train/<class>/* and {root}/val/<class>/*")
    train = scan_split(root / "train", verify=cfg.verify_images)
    return train, scan_split(root / "val", classes=train.classes, verify=cfg.verify_images)


def build_datasets(
    cfg: DataConfig, splits: tuple[Split, Split] | None = None
) -> tuple[ImageFolderDataset, ImageFolderDataset, list[str], int]:
    """Train and val datasets, the class names and the skipped-file count.

    Args:
        cfg: data settings.
        splits: the result of ``scan_data_dir(cfg)`` when already done (e.g. by rank 0); None: scan now.
    """
    train, val = splits or scan_data_dir(cfg)
    train_tf, val_tf = build_transforms(cfg)
    skipped = len(train.skipped) + len(val.skipped)
    return ImageFolderDataset(train.samples, train_tf), ImageFolderDataset(val.samples, val_tf), train.classes, skipped


def build_loaders(
    train_ds: Dataset, val_ds: Dataset, cfg: DataConfig, seed: int, rank: int = 0, world: int = 1
) -> tuple[DataLoader, DataLoader]:
    """Train loader (shuffled per epoch via ``loader.sampler.set_epoch``, full batches) and val loader.

    Each process sees its own shard; val shards do not overlap or pad, so summed metrics are exact.
    """
    if len(train_ds) < cfg.batch_size * world:
        raise ValueError(
            f"the training split has {len(train_ds)} images, fewer than one batch "
            f"(data.batch_size={cfg.batch_size} x {world} processes)"
        )
    sampler = DistributedSampler(train_ds, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    loader_args = dict(batch_size=cfg.batch_size, num_workers=cfg.num_workers, pin_memory=torch.cuda.is_available())
    train = DataLoader(train_ds, sampler=sampler, drop_last=True, **loader_args)
    val = DataLoader(Subset(val_ds, range(rank, len(val_ds), world)), shuffle=False, **loader_args)
    return train, val
