"""Bad input and faults in every training script: exit code 2, exactly one ``error:`` line, no traceback, nothing
already written lost (issue 19 items 6 to 8, the engine's cases)."""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from enginekit import TASKS, overrides, script_config, script_main
from safetensors.torch import load_file
from single_thread import one_thread_only

from swinlite import lock
from swinlite.engine import checkpoint
from swinlite.engine.checkpoint import RESUME_KEYS

ONE_STEP = {"train.max_iters": 1}  # epochs of one step, in the finished runs and every case: the same checks


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> dict[str, Path]:
    """A finished 1-epoch run of each task (folder of data, output folder), copied by the tests that change it."""
    from detkit import make_quirky_coco
    from segkit import make_seg_folder
    from trainkit import make_folder

    root = tmp_path_factory.mktemp("runs")
    data = {"classification": make_folder(root / "images"), "detection": make_quirky_coco(root / "coco"),
            "segmentation": make_seg_folder(root / "seg")}  # fmt: skip
    with one_thread_only():
        for task in TASKS:
            with (
                pytest.warns(UserWarning) if task == "detection" else contextlib.nullcontext()
            ):  # the COCO file's quirks
                settings = overrides(task, data[task], root / task, **{"train.epochs": 1, **ONE_STEP})
                assert script_main(task, ["--config", str(script_config(task, root)), *settings]) == 0
    return {"root": root, **{f"{t}_data": d for t, d in data.items()}, **{t: root / t for t in TASKS}}


def _truncate(out: Path) -> None:
    data = (out / "resume.pt").read_bytes()
    (out / "resume.pt").write_bytes(data[: len(data) // 2])


def _pickle_payload(out: Path) -> None:
    class Payload:  # unpickling it would run code; weights_only refuses it
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"epoch": Payload()}, out / "resume.pt")


def _other_task(task: str) -> Callable[[Path], None]:
    def write(out: Path) -> None:
        other = "detection" if task == "classification" else "classification"
        torch.save(dict.fromkeys(RESUME_KEYS, 0) | {"task": other}, out / "resume.pt")

    return write


INSIDE = {"classification": "train/c0", "detection": "train2017", "segmentation": "images/training"}  # a data folder


def _data_dir(out: Path) -> Path:
    return Path(yaml.safe_load((out / "config.yaml").read_text())["data"]["data_dir"])


def _remove_class(out: Path) -> None:
    data = _data_dir(out)
    shutil.rmtree(data / "train" / "c2")
    shutil.rmtree(data / "val" / "c2")


def _val_class_train_lacks(out: Path) -> None:
    shutil.copytree(_data_dir(out) / "val" / "c0", _data_dir(out) / "val" / "c9")


def _val_images_removed(out: Path) -> None:
    """The val images gone (detection's or segmentation's), their annotations left."""
    for folder in ("val2017", "images/validation"):
        for path in sorted((_data_dir(out) / folder).rglob("*.png")):
            path.unlink()


