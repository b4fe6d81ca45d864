"""The ImageFolder scan, kept in the output folder (``scan.json.gz``) so a rerun or ``--resume`` does not redo it.

The cache is used while it describes the same folders: the same resolved ``data_dir``, the same
``verify_images`` setting and val resize, and, for every split folder and every folder under it, nested ones
included, the same modification time and the same names in it (a digest of them: a file added, removed or renamed
where the folder's time was kept, as a copy that keeps times or a mount that has none can), or the same failure to
list it, and the same verdict on every image it skipped (checked again each time: an image repaired in place leaves
its folder as it was). Anything else rescans; an unreadable cache is rescanned and replaced, with a note.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

from ..files import TASK_FILES, SkippedLink, is_hidden
from ..images import is_image_file, unreadable
from ..io import atomic_write
from .config import DataConfig
from .data import Split, image_problem, scan_data_dir, val_resize_shorter

(CACHE_FILE,) = TASK_FILES["classification"]  # scan.json.gz
_VERSION = 9  # another version's cache is scanned again (in 3, verify_images=true read headers only; in 4,
# a file linked from two class folders was listed in both; in 5, paths were as scanned from the working directory;
# in 6, the links skipped were not kept; in 7, they were kept as their warnings; in 8, val kept a file train linked
# to too, a folder was its time alone, and a skip's reason held its path as scanned)
_PATH = "<path>"  # a skipped path in its cached reason (PIL and the OS quote it): the same from any working directory


def _fingerprint(cfg: DataConfig) -> dict[str, Any]:
    root = Path(cfg.data_dir).resolve()
    folders: dict[str, Any] = {}  # folder -> [modification time, digest of its names], or why it does not list
    seen, errors = set(), []
    for split in ("train", "val"):
        for parent, dirs, files in os.walk(root / split, followlinks=True, onerror=errors.append):
            names = sorted(os.fsencode(name) for name in (*dirs, *files) if not is_hidden(name))
            real = os.path.realpath(parent)
            dirs[:] = [] if real in seen else [d for d in dirs if not is_hidden(d)]  # a link loop: once
            seen.add(real)
            digest = hashlib.blake2b(b"\0".join(names), digest_size=16).hexdigest()  # no name holds a NUL
            folders[os.path.relpath(parent, root)] = [os.stat(parent).st_mtime_ns, digest]
    folders |= {os.path.relpath(error.filename, root): unreadable(error) for error in errors}  # once it lists: rescan
    return {
        "version": _VERSION,
        "data_dir": str(root),
        "verify_images": cfg.verify_images,
        "val_resize": val_resize_shorter(cfg),  # which val images are too elongated to keep
        "folders": folders,
    }


def _changed_skip(cfg: DataConfig, splits: tuple[Split, Split]) -> str | None:
    """The first image the cached scan skipped whose check (the scan's: decoded with ``verify_images``) gives another
    answer now (an image repaired, or replaced, in place: its folder's time stays), or None. The skipped are few:
    rechecking them costs little. (An image in a split folder itself was skipped for where it lies, not checked.)"""
    for name, split, shorter in zip(("train", "val"), splits, (None, val_resize_shorter(cfg)), strict=True):
        for path, reason in split.skipped:
            checked = is_image_file(path) and Path(path).parent != Path(cfg.data_dir) / name
            if checked and image_problem(path, shorter, cfg.verify_images) != reason:
                return path
    return None


def _difference(tree: dict[str, Any], fingerprint: dict[str, Any]) -> str:
    """What differs between the cache ``tree``'s fingerprint and ``fingerprint``, for the note."""
    cached = tree["fingerprint"]
    if cached.get("version") != fingerprint["version"]:
        return "the cache's format changed"
    settings = [f"data.{key}" for key in ("data_dir", "verify_images") if cached.get(key) != fingerprint[key]]
    settings += ["the val resize"] if cached.get("val_resize") != fingerprint["val_resize"] else []
    return f"{' and '.join(settings)} changed" if settings else "the data folders changed"


def _encode(split: Split, root: str) -> dict[str, Any]:
    """``split`` with its paths relative to ``root``, the data folder: a run resumed from another working directory
    (``root`` named another way) finds its images."""
    samples = [(os.path.relpath(path, root), label) for path, label in split.samples]
    skipped = [(os.path.relpath(path, root), reason.replace(repr(path), _PATH)) for path, reason in split.skipped]
    links = [dataclasses.asdict(link) for link in split.links]  # as the scan named them
    return {"samples": samples, "classes": split.classes, "skipped": skipped, "links": links}


def _decode(tree: dict[str, Any], root: str) -> Split:
    samples = [(os.path.join(root, path), label) for path, label in tree["samples"]]
    skipped = []
    for relative, reason in tree["skipped"]:  # the reason quoting the path as it is named now
        path = os.path.join(root, relative)
        skipped.append((path, reason.replace(_PATH, repr(path))))
    return Split(samples, tree["classes"], skipped, [SkippedLink(**link) for link in tree["links"]])


def cached_scan(cfg: DataConfig, out: Path) -> tuple[tuple[Split, Split], bool, str | None]:
    """``scan_data_dir(cfg)``, read from ``out/scan.json.gz`` when it is still valid, else scanned and saved there.

    Returns:
        (train split, val split), whether they came from the cache, and a note on the cache for the log (None
        when there was none).
    """
    path = out / CACHE_FILE
    if not (Path(cfg.data_dir) / "train").is_dir():
        return scan_data_dir(cfg), False, None  # raises the error that names what is missing
    fingerprint = _fingerprint(cfg)
    note = None
    if path.is_file():
        try:
            tree = json.loads(gzip.decompress(path.read_bytes()))
            changed = None
            if tree["fingerprint"] == fingerprint:  # the splits are decoded (and their skips rechecked) only then
                splits = _decode(tree["train"], cfg.data_dir), _decode(tree["val"], cfg.data_dir)
                changed = _changed_skip(cfg, splits)
                if changed is None:
                    for link in splits[0].links + splits[1].links:  # the scan's warnings, as it gave them
                        warnings.warn(link.message, stacklevel=2)
                    for path_, reason in splits[0].skipped + splits[1].skipped:
                        warnings.warn(f"skipping {path_}: {reason}", stacklevel=2)
                    return splits, True, f"scan read from {path} (the class folders are unchanged)"
            what = f"{changed}, which the scan skipped, reads otherwise" if changed else _difference(tree, fingerprint)
            note = f"{what} since {path} was written: scanned again"
        except Exception as e:  # a damaged cache (any shape) is scanned again and replaced
            note = f"{path} is unreadable ({type(e).__name__}): scanned again"
    splits = scan_data_dir(cfg)
    tree = {
        "fingerprint": fingerprint,
        "train": _encode(splits[0], cfg.data_dir),
        "val": _encode(splits[1], cfg.data_dir),
    }
    atomic_write(path, lambda f: f.write(gzip.compress(json.dumps(tree).encode(), compresslevel=1)))
    return splits, False, note
