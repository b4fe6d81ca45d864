"""End-to-end runs on a tiny generated folder: files written, metrics, evaluation of the result."""

import contextlib
import csv
import io
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from scriptkit import run_script
from single_thread import one_thread_only
from timm.data import Mixup
from trainkit import REPO, make_folder, tiny_config, tiny_overrides, train

from swinlite.classification import ClassificationTask
from swinlite.classification.task import _loss
from swinlite.engine.checkpoint import load_resume, save_resume
from swinlite.engine.distributed import DistInfo
from swinlite.engine.task import RunContext
from swinlite.io import read_metadata, read_state_dict


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 2-epoch run of scripts/train.py through its command-line runner (in this process, its printed lines kept
    in stdout.txt), shared by the tests below."""
    root = tmp_path_factory.mktemp("run")
    data = make_folder(root / "data")
    demo = str(REPO / "configs" / "demo.yaml")  # --data-dir alone would fine-tune ImageNet Swin-T
    argv = ["--config", demo, "--data-dir", data, "--output-dir", root / "out", *tiny_overrides(data, root / "out")]
    stdout, stderr = io.StringIO(), io.StringIO()
    with one_thread_only(), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = run_script("train", argv)
    assert code == 0, stderr.getvalue()
    (root / "stdout.txt").write_text(stdout.getvalue())
    return root


def test_files_and_metrics(run_dir: Path):
    out = run_dir / "out"
    assert {p.name for p in out.iterdir()} >= {
        "config.yaml", "metrics.csv", "curves.png", "best.safetensors", "last.safetensors", "resume.pt"
    }  # fmt: skip
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["epoch", "train_loss", "val_loss", "val_top1", "val_top3", "lr", "epoch_time",
                            "train_img_s"]  # fmt: skip  # 3 classes: top-3
    assert [int(r["epoch"]) for r in rows] == [1, 2]
    for r in rows:
        assert 0 <= float(r["val_top1"]) <= float(r["val_top3"]) <= 100
        assert float(r["train_loss"]) > 0 and float(r["epoch_time"]) > 0 and float(r["lr"]) > 0
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    stdout = (run_dir / "stdout.txt").read_text()
    assert f"metrics:           {out / 'metrics.csv'}" in stdout and "epoch 2/2: train loss" in stdout
    assert "top-3 " in stdout and "top-5" not in stdout  # the k used: 3 classes


def test_weights_and_resume_file(run_dir: Path):
    out = run_dir / "out"
    meta = read_metadata(out / "last.safetensors")
    assert meta["model"] == "swinlite_pico_patch2_window4_32" and meta["classes"] == ["c0", "c1", "c2"]
    assert meta["epoch"] == 2
    resume = load_resume(out / "resume.pt")
    assert resume["epoch"] == 2 and resume["step"] == 2 * 3  # 24 images / batch 8, two epochs
    last = read_state_dict(out / "last.safetensors")
    assert all(torch.equal(last[k], v) for k, v in resume["model"].items())
    cfg = ClassificationTask.load_config(out / "config.yaml")  # the resolved config is itself a valid config file
    assert cfg.train.epochs == 2 and cfg.data.img_size == 16


def test_evaluate_script_on_trained_weights(run_dir: Path, capsys):
    """scripts/evaluate.py in this process (its runner, as from the command line; the run it reads: a script's)."""
    out, data = run_dir / "out", run_dir / "data"
    code = run_script("evaluate", ["--checkpoint", out / "best.safetensors", "--data-dir", data, "--num-workers", "0",
                                   "--output-dir", run_dir / "eval"])  # fmt: skip
    result = capsys.readouterr()
    assert code == 0, result.err
    summary = json.loads((run_dir / "eval" / "eval.json").read_text())
    best_top1 = max(float(r["val_top1"]) for r in csv.DictReader(open(out / "metrics.csv")))
    assert summary["top1"] == pytest.approx(best_top1, abs=1e-3)  # same weights, same val images
    assert len(summary["per_class_top1"]) == 3 and "per-class accuracy" in result.out
    assert (run_dir / "eval" / "confusion_matrix.png").read_bytes()[:4] == b"\x89PNG"


def test_existing_run_needs_resume_or_overwrite(run_dir: Path):
    cfg = tiny_config(run_dir / "data", run_dir / "out")
    with pytest.raises(ValueError, match="already holds a run; pass --resume to continue it, --overwrite"):
        train(cfg)
    with pytest.raises(ValueError, match="nothing to resume"):
        train(tiny_config(run_dir / "data", run_dir / "elsewhere"), resume=True)


def test_resuming_a_finished_run_only_clears_stale_temp_files(run_dir: Path):
    out = run_dir / "out"
    before = (out / "last.safetensors").read_bytes()
    (out / ".last.safetensors.tmp12345").write_bytes(b"half a file")  # left by a save that was killed
    train(tiny_config(run_dir / "data", out), resume=True)
    assert not (out / ".last.safetensors.tmp12345").exists()
    assert (out / "last.safetensors").read_bytes() == before and load_resume(out / "resume.pt")["epoch"] == 2


def test_every_training_option_in_one_epoch(tmp_path: Path, folder: Path):
    """Mixup/cutmix, label smoothing, EMA, accumulation, clipping, bf16, grad checkpointing, layer decay."""
    extra = {
        "train.epochs": 1, "data.mixup": 0.8, "data.cutmix": 1.0, "train.label_smoothing": 0.1,
        "train.ema_decay": 0.9, "optim.accum_steps": 2, "optim.clip_grad": 1.0, "train.amp": "bf16",
        "model.grad_checkpointing": True, "optim.layer_decay": 0.8, "data.auto_augment": "rand-m9-mstd0.5-inc1",
        "data.re_prob": 0.25, "optim.lr_base_batch": 16, "train.deterministic": False,
    }  # fmt: skip
    out = train(tiny_config(folder, tmp_path / "out", **extra))
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert len(rows) == 1 and {"val_top1_ema", "val_loss_ema", "val_top3_ema"} <= set(rows[0])
    resume = load_resume(out / "resume.pt")
    assert resume["step"] == 2 and resume["ema"] is not None  # 3 micro-batches, accumulated by 2: 2 steps
    scales = {g["lr_scale"] for g in resume["optimizer"]["param_groups"]}
    assert len(scales) > 2  # layer decay made several lr scales


def test_normalisation_is_the_models_written_as_numbers(tmp_path: Path, folder: Path, capsys):
    """A timm ViT (pretrained config: mean and std 0.5) trained on ImageNet's statistics without a word. Unset,
    data.mean / data.std are the model's: config.yaml and the weights record the numbers, --resume finds them equal."""
    vit = {"model.name": "vit_tiny_patch16_224", "model.kwargs": "{img_size: 16, patch_size: 8, depth: 1}",
           "train.epochs": 1}  # fmt: skip
    out = train(tiny_config(folder, tmp_path / "out", **vit))
    data = yaml.safe_load((out / "config.yaml").read_text())["data"]
    assert data["mean"] == data["std"] == [0.5, 0.5, 0.5]
    assert read_metadata(out / "best.safetensors")["preprocessing"]["mean"] == [0.5, 0.5, 0.5]
    capsys.readouterr()
    train(tiny_config(folder, out, **(vit | {"train.epochs": 2})), resume=True)
    printed = capsys.readouterr().out
    assert "changed setting data" not in printed
    assert "warning: the lr schedule differs from the saved one (changed train.epochs: 1 -> 2)" in printed
    # a run started before unset meant the model's: ImageNet's numbers recorded; its resume switched to 0.5 mid-run
    # (its resume file, of a swinlite of then, recorded no settings)
    tree = yaml.safe_load((out / "config.yaml").read_text())
    tree["data"] |= {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    (out / "config.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
    save_resume(out / "resume.pt", {k: v for k, v in load_resume(out / "resume.pt").items() if k != "config"})
    train(tiny_config(folder, out, **(vit | {"train.epochs": 3})), resume=True)
    assert "changed setting data" not in capsys.readouterr().out
    assert yaml.safe_load((out / "config.yaml").read_text())["data"]["mean"] == [0.485, 0.456, 0.406]
    assert read_metadata(out / "last.safetensors")["preprocessing"]["mean"] == [0.485, 0.456, 0.406]


def test_pretrained_weights_are_the_starting_point(run_dir: Path, tmp_path: Path):
    """A run from the module run's weights at lr 0 ends with those very weights."""
    start = run_dir / "out" / "last.safetensors"
    frozen = {"optim.lr": 0.0, "schedule.warmup_lr": 0.0, "schedule.min_lr": 0.0}  # lr 0: weights cannot move
    extra = {"model.pretrained": start, "train.epochs": 1}
    second = train(tiny_config(run_dir / "data", tmp_path / "b", **frozen, **extra))
    a, b = read_state_dict(start), read_state_dict(second / "last.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.amp=fp32", "train.amp must be one of none, bf16, fp16, got 'fp32'"),
        ("model.name=swin_nope", "not a timm model"),
        ("data.batch_size=64", "fewer than one batch"),
        ("data.dataset=cifar", "data.dataset must be one of folder, digits, got 'cifar'"),
        ("train.amp=fp16", "fp16 needs CUDA"),
    ],
)
def test_unworkable_settings_fail_before_training(tmp_path: Path, folder: Path, override: str, message: str):
    if override == "train.amp=fp16" and torch.cuda.is_available():
        pytest.skip("fp16 works where CUDA is available")
    key, value = override.split("=")
    with pytest.raises(ValueError, match=message):
        train(tiny_config(folder, tmp_path / "out", **{key: value}))
    assert not (tmp_path / "out" / "resume.pt").exists()


def test_resume_with_more_epochs_follows_the_new_schedule(run_dir: Path, tmp_path: Path):
    out = tmp_path / "out"
    shutil.copytree(run_dir / "out", out)
    train(tiny_config(run_dir / "data", out, **{"train.epochs": 3}), resume=True)
    resume = load_resume(out / "resume.pt")
    assert resume["epoch"] == 3 and [r["epoch"] for r in resume["history"]] == [1, 2, 3]
    assert resume["scheduler"]["t_initial"] + resume["scheduler"]["warmup_t"] == 3 * 3  # 3 epochs of 3 steps


@pytest.mark.parametrize(("mixup", "smoothing"), [(False, 0.1), (True, 0.0), (False, 0.0)])
def test_the_training_loss_is_fp32_under_bf16_autocast(mixup: bool, smoothing: float):
    """On the CPU autocast leaves log_softmax in bf16: timm's label-smoothing CE returned a bf16 loss (logged on the
    bf16 grid, 2.3125, 2.2344, ...; 0.3 % off with its gradient), its soft-target CE one from bf16 log-probs."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 10)
    images, labels = torch.randn(16, 8), torch.randint(0, 10, (16,))
    targets = torch.nn.functional.one_hot(labels, 10).float() if mixup else labels
    step = SimpleNamespace(ctx=SimpleNamespace(settings=SimpleNamespace(device="cpu", channels_last=False)),
                           mixup=None, loss_fn=_loss(mixup, smoothing))  # fmt: skip
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = ClassificationTask.train_step(step, model, (images, targets)).loss
        logits = model(images)  # the same bf16 logits, their loss taken in fp32 by hand
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, _loss(mixup, smoothing)(logits.float(), targets), rtol=1e-6, atol=0)


def test_train_label_smoothing_smooths_the_labels_with_and_without_mixup(tmp_path: Path):
    """Without mixup the loss is torch's cross-entropy of labels smoothed by 0.1 (not the plain one); with it, the
    mixed targets are smoothed as timm's Mixup smooths them (the soft-target loss smooths nothing itself)."""
    torch.manual_seed(0)
    logits, labels = torch.randn(4, 3), torch.tensor([0, 1, 2, 0])
    smoothed = torch.nn.functional.cross_entropy(logits, labels, label_smoothing=0.1)
    assert not torch.isclose(smoothed, torch.nn.functional.cross_entropy(logits, labels))
    torch.testing.assert_close(_loss(False, 0.1)(logits, labels), smoothed)
    data = make_folder(tmp_path / "data", classes=3, per_class=1)
    cfg = tiny_config(data, tmp_path / "out", **{"data.mixup": 0.8, "train.label_smoothing": 0.1})
    task = ClassificationTask(RunContext(cfg, torch.device("cpu"), DistInfo(), tmp_path, None))
    task.build_datasets()
    images, mixed = torch.randn(4, 3, 16, 16), []
    for mixup in (task.mixup, Mixup(mixup_alpha=0.8, cutmix_alpha=0.0, label_smoothing=0.1, num_classes=3)):
        np.random.seed(0)  # Mixup draws its lambda from numpy
        mixed.append(mixup(images.clone(), labels)[1])  # [B, classes]
    torch.testing.assert_close(mixed[0], mixed[1], rtol=0, atol=0)
