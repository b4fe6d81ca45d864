"""What detection gains from the run engine: EMA and best-of raw/EMA by val_map, gradient accumulation,
train.compile (step checkpoints resumed bit-equal mid-epoch: tests/engine/test_resume_bit_equal.py; the distributed
timeout: tests/engine/test_stall.py)."""

import re
import shutil
from pathlib import Path

import pytest
import torch
from detkit import edit_coco, make_quirky_coco, tiny_overrides
from single_thread import one_thread_only
from torch._dynamo.eval_frame import DisableContext, OptimizedModule

from swinlite.detection.task import DetectionTask
from swinlite.engine import run
from swinlite.engine.checkpoint import load_resume, save_resume
from swinlite.io import read_metadata, read_state_dict

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the file's quirks warn; test_data checks those


def _run(coco: Path, out: Path, resume: bool = False, **extra: object) -> Path:
    return run(DetectionTask, DetectionTask.load_config(None, tiny_overrides(coco, out, **extra)), resume=resume)


def _equal(a: Path, b: Path) -> bool:
    x, y = read_state_dict(a), read_state_dict(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


EMA = {"train.ema_decay": 0.5, "train.best_of": "ema", "train.deterministic": True}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """(data, run folder) of a finished deterministic 1-epoch run with EMA weights, the best of them by val_map
    (``EMA``); read by the EMA and compile tests, copied by the tests that change them."""
    root = tmp_path_factory.mktemp("finished")
    coco = make_quirky_coco(root / "coco")
    with one_thread_only():
        return coco, _run(coco, root / "run", **EMA)


def test_ema_weights_and_best_of_ema_by_val_map(finished: tuple[Path, Path]):
    out = finished[1]
    ema, last = read_metadata(out / "ema.safetensors"), read_metadata(out / "last.safetensors")
    assert (ema["task"], ema["weights"], last["weights"]) == ("detection", "ema", "raw")
    assert _equal(out / "best.safetensors", out / "ema.safetensors")  # best_of=ema: the EMA weights
    assert not _equal(out / "best.safetensors", out / "last.safetensors")
    resume = load_resume(out / "resume.pt")
    saved_ema = {k.removeprefix("module."): v for k, v in resume["ema"].items()}
    assert all(torch.equal(v, saved_ema[k]) for k, v in read_state_dict(out / "ema.safetensors").items())
    row = resume["history"][0]
    assert read_metadata(out / "best.safetensors")["val_map"] == row["val_map_ema"] == resume["best"]
    assert {"val_map_ema", "val_map50_ema", "val_map_large_ema"} <= set(row)


def test_gradient_accumulation_steps_every_accum_micro_batches(coco: Path, tmp_path: Path):
    settings = {"data.batch_size": 1, "optim.accum_steps": 2, "train.epochs": 2}
    out = _run(coco, tmp_path / "run", **settings)
    resume = load_resume(out / "resume.pt")
    assert resume["step"] == 2 * 3  # 5 images of batch 1: 5 micro-batches, 3 optimizer steps per epoch
    assert resume["scheduler"]["decay_t"] == [8 * 3 + 1, 11 * 3 + 1]  # decay_epochs 8, 11 counted in those steps


def test_compile_wraps_the_detector_and_writes_plain_weights(finished: tuple[Path, Path], tmp_path: Path, monkeypatch):
    """train.compile: the engine trains and evaluates through torch.compile's wrapper and saves the plain model.

    The wrapper is torch's own OptimizedModule with dynamo disabled: tracing a torchvision detector takes minutes
    on a CPU, and what is checked here is the engine's handling of the wrapper, not dynamo.
    """
    compiled = []

    def compile_(model, **kwargs):
        compiled.append(model)
        return OptimizedModule(model, DisableContext())

    coco, reference = finished  # the same settings, eager
    monkeypatch.setattr(torch, "compile", compile_)
    out = _run(coco, tmp_path / "compiled", **{"train.compile": True}, **EMA)
    assert len(compiled) == 1 and type(compiled[0]).__name__ == "SwinFasterRCNN"
    for name in ("last.safetensors", "ema.safetensors"):  # the plain keys, and the same training
        assert _equal(reference / name, out / name), name
    names = [load_resume(run / "resume.pt")["param_names"] for run in (reference, out)]  # what --resume regroups by
    assert names[0] == names[1] and names[0][0][0].startswith("backbone.")  # the plain model's, as eager


def _rename(data: dict) -> None:
    data["categories"][1]["name"] = "cat"


def _renumber(data: dict) -> None:
    data["categories"][1]["id"] = 8
    for ann in data["annotations"]:
        ann["category_id"] = 8 if ann["category_id"] == 7 else ann["category_id"]


def _without_names(out: Path) -> None:
    """The resume file as swinlite wrote it before it kept the category names."""
    state = load_resume(out / "resume.pt")
    del state["task_state"]["classes"]
    save_resume(out / "resume.pt", state)


NOW_BAR, NOW_CAT = "3 'square', 8 'bar'", "3 'square', 7 'cat'"  # the annotations' categories after the edit
RESUME_CASES = {  # test id: (change of both annotation files, change of the resume file, message (None: resumes))
    "renamed": (_rename, None, f"(id name) 3 'square', 7 'bar', the annotations now have {NOW_CAT}"),
    "renumbered": (_renumber, None, f"(id name) 3 'square', 7 'bar', the annotations now have {NOW_BAR}"),
    "old-file-renumbered": (_renumber, _without_names, f"(id name) [3, 7], the annotations now have {NOW_BAR}"),
    "old-file-renamed": (_rename, _without_names, None),  # no names to compare
}


@pytest.mark.parametrize(("edit", "damage", "message"), list(RESUME_CASES.values()), ids=list(RESUME_CASES))
def test_resume_refuses_other_categories_by_id_and_name(finished, tmp_path: Path, edit, damage, message):
    """Renamed categories (same ids, other names) resumed without a word: --resume compared the ids only, though the
    docs say it refuses other classes (the checkpoint would name them by the new names)."""
    coco, out = (shutil.copytree(path, tmp_path / path.name) for path in finished)
    (out / "config.yaml").write_text((out / "config.yaml").read_text().replace(str(finished[0]), str(coco)))
    for split in ("train", "val"):
        edit_coco(coco, split, edit)
    if damage is not None:
        damage(out)
    if message is None:
        assert _run(coco, out, resume=True, **{"train.epochs": 2}) == out
        return
    expected = f"{out / 'resume.pt'}: the run trained on categories {message}; restore them, or start over with "
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}--overwrite$"):
        _run(coco, out, resume=True, **{"train.epochs": 2})
