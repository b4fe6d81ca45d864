"""Evaluate a checkpoint on an ImageFolder split: top-1/top-5, loss, per-class accuracy, confusion matrix.

Checkpoints in any layout ``swinlite.convert_state_dict`` reads (swinlite, timm, official Microsoft,
torchvision) are accepted with a model name; weights written by ``scripts/train.py`` carry the model,
class names and preprocessing (``swinlite.weights``), so they need no other argument. Loading is strict.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import torch
from matplotlib.figure import Figure  # a bare Figure saves with the Agg canvas: no pyplot, no display
from timm.data import create_transform, resolve_model_data_config
from timm.utils.misc import natural_key  # the order of timm's ImageFolder reader (timm.data.readers)
from torch.utils.data import DataLoader

from ..engine.distributed import DistInfo, all_gather_object, all_reduce_sum
from ..engine.loop import SINGLE, StepSettings, autocast
from ..files import EVALUATIONS_BY_TASK, check_folder, printable_path
from ..images import LeftOut, nothing_scored
from ..inference import check_rgb_model, eval_resize_shorter, top_k
from ..io import atomic_write
from ..weights import described_config, load_model, read_info
from .data import ImageFolderDataset, class_folders, collate, scan_split, training_files

# what scripts/evaluate.py writes, beside the checkpoint unless --output-dir
EVALUATION_FILES = EVALUATIONS_BY_TASK["classification"]


@dataclass
class EvalResult:
    loss: float
    top1: float  # percent
    topk: float  # percent, top-k with k = min(5, classes) (equal to top1 for one class)
    confusion: torch.Tensor  # [true class, predicted class] counts, int64
    k: int = 5  # the k of ``topk``: min(5, classes)
    left_out: list[LeftOut] = field(default_factory=list)  # the images the loader could not read, not scored

    @property
    def per_class_accuracy(self) -> torch.Tensor:
        """Percent correct for each true class (NaN where the class has no images)."""
        return 100.0 * self.confusion.diag().double() / self.confusion.sum(1)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    loader: DataLoader,
    num_classes: int,
    settings: StepSettings,
    dist: DistInfo = SINGLE,
    split: str = "val",
) -> EvalResult:
    """Cross-entropy, top-1/top-k and the confusion matrix over ``loader`` (summed over processes), and the images
    it left out (all processes').

    Raises:
        ValueError: no image of ``split`` could be scored (each left out as it was read: pixels that do not decode
            behind a header the scan read); the loss and accuracy of none read 0 before, and training kept its best
            weights by them.
    """
    model.eval()
    k = min(5, num_classes)
    loss_sum, top1, topk, count = 0.0, 0.0, 0.0, 0
    # [true, predicted] counts: exact, on the CPU (MPS has no float64, nor accumulates every integer type)
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    left_out: list[LeftOut] = []
    for images, targets, left in loader:
        left_out += left
        if images is None:  # no image of the batch could be read (data.collate)
            continue
        images = images.to(settings.device, non_blocking=True)
        targets = targets.to(settings.device, non_blocking=True)
        if settings.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with autocast(settings):
            logits = model(images)
        logits = logits.float()
        loss_sum += torch.nn.functional.cross_entropy(logits, targets, reduction="sum").item()
        best = top_k(logits, k)[0]  # [B, k]; ties to the lower class, as predict.py ranks them
        top1 += (best[:, 0] == targets).sum().item()
        topk += (best == targets[:, None]).any(1).sum().item()
        count += len(targets)
        counted = (targets.cpu(), best[:, 0].cpu())  # the .item() calls above waited for the batch already
        confusion.index_put_(counted, torch.ones_like(counted[0]), accumulate=True)
    loss_sum, top1, topk, count = all_reduce_sum([loss_sum, top1, topk, count], dist, settings.device)
    if dist.enabled:  # summed on the run's device (NCCL reduces CUDA tensors only)
        summed = confusion.to(settings.device)
        torch.distributed.all_reduce(summed)
        confusion = summed.cpu()
    left_out = [item for part in all_gather_object(left_out, dist) for item in part]
    if count == 0:
        raise nothing_scored(0, left_out, split, "image", "top-1")
    return EvalResult(loss_sum / count, 100.0 * top1 / count, 100.0 * topk / count, confusion, k, left_out)


def _config_classes(checkpoint: str | Path, model_name: str | None) -> list[str] | None:
    """The class names of the weights file of a folder ``timm.models.save_for_hf`` wrote (its ``config.json``'s
    ``label_names``, which :func:`swinlite.load_model` gives the model it describes:
    :func:`~swinlite.weights.described_config`), None for any other file."""
    config = described_config(checkpoint, model_name)
    if config is None:
        return None
    names = config[2].get("label_names")
    return list(names) if isinstance(names, list | tuple) and names else None


@dataclass
class EvalSetup:
    model: torch.nn.Module
    loader: DataLoader
    classes: list[str]
    skipped: list[tuple[str, str]]  # (path, reason) of each file and link the scan left out
    split: str  # the folder evaluated
    size: int  # the side of the square images the model is given (the eval transform's crop)


def prepare_evaluation(
    checkpoint: str | Path,
    data_dir: str | Path,
    model_name: str | None = None,
    split: str = "val",
    batch_size: int = 64,
    num_workers: int = 2,
    img_size: int | None = None,
    class_order: str | None = None,
) -> EvalSetup:
    """Rebuild the checkpoint's model strictly (:func:`swinlite.load_model`) and build the split's loader.

    A self-describing file (a swinlite run's, or the weights of a folder ``timm.models.save_for_hf`` wrote) brings its
    classes and evaluation transform; for other files the classes are
    the data folder's (in ``class_order``: :func:`folder_classes`) and the transform the model's default. ValueError
    on any mismatch.
    """
    data_dir = Path(data_dir)
    check_folder(data_dir, "--data-dir", f"a folder holding {split}/<class>/*")
    info = read_info(checkpoint)
    recorded = info.classes if info is not None else _config_classes(checkpoint, model_name)
    if recorded is not None and class_order is not None:
        raise ValueError(f"--class-order is for files that record no class names; {checkpoint} records its classes")
    if recorded is None:
        source = data_dir / "train" if (data_dir / "train").is_dir() else data_dir / split
        classes = folder_classes(source, class_order, checkpoint)
        model = load_model(checkpoint, model_name)
        outputs = model.num_classes
        if outputs == 0:
            raise ValueError(f"{checkpoint} has no classifier (head.fc): it cannot be evaluated")
        if outputs != len(classes):
            raise ValueError(f"{checkpoint} classifies {outputs} classes but {data_dir} has {len(classes)}")
    else:
        model = load_model(checkpoint, model_name)
        classes = recorded
    check_rgb_model(model, checkpoint)  # before the split's scan: its loader feeds RGB images
    data_config = resolve_model_data_config(model)
    if img_size is not None and img_size != data_config["input_size"][-1]:
        if info is not None:
            raise ValueError(
                f"--img-size {img_size} contradicts {checkpoint}, evaluated at {data_config['input_size'][-1]} px; "
                "drop --img-size"
            )
        data_config["input_size"] = (3, img_size, img_size)
    transform = create_transform(**data_config, is_training=False)
    source = "the training split" if info is None else str(checkpoint)  # the classes the model was trained on
    others = [data_dir / s for s in ("train", "val") if s != split]  # a link into another split is not this one's
    scanned = scan_split(
        data_dir / split,
        classes,
        shorter=eval_resize_shorter(data_config),
        classes_of=source,
        apart=others,
        trained=training_files(data_dir / "train") if split != "train" else (),  # as the run's scan of val/ has it
    )
    dataset = ImageFolderDataset(scanned.samples, transform, evaluation=True)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate)
    links = [(link.path, link.reason) for link in scanned.links]  # as training's data: line counts them
    return EvalSetup(model, loader, classes, [*scanned.skipped, *links], split, data_config["input_size"][-1])


def folder_classes(split_dir: Path, order: str | None, checkpoint: str | Path) -> list[str]:
    """The class folders of ``split_dir`` in the order of the outputs of ``checkpoint``, a file that records no
    class names: ``sorted`` (torchvision's ImageFolder, swinlite's training) or ``natural`` (timm's ``train.py``:
    ``c2`` before ``c10``, case ignored, by timm's own ``natural_key``).

    Raises:
        ValueError: ``order`` is None and the two orders differ for these folders: the outputs would be scored
            against the wrong classes without a word (the same weights scored 87.5 % or 45.8 %).
    """
    folders = class_folders(split_dir)  # sorted; no image under them is read
    natural = sorted(folders, key=natural_key)
    if order is None and natural != folders:
        first = next(i for i, (a, b) in enumerate(zip(folders, natural, strict=True)) if a != b)
        shown = lambda names: ", ".join(names[max(0, first - 1) : first + 2])  # noqa: E731 (around the first difference)
        raise ValueError(
            f"{checkpoint} records no class names, and the class folders of {split_dir} order otherwise sorted "
            f"(... {shown(folders)} ..., torchvision's ImageFolder) than naturally (... {shown(natural)} ..., timm's "
            "train.py): pass --class-order sorted or --class-order natural, the order the model was trained with"
        )
    return natural if order == "natural" else folders


def plot_confusion(confusion: torch.Tensor, classes: list[str], path: str | Path) -> None:
    """Row-normalized confusion matrix (true class down, predicted across); counts shown for <= 20 classes. A class
    name that is not UTF-8 (a folder name's bytes) is shown with ``\\xNN`` escapes
    (:func:`~swinlite.files.printable_path`: matplotlib cannot draw the bytes)."""
    rows = confusion.double() / confusion.sum(1, keepdim=True).clamp(min=1)
    size = max(4.0, min(20.0, 0.45 * len(classes) + 2))
    fig = Figure(figsize=(size, size))
    ax = fig.subplots()
    ax.imshow(rows.numpy(), cmap="Blues", vmin=0, vmax=1)
    if len(classes) <= 20:
        ticks = range(len(classes))
        names = [printable_path(name) for name in classes]
        ax.set(xticks=ticks, yticks=ticks, xticklabels=names, yticklabels=names)
        for i in ticks:
            for j in ticks:
                count = int(confusion[i, j])
                if count:
                    ax.text(j, i, count, ha="center", va="center", color="white" if rows[i, j] > 0.5 else "black")
    ax.set(xlabel="predicted", ylabel="true", title="confusion matrix")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    atomic_write(path, lambda f: f.write(buffer.getvalue()))


def run_evaluation(setup: EvalSetup, device: torch.device, amp_dtype: torch.dtype | None = None) -> EvalResult:
    setup.model.to(device)
    return evaluate(setup.model, setup.loader, len(setup.classes), StepSettings(device, amp_dtype), split=setup.split)


def format_report(result: EvalResult, classes: list[str]) -> str:
    """Overall numbers, then one line per class ("n/a" for a class with no image in the split, whose accuracy is
    NaN: not measured)."""
    topk = f"top-{result.k} {result.topk:.2f}%  " if result.k > 1 else ""  # one class: top-1 alone, as in training
    lines = [f"top-1 {result.top1:.2f}%  {topk}loss {result.loss:.4f}", "per-class accuracy:"]
    counts = result.confusion.sum(1)
    for name, acc, n in zip(classes, result.per_class_accuracy.tolist(), counts.tolist(), strict=True):
        shown = f"{acc:6.2f}%" if n else f"{'n/a':>7}"
        lines.append(f"  {name:<20} {shown}  ({int(n)} images)")
    return "\n".join(lines)
