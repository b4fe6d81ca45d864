"""Extract multi-scale features for a folder, an image or a list of images (the engine of scripts/extract_features.py).

Resumable: an image whose feature file exists and is whole is skipped (Ctrl-C says how many are:
:class:`ExtractionInterrupted`); images that do not decode are listed in ``failures.txt`` and the run goes on.
``embeddings.safetensors`` is rebuilt at the end from every whole feature file, in input order, and ``failures.txt``
written after it: a folder holding ``failures.txt`` holds a completed run's. A run with images to extract removes
both first, so a run killed before its end leaves neither, rather than one that misses its images (killed between
the two writes: the embeddings, whole, which a rerun writes again with ``failures.txt``). ``settings.json`` records
what the features depend on (model, the weights file's SHA-256, input size, dtype); a rerun with other settings into
the same folder is refused rather than mixing features, and temporary files of an interrupted run are removed. A run
holds the output folder's lock (:class:`swinlite.lock.OutputLock`) from before it reads the folder until it ends: a
second run into it, which passed the settings check as the first had written no features yet, mixed two models'
features.

Each feature file also records the image it was made from (:func:`source_record`: the real path, the size and the
SHA-256 of its bytes). A folder holding features of any other image (one of another ``--input``, one that is no
longer among the input's images, or one whose bytes changed since) is refused before anything is written: skipping
would keep another image's features under this image's name, and extracting beside them would mix two inputs.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn
from torch.utils.data import DataLoader
from torchvision import transforms
from tqdm import tqdm

from .features import ImageFeatures, is_complete_feature_file, save_embeddings, save_features
from .files import check_image_source, fitting_name, interrupted_writes, opens_as_image, read_list
from .images import ImageFiles, is_image_file, list_images
from .io import atomic_write_bytes, file_sha256, json_bytes, printable_path, read_metadata
from .lock import OutputLock
from .models.swin import SwinTransformer
from .optimize import FixedBatch

SETTINGS_FILE = "settings.json"
EMBEDDINGS_FILE, FAILURES_FILE = "embeddings.safetensors", "failures.txt"
OUTPUT_FILES = (SETTINGS_FILE, EMBEDDINGS_FILE, FAILURES_FILE, "features")  # features/<image>.safetensors
SOURCE_KEY = "source_file"  # a feature file's metadata: the image it was made from (source_record)


@dataclass(frozen=True)
class ExtractionSummary:
    """Counts of one run: written now, skipped as already whole, failed to decode."""

    written: int
    skipped: int
    failed: int


class ExtractionInterrupted(KeyboardInterrupt):
    """Ctrl-C during an extraction whose rerun continues it (weights a rerun loads again: not random ones, whose
    features a rerun refuses); ``done`` images have whole feature files, which a rerun of the same command skips."""

    def __init__(self, done: int) -> None:
        kept = "the 1 image done is" if done == 1 else f"the {done} images done are"
        super().__init__(f"interrupted; rerun the same command to continue ({kept} kept)")
        self.done = done


def read_sources(source: str | os.PathLike) -> tuple[list[Path], Path]:
    """Images of a folder or one image file (:func:`swinlite.images.list_images`, as ``predict.py`` reads them), or of
    a text file (:func:`swinlite.files.read_list`: one path a line, as written; relative to it): a file with an image
    extension (:func:`swinlite.images.is_image_file`) or that Pillow opens as one (a ``.gif``:
    :func:`swinlite.files.opens_as_image`) is an image, any other a list.

    A listed path keeps its name as listed, made absolute (``..`` removed as written; a link is not resolved to its
    target's name, as a folder's files are not); each image is listed once, by :func:`swinlite.images.list_images`'
    rule (a link listed beside the file it leads to is skipped with a warning).

    Returns:
        (image paths, the root that output names are made relative to: the folder, the image's folder or the
        listed images' common folder).
    """
    source = Path(source)
    if is_list(source):
        images = list_images(read_list(source))  # each image once however often (or however spelled) it is listed
        return images, Path(os.path.commonpath([p.parent for p in images]))
    check_image_source(source)
    return list_images([source]), source if source.is_dir() else source.parent


def is_list(source: str | os.PathLike) -> bool:
    """Whether ``--input`` ``source`` is a list of images (:func:`read_sources`): a file without an image extension
    that Pillow does not open as an image either."""
    source = Path(source)
    return source.is_file() and not is_image_file(source) and not opens_as_image(source)


def output_path(image: Path, root: Path, output: Path) -> Path:
    """``output/features/<path relative to root>.safetensors`` (the extension kept, so a.jpg and a.png differ).

    Bytes of a name that are not UTF-8 are written as ``\\xNN``, and a backslash as ``\\x5c``
    (:func:`swinlite.files.printable_path`): safetensors and most tools read UTF-8 paths only, and two images never
    share a feature file. A name that would exceed the filesystem's 255 bytes is cut, with a hash of the whole name
    (:func:`swinlite.files.fitting_name`); the file records its image (``source``) as every feature file does.
    """
    relative = Path(printable_path(image.relative_to(root)))
    folders = [fitting_name(part) for part in relative.parent.parts]  # \xNN escapes may lengthen a folder's
    return output.joinpath("features", *folders, fitting_name(relative.name, ".safetensors"))


def record_settings(output: Path, settings: dict[str, object]) -> None:
    """Record ``settings`` in a new output folder, or check them against those of the run it holds.

    A settings file beside no features (a run that failed or was stopped before its first image) guards nothing and
    is replaced: refusing it would block the corrected rerun. Checked here rather than writing the file after the
    first features, as a kill between the two writes would leave the same folder.

    Raises:
        ValueError: the folder holds features made with other settings (or with random weights, which a
            rerun cannot reproduce), or files of these names that no extraction wrote (:func:`_earlier_settings`).
    """
    path = output / SETTINGS_FILE
    saved = _earlier_settings(output, settings)
    has_features = (output / "features").is_dir() and any((output / "features").rglob("*.safetensors"))
    if has_features:
        if saved is None:
            raise ValueError(
                f"{output} holds features but no {SETTINGS_FILE} to check them against; use another --output"
            )
        changed = [f"{k}: {saved.get(k)!r} -> {v!r}" for k, v in settings.items() if saved.get(k) != v]
        if changed:
            raise ValueError(
                f"{output} holds features made with other settings ({'; '.join(changed)}); "
                "pass another --output or delete it"
            )
        if settings["checkpoint_sha256"] is None:
            raise ValueError(
                f"{output} holds features of a model with random initial weights, which a rerun cannot reproduce; "
                "pass --checkpoint, another --output, or delete it"
            )
    for stale in interrupted_writes(output, recursive=True):
        stale.unlink()  # temp files of writes an interrupted run left; the real files are intact
    atomic_write_bytes(path, json_bytes(settings, indent=2))


def _earlier_settings(output: Path, settings: dict[str, object]) -> dict[str, object] | None:
    """The settings an earlier extraction recorded in ``output`` (the keys of ``settings``), or None where it holds
    none. ValueError where it holds a settings file that is not an extraction's (other keys, not a JSON object), or an
    embeddings or failures file with no extraction's settings beside it (a run writes the settings first): the user's
    own files of those names, which a run replaced without a word."""
    path = output / SETTINGS_FILE
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            saved = None
        if not isinstance(saved, dict) or set(saved) != set(settings):
            raise ValueError(
                f"--output {output} holds a {SETTINGS_FILE} that no feature extraction wrote (an extraction's records "
                f"{', '.join(settings)}): move it, or choose another --output"
            )
        return saved
    foreign = [name for name in (EMBEDDINGS_FILE, FAILURES_FILE) if (output / name).exists()]
    if foreign:
        raise ValueError(
            f"--output {output} holds {' and '.join(foreign)} but no {SETTINGS_FILE}, which an extraction writes "
            "first: no extraction's files; move them, or choose another --output"
        )
    return None


def source_record(image: Path) -> dict[str, object] | None:
    """What identifies the image a feature file is made from: its real path, size and the SHA-256 of its bytes.

    Its bytes rather than its modification time: a replacement of the same size that keeps the old file's time
    (``cp -p``, ``rsync -t``, ``tar x``; fixed-size formats such as BMP make equal sizes common) was skipped with the
    old image's features, where an image touched but not changed is the same image. Each run reads every image once
    more for it. None for a file that cannot be read (its decode fails and is listed in ``failures.txt``).
    """
    try:
        return {"path": str(image.resolve()), "size": image.stat().st_size, "sha256": file_sha256(image)}
    except OSError:
        return None


def check_features(
    output: Path, outputs: list[Path], records: list[dict[str, object] | None], root: Path, listed: bool
) -> list[int]:
    """The indices of the images to extract (no whole feature file yet), after checking the folder's features.

    Args:
        output: the output folder.
        outputs: each image's feature file (:func:`output_path`).
        records: each image's :func:`source_record`, taken before it is decoded: an image changed between the two
            is caught by the next run instead of being recorded as unchanged.
        root: the folder output names are relative to (:func:`read_sources`).
        listed: whether the images are a list's (:func:`is_list`).

    Raises:
        ValueError: ``output/features`` holds a feature file of another image than the one this run would write
            there, or of no image of this run; naming the first, its source, and the ways out. One of an image of
            this run under another name (:func:`_check_names`) says why the names differ.
    """
    expected = {out: i for i, out in enumerate(outputs)}
    whole = {p: is_complete_feature_file(p) for p in sorted((output / "features").rglob("*.safetensors"))}
    _check_names(output, [p for p, ok in whole.items() if ok and p not in expected], outputs, records, root, listed)
    problems = [(p, why) for p, ok in whole.items() if (why := _other_source(p, ok, expected, records))]
    if problems:
        path, why = problems[0]
        others = f"; and {len(problems) - 1} more" if len(problems) > 1 else ""
        if all(why.endswith(_UNCHECKABLE) for _, why in problems):  # perhaps of these very images: it cannot be told
            raise ValueError(
                f"{output} holds features that cannot be checked against these images ({path} {why}{others}): "
                "delete those feature files (or the folder) to extract these images there again (the same weights "
                "give the same features), or pass another --output"
            )
        raise ValueError(
            f"{output} holds features of other images ({path} {why}{others}): pass another --output, or delete those "
            "feature files (or the folder) to extract these images there"
        )
    return [i for i, out in enumerate(outputs) if not whole.get(out, False)]


def _check_names(
    output: Path,
    unnamed: list[Path],
    outputs: list[Path],
    records: list[dict[str, object] | None],
    root: Path,
    listed: bool,
) -> None:
    """ValueError where a whole feature file of no name of this run (``unnamed``) was made from one of this run's
    images (its recorded real path): the folder the names are relative to moved (a list's common folder with the
    images listed, or another --input folder), which a refusal as "not among the images" did not say."""
    index = {record["path"]: i for i, record in enumerate(records) if record is not None}
    for path in unnamed:
        meta = read_metadata(path)
        stored = meta.get(SOURCE_KEY)
        i = index.get(stored.get("path")) if isinstance(stored, dict) else None
        if i is None:
            continue
        name = printable_path(path.relative_to(output / "features")).removesuffix(".safetensors")
        source = printable_path(meta["source"])
        old = source.removesuffix(name).rstrip(os.sep) or os.sep if source.endswith(os.sep + name) else None
        made = f" (the folder was made with {old})" if old else ""
        if listed:
            rule = "the names of a list's images are relative to the listed images' common folder"
            keep = f"list the images so that their common folder stays {old or 'the one it was'}"
        else:
            rule = "the names of --input's images are relative to its folder (an image's: its folder)"
            keep = f"give --input {old}" if old else "give the --input the folder was made with"
        raise ValueError(
            f"{output} holds features of this --input's images under other names ({path} was made from {source}, "
            f"which this run names {outputs[i]}): {rule}, which is now {printable_path(root)}{made}; pass another "
            f"--output, or {keep}"
        )


_UNCHECKABLE = "by an older swinlite, which did not record the image's content hash"


def _other_source(
    path: Path, whole: bool, expected: dict[Path, int], records: list[dict[str, object] | None]
) -> str | None:
    """Why the feature file ``path`` is not of the image this run would write there, or None when it is (or when it is
    not whole there: an interrupted write, redone)."""
    if path not in expected:
        if not whole:
            return "is a damaged feature file, of no image of this --input"
        return f"was made from {read_metadata(path)['source']}, which is not among the images of this --input"
    if not whole:
        return None
    meta, current = read_metadata(path), records[expected[path]]
    stored = meta.get(SOURCE_KEY)
    if not isinstance(stored, dict) or "sha256" not in stored:  # none, or {path, size, mtime_ns}: the image's time
        return f"was made from {meta['source']} {_UNCHECKABLE}"
    if current is None:
        return f"was made from {stored['path']}, which can no longer be read"
    if stored["path"] != current["path"]:
        return f"was made from {stored['path']}, not from this run's image {current['path']}"
    if stored != current:
        return f"was made from {stored['path']}, which has changed since (its bytes differ)"
    return None


def run_extraction(
    model: SwinTransformer,
    model_name: str,
    source: str | os.PathLike,
    output: str | os.PathLike,
    input_size: tuple[int, int],
    dtype: torch.dtype = torch.float32,
    batch_size: int = 16,
    workers: int = 0,
    device: str = "cpu",
    progress: bool = True,
    checkpoint_sha256: str | None = None,
    weights: str | None = None,
    compile: bool = False,
    report: Callable[[str], None] | None = None,
    levels: Sequence[int] | None = None,
) -> ExtractionSummary:
    """Write per-image feature files, ``embeddings.safetensors`` and ``failures.txt`` under ``output``, holding its
    lock (:class:`swinlite.lock.OutputLock`) throughout; a lock left by a run that died is taken over, with a warning.

    Args:
        model: the Swin model (eval mode is set here); its ``pretrained_cfg`` gives mean and std.
        model_name: recorded in every file's metadata.
        source: an image folder, an image file or a text file of image paths.
        output: output folder.
        input_size: (H, W) every image is resized to.
        dtype: dtype of the stored stage maps (the pooled vectors stay fp32).
        batch_size: images per forward pass.
        workers: DataLoader worker processes decoding images.
        device: where the model runs.
        progress: show a tqdm progress bar where stderr is a terminal (none into a log file).
        checkpoint_sha256: the SHA-256 of the weights the model was loaded from, for ``settings.json`` (None: random
            initial weights). Of the bytes loaded, not of the file read again here: a file replaced since the load
            (a training run writing a new best.safetensors) would name weights the features were not made with.
        weights: where the weights come from, for messages (``"the checkpoint runs/a/best.safetensors"``,
            ``"timm's pretrained weights of NAME"``); None: named by ``checkpoint_sha256`` alone, or random initial
            weights where that is None.
        compile: run the model through :class:`swinlite.optimize.FixedBatch` (compiled once for ``batch_size``
            images; smaller batches are padded to it).
        report: called with :meth:`~swinlite.optimize.FixedBatch.report`'s line once the model is compiled (what
            serves, how long building it took), before the first image.
        levels: the levels to store (``stage<i>``), increasing; None: every level (a run's backbone: those its FPN
            reads, :func:`swinlite.features_of_runs.run_levels`).

    Raises:
        ValueError: another run holds ``output``'s lock, or ``output`` holds features of other images
            (:func:`check_features`) or features made with other settings (:func:`record_settings`); nothing is
            written then. Or an image's map or pooled vector holds values the model itself gave as inf or NaN
            (broken weights; any ``dtype``), or ``dtype`` is float16 and a map holds finite values beyond its range
            (±65504), which it would store as inf: raised before that image's batch is written (the files written
            before stay).
        ExtractionInterrupted: Ctrl-C while images are extracted or the last files written, where a rerun
            continues (``checkpoint_sha256`` given); a plain KeyboardInterrupt otherwise.
    """
    source, output, input_size = Path(source), Path(output), (int(input_size[0]), int(input_size[1]))
    with OutputLock(output, "feature extraction", "--output") as lock:
        if lock.taken_over:
            warnings.warn(lock.taken_over, stacklevel=2)
        images, root = read_sources(source)
        outputs = [output_path(p, root, output) for p in images]
        records = [source_record(p) for p in images]
        # before settings.json is written: a refusal changes nothing
        todo = check_features(output, outputs, records, root, is_list(source))
        settings = {
            "model": model_name,
            "checkpoint_sha256": checkpoint_sha256,
            "input_size": list(input_size),
            "dtype": str(dtype).removeprefix("torch."),
        }
        record_settings(output, settings)
        if todo:  # an earlier run's list of vectors and of failures: stale once this run writes features
            for name in (EMBEDDINGS_FILE, FAILURES_FILE):
                (output / name).unlink(missing_ok=True)
        cfg = model.pretrained_cfg
        transform = transforms.Compose(
            [
                transforms.Resize(input_size, interpolation=transforms.InterpolationMode.BICUBIC, antialias=True),
                transforms.ToTensor(),
                transforms.Normalize(cfg["mean"], cfg["std"]),
            ]
        )
        loader = DataLoader(
            ImageFiles([images[i] for i in todo], transform),
            batch_size=batch_size,
            num_workers=workers,
            collate_fn=list,
        )
        model = model.eval().to(device)
        levels = list(range(len(model.feature_info))) if levels is None else list(levels)
        strides = tuple(model.feature_info[i]["reduction"] for i in levels)
        net: nn.Module = _Features(model, levels).eval()
        if compile and todo:
            net = FixedBatch(net, torch.zeros(min(batch_size, len(todo)), 3, *input_size, device=device))
            if report is not None:
                report(net.report())
        failures: list[str] = []
        saved = 0  # feature files this run wrote
        bar = tqdm(total=len(todo), unit="img", disable=None if progress else True, desc="extract")  # None: a tty
        try:
            for batch in loader:
                good = [item for item in batch if item.image is not None]
                failures += [
                    printable_path(f"{images[todo[item.index]]}\t{item.error}") for item in batch if item.error
                ]
                if good:
                    x = torch.stack([item.image for item in good]).to(device)  # [B, 3, H, W]
                    try:
                        maps, pooled = _forward(net, x, dtype, levels)
                    except (_ModelNonFinite, _Float16Overflow) as e:  # before this batch's files: earlier ones stay
                        image, holds = images[todo[good[e.index].index]], len(images) - len(todo) + saved > 0
                        if isinstance(e, _Float16Overflow):
                            raise _overflow_error(image, e, output, holds) from None
                        named = _weights_named(weights, checkpoint_sha256)
                        raise _non_finite_error(image, e, output, holds, named) from None
                    for b, item in enumerate(good):
                        i = todo[item.index]
                        features = ImageFeatures(
                            maps[b], pooled[b], str(images[i]), item.size, input_size, strides, model_name
                        )
                        save_features(outputs[i], features, {SOURCE_KEY: records[i]})
                        saved += 1
                bar.update(len(batch))
            bar.close()
            _write_embeddings(outputs, output)  # failures.txt last: a folder holding it holds a completed run's
            atomic_write_bytes(output / FAILURES_FILE, "".join(f"{line}\n" for line in failures).encode())
        except KeyboardInterrupt:  # the last writes too: their rerun skips every image done, and writes both again
            if checkpoint_sha256 is None:  # record_settings refuses the rerun: random weights cannot be had again
                raise
            raise ExtractionInterrupted(len(images) - len(todo) + saved) from None
    return ExtractionSummary(written=len(todo) - len(failures), skipped=len(images) - len(todo), failed=len(failures))


class _Features(nn.Module):
    """images [B, 3, H, W] -> (maps of ``levels`` [[B, C_i, H_i, W_i], ...], pooled [B, C]): one module, so it can be
    compiled."""

    def __init__(self, model: SwinTransformer, levels: list[int]) -> None:
        super().__init__()
        self.model = model
        self.levels = levels

    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        final, maps = self.model.forward_intermediates(x, self.levels)
        return maps, self.model.forward_head(final, pre_logits=True)


def _forward(
    net: nn.Module, x: torch.Tensor, dtype: torch.dtype, levels: list[int]
) -> tuple[list[dict[str, torch.Tensor]], torch.Tensor]:
    """images [B, 3, H, W] -> (per image {"stage<i>": [C_i, H_i, W_i], ...} of ``levels`` in ``dtype`` on the CPU,
    pooled [B, C] fp32).

    Raises:
        _ModelNonFinite: a map or the pooled vector holds values the model itself gave as inf or NaN (any
            ``dtype``).
        _Float16Overflow: ``dtype`` is float16 and a map holds finite values beyond its range, which it stores as
            inf.
    """
    with torch.inference_mode():
        maps, pooled = net(x)
    stored = [m.to("cpu", dtype) for m in maps]  # [B, C_i, H_i, W_i] each
    for level, m, s in zip(levels, maps, stored, strict=True):
        if not torch.isfinite(s).all():  # one check a level per batch; which image and why: only on failure
            _check_map(m.float().cpu(), s, level)
    pooled = pooled.to("cpu", torch.float32)  # [B, C]: through model.norm, which the maps never pass
    if not torch.isfinite(pooled).all():
        _check_finite(pooled, "pooled vector (its embedding)")
    per_image = [{f"stage{level}": s[b] for level, s in zip(levels, stored, strict=True)} for b in range(x.shape[0])]
    return per_image, pooled


class _ModelNonFinite(ValueError):
    """``what`` of image ``index`` of a batch (its stage map, its pooled vector) holds values the model itself gave
    as inf or NaN (``found``: how many of each)."""

    def __init__(self, index: int, what: str, found: str) -> None:
        super().__init__(f"image {index} of the batch: its {what} holds {found} from the model")
        self.index, self.what, self.found = index, what, found


class _Float16Overflow(ValueError):
    """A stage map of image ``index`` of a batch holds finite values beyond float16's range (the largest
    ``largest``)."""

    def __init__(self, index: int, level: int, largest: float) -> None:
        super().__init__(f"image {index} of the batch: stage{level} reaches {largest:.3g}, beyond float16's range")
        self.index, self.level, self.largest = index, level, largest


def _check_finite(m: torch.Tensor, what: str) -> None:
    """_ModelNonFinite for the first image of the batch whose ``what`` in ``m`` ([B, ...] float32) is not finite."""
    bad = ~torch.isfinite(m)  # [B, ...]
    if bad.any():
        b = int(bad.flatten(1).any(1).nonzero()[0, 0])
        nan, inf = int(m[b].isnan().sum()), int(m[b].isinf().sum())
        raise _ModelNonFinite(b, what, " and ".join(f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "inf")) if n))


def _check_map(m: torch.Tensor, s: torch.Tensor, level: int) -> None:
    """Why ``s`` (the stored [B, C, H, W] map) is not finite: _ModelNonFinite where ``m`` (its float32 source) is
    not, the first such image of the batch (a float32 rerun would not help it); else _Float16Overflow, the first
    image that float16 turned to inf."""
    _check_finite(m, f"stage{level} map")
    overflow = ~torch.isfinite(s)  # [B, C, H, W]: finite in float32, so beyond float16's range
    b = int(overflow.flatten(1).any(1).nonzero()[0, 0])
    raise _Float16Overflow(b, level, float(m[b].abs().max()))


def _rerun_hint(change: str, output: Path, holds_features: bool) -> str:
    """The way out of a refused batch, by :func:`record_settings`' rule: a rerun with other settings into a folder
    that holds features is refused, so it takes another --output there."""
    if holds_features:
        return (
            f"rerun with {change} and another --output ({output} keeps the features of the images before it, and a "
            "rerun with other settings into it is refused)"
        )
    return f"rerun with {change} (into {output} too: it holds no features yet)"


def _overflow_error(image: Path, e: _Float16Overflow, output: Path, holds_features: bool) -> ValueError:
    """The refusal of ``--dtype float16`` for ``image``."""
    return ValueError(
        f"{printable_path(image)}: its stage{e.level} map reaches {e.largest:.3g}, beyond float16's range "
        f"(±65504), and --dtype float16 would store it as inf; {_rerun_hint('--dtype float32', output, holds_features)}"
    )


def _weights_named(weights: str | None, sha256: str | None) -> str:
    """The weights as messages name them: ``weights`` (where they come from) with their SHA-256 where known."""
    if weights is None:
        return f"the weights of SHA-256 {sha256}" if sha256 else "random initial weights"
    return f"{weights}, SHA-256 {sha256}" if sha256 else weights


def _non_finite_error(image: Path, e: _ModelNonFinite, output: Path, holds_features: bool, weights: str) -> ValueError:
    """The refusal of the model's own inf or NaN for ``image``: its ``weights`` (:func:`_weights_named`) are broken,
    whatever ``--dtype``."""
    return ValueError(
        f"{printable_path(image)}: its {e.what} holds {e.found} values, which the model itself gave, at any "
        f"--dtype: its weights ({weights}) are broken, by a training run that diverged, say; "
        f"{_rerun_hint('weights that give finite features', output, holds_features)}"
    )


def _write_embeddings(outputs: list[Path], output: Path) -> None:
    """``embeddings.safetensors`` of the whole feature files of ``outputs``, in their order, each row's path the
    ``source`` its file records: the spelling of ``--input`` of the run that wrote it (a resume may spell it
    otherwise), so the rows join to the files by path."""
    done = [out for out in outputs if is_complete_feature_file(out)]
    if not done:
        return
    vectors, paths = [], []
    for out in done:
        with safe_open(out, "pt") as f:
            vectors.append(f.get_tensor("pooled"))  # [C]
            paths.append(json.loads(f.metadata()["source"]))
    save_embeddings(output / EMBEDDINGS_FILE, torch.stack(vectors), paths)