def _cut_weights(out: Path) -> None:
    """Half of the run's best weights beside it: a download cut short."""
    data = (out / "best.safetensors").read_bytes()
    (out.parent / "cut.safetensors").write_bytes(data[: len(data) // 2])


def _cut_legacy_weights(out: Path) -> None:
    """Half of the run's best weights in torch's legacy (pickle, not zip) format beside it: a download cut short."""
    torch.save(load_file(out / "best.safetensors"), out.parent / "legacy.pth", _use_new_zipfile_serialization=False)
    data = (out.parent / "legacy.pth").read_bytes()
    (out.parent / "cut.pth").write_bytes(data[: len(data) // 2])


def _results_alone(*names: str) -> Callable[[Path], None]:
    """The run's files gone, ``names`` (an evaluate script's results of other weights) in their place:
    ``evaluate.py --checkpoint A/best.safetensors --output-dir F``."""

    def write(out: Path) -> None:
        for path in out.iterdir():
            path.unlink()
        for name in names:
            (out / name).write_text("of other weights")

    return write


def _disk_full(monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "save_safetensors", full)


def _read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    real = lock.os.open

    def refuse(path, flags, *args):
        if str(path).endswith(".lock"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, flags, *args)

    monkeypatch.setattr(lock.os, "open", refuse)


def _one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


# (id, tasks, extra arguments, how the existing run is damaged (None: a new output folder), patch, message)
CASES = [
    ("ema_decay", TASKS, ["train.ema_decay=1.5"], None, None, "train.ema_decay=1.5 is out of range"),
    ("label_smoothing", ["classification"], ["train.label_smoothing=1.5"], None, None, "train.label_smoothing=1.5"),
    ("max_iters", TASKS, ["train.max_iters=0"], None, None, "expected 1 <= train.max_iters"),
    ("max_size", ["detection"], ["data.max_size=0"], None, None, "expected 1 <= data.max_size"),
    ("crop_pct", ["classification"], ["data.crop_pct=0"], None, None, "expected 0 < data.crop_pct <= 1"),
    ("device", TASKS, ["train.device=gpu0"], None, None, "train.device 'gpu0' is not a device; valid here: auto, cpu"),
    ("device_absent", TASKS, ["train.device=cuda:99"], None, None, "train.device cuda:99: "),
    # the first training step raised torch's RuntimeError (no deterministic CUDA kernel of nll_loss2d, ...)
    ("deterministic_cuda", ["segmentation"], ["train.device=cuda", "train.deterministic=true"], None, _one_gpu,
     "train.deterministic=true on cuda:0: torch has no deterministic CUDA kernel"),
    ("kwargs_typo", TASKS, ["model.kwargs.windw_size=2"], None, None, "did you mean 'window_size'?"),
    ("data_before_weights", TASKS, ["data.data_dir={file}.nowhere", "model.pretrained={file}.none"], None, None,
     "file.nowhere"),  # a mistyped --data-dir was named after the weights (fetched first when online)
    ("pretrained_timm", TASKS, ["model.pretrained=timm"], None, None, "model.pretrained 'timm' is now true"),
    ("output_is_file", TASKS, ["train.output_dir={file}"], None, None, "is a file; expected a folder"),
    ("output_in_the_data", TASKS, ["train.output_dir={data}/{inside}/run"], "keep", None,
     "lies inside the input folder"),  # its curves.png was read as a training image by the next run
    ("output_replaces_pretrained", TASKS, ["--overwrite", "model.pretrained={out}/best.safetensors"], "keep", None,
     "would replace the input"),  # --overwrite deleted the weights it was to start from
    # classification's was a traceback of timm's loader after the data scan; --overwrite had cleared the run first
    ("cut_pretrained", TASKS, ["--overwrite", "model.pretrained={out}/../cut.safetensors"], _cut_weights, None,
     "cut.safetensors' is a damaged (truncated?) safetensors file"),
    ("cut_legacy_pretrained", TASKS, ["--overwrite", "model.pretrained={out}/../cut.pth"], _cut_legacy_weights, None,
     "cut.pth' is not a weights file (expected safetensors or a torch checkpoint): RuntimeError: unexpected EOF"),
    ("text_pretrained", TASKS, ["--overwrite", "model.pretrained={file}"], "keep", None,
     "is not a weights file (expected safetensors or a torch checkpoint)"),
    ("resume_and_overwrite", TASKS, ["--resume", "--overwrite"], "keep", None, "pass one"),
    # found by the data scan, after --overwrite had removed the run
    ("overwrite_bad_data", ["classification"], ["--overwrite"], _val_class_train_lacks, None,
     "has classes the training split does not have: c9"),
    ("overwrite_bad_data", ["detection"], ["--overwrite"], _val_images_removed, None, "val2017; nothing to train"),
    ("overwrite_bad_data", ["segmentation"], ["--overwrite"], _val_images_removed, None, "no image files under"),
    ("weights_without_resume", ["classification"], [], lambda out: (out / "resume.pt").unlink(), None,
     "but no resume.pt, so nothing to resume; pass --overwrite"),  # a fresh run replaced the weights
    # a fresh run mixed into a folder of another run's evaluation: its eval.json beside the new weights
    ("results_alone", ["classification"], [], _results_alone("eval.json", "confusion_matrix.png"), None,
     "holds what a script wrote of other weights (eval.json, confusion_matrix.png) and no run"),
    ("results_alone", ["detection"], [], _results_alone("eval.json", "detections.json"), None,
     "(eval.json, detections.json) and no run: the new run's weights would lie beside them; pass --overwrite"),
    ("results_alone", ["segmentation"], [], _results_alone("eval.json", "per_class_iou.csv"), None,
     "(eval.json, per_class_iou.csv) and no run"),
    ("truncated_resume", TASKS, ["--resume"], _truncate, None, "resume.pt is not a readable resume file"),
    ("empty_resume", TASKS, ["--resume"], lambda out: (out / "resume.pt").write_bytes(b""), None,
     "resume.pt is not a readable resume file"),
    ("pickle_resume", TASKS, ["--resume"], _pickle_payload, None, "resume.pt is not a readable resume file"),
    ("other_task_resume", TASKS, ["--resume"], "other_task", None,
     "run; choose its own --output-dir (train.output_dir)"),
    ("class_removed", ["classification"], ["--resume"], _remove_class, None, "class folders gone: 'c2'"),
    # trained on: a warning, and the labels shifted by one under the saved classifier (val mIoU 39 -> 10)
    ("labels_reread", ["segmentation"], ["--resume", "data.reduce_zero_label=true"], "keep", None,
     "the run read its masks with data.reduce_zero_label=False, the settings now give data.reduce_zero_label=True"),
    ("resume_other_model", TASKS, ["--resume", "model.name=swinlite_v2_pico_patch2_window4_32"], "keep", None,
     "resume.pt does not fit this run's model (missing from the file: "),  # named no key
    ("disk_full", TASKS, ["--resume", "train.epochs=2"], "keep", _disk_full, "last.safetensors: No space left"),
    ("read_only", TASKS, [], None, _read_only, "Read-only file system"),
]  # fmt: skip


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("task", "args", "damage", "patch", "message"),
    [pytest.param(t, a, d, p, m, id=f"{t}-{i}") for i, tasks, a, d, p, m in CASES for t in tasks],
)
def test_one_error_line_exit_2_nothing_lost(
    task, args, damage, patch, message, finished, tmp_path, capsys, monkeypatch
):
    root = finished["root"]
    data = finished[f"{task}_data"]
    if damage is not None:  # a copy of the finished run (and of its data, which a case may change)
        data = shutil.copytree(data, tmp_path / "data")
        out = shutil.copytree(finished[task], tmp_path / "out")
        (out / "config.yaml").write_text((out / "config.yaml").read_text().replace(str(finished[f"{task}_data"]),
                                                                                      str(data)))  # fmt: skip
        (_other_task(task) if damage == "other_task" else (lambda o: None) if damage == "keep" else damage)(out)
    else:
        out = tmp_path / "out"
    before = {p.name: p.read_bytes() for p in out.iterdir()} if out.is_dir() else {}
    (tmp_path / "file").write_text("a file")
    argv = ["--config", str(script_config(task, root)), *overrides(task, data, out, **ONE_STEP)]
    argv += [a.format(file=tmp_path / "file", data=data, inside=INSIDE[task], out=out) for a in args]
    if patch is not None:
        patch(monkeypatch)
    code = script_main(task, argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert "Traceback" not in err
    # a scan writes its (valid) cache; a run writes its settings once it trains (a failed --resume keeps the run's)
    rewritten = ("scan.json.gz",) + (("config.yaml",) if patch is _disk_full else ())
    after = {p.name: p.read_bytes() for p in out.iterdir()} if out.is_dir() else {}
    assert {k: v for k, v in after.items() if k in before and k not in rewritten} == {
        k: v for k, v in before.items() if k not in rewritten
    }  # every file of the run is still there as it was
