"""scripts/evaluate.py's core on a checkpoint in timm's layout, checked against timm's own model; the script's
report; two processes' scores equal one process's."""

import json
import os
import warnings
from pathlib import Path

import pytest
import timm
import torch
from pico import PICO
from rankforks import forked_pair, report_and_exit
from scriptkit import disk_full_after_first_file, run_script
from timm.models.swin_transformer import SwinTransformer as TimmSwin
from trainkit import make_folder

from swinlite.classification.evaluation import (
    evaluate,
    format_report,
    plot_confusion,
    prepare_evaluation,
    run_evaluation,
)
from swinlite.engine.distributed import DistInfo
from swinlite.engine.loop import StepSettings
from swinlite.io import save_safetensors
from swinlite.metadata import weights_metadata

PRE = {"input_size": [3, 16, 16], "interpolation": "bicubic", "mean": [0.5] * 3, "std": [0.25] * 3, "crop_pct": 1.0,
       "crop_mode": "center"}  # fmt: skip


def test_timm_checkpoint_matches_timm_model(tmp_path: Path):
    data = make_folder(tmp_path / "data", classes=3, per_class=2, size=64)
    torch.manual_seed(0)
    reference = TimmSwin(img_size=64, patch_size=2, window_size=4, embed_dim=48, depths=(2, 2, 2, 2),
                         num_heads=(2, 4, 8, 16), num_classes=3).eval()  # fmt: skip
    with torch.no_grad():  # random weights give near-uniform logits; a larger head makes predictions differ
        reference.head.fc.weight.mul_(50)
    torch.save(reference.state_dict(), tmp_path / "timm_swin.pth")
    setup = prepare_evaluation(tmp_path / "timm_swin.pth", data, "swinlite_nano_patch2_window4_64", num_workers=0)
    result = run_evaluation(setup, torch.device("cpu"))
    images, targets = (torch.cat(part) for part in list(zip(*setup.loader, strict=True))[:2])  # then left out
    with torch.no_grad():
        logits = reference(images)
    assert result.loss == pytest.approx(torch.nn.functional.cross_entropy(logits, targets).item(), abs=1e-5)
    assert result.top1 == pytest.approx(100 * (logits.argmax(1) == targets).float().mean().item())
    assert result.confusion.sum() == len(targets) == 6
    # counted in int64 (float64 was a TypeError on MPS, which has none), as a naive loop counts
    expected = torch.zeros(3, 3, dtype=torch.int64)
    for true, predicted in zip(targets.tolist(), logits.argmax(1).tolist(), strict=True):
        expected[true, predicted] += 1
    assert result.confusion.dtype == torch.int64 and torch.equal(result.confusion, expected)
    per_class = [100 * expected[c, c].item() / expected[c].sum().item() for c in range(3)]
    assert result.per_class_accuracy.dtype == torch.float64 and result.per_class_accuracy.tolist() == per_class
    assert "per-class accuracy" in format_report(result, setup.classes)
    # a class folder named by bytes that are not UTF-8 (caf\xe9): matplotlib's traceback after eval.json, no PNG
    classes = [os.fsdecode(b"caf\xe9"), *setup.classes[1:]]
    plot_confusion(result.confusion, classes, tmp_path / "cm.png")
    assert (tmp_path / "cm.png").read_bytes()[:4] == b"\x89PNG"


def test_mismatches_are_clear_errors(tmp_path: Path):
    data = make_folder(tmp_path / "data", classes=3, per_class=1)
    model = timm.create_model("swinlite_pico_patch2_window4_32", num_classes=10)
    torch.save(model.state_dict(), tmp_path / "ten.pth")
    with pytest.raises(ValueError, match="classifies 10 classes but .* has 3"):
        prepare_evaluation(tmp_path / "ten.pth", data, "swinlite_pico_patch2_window4_32")
    with pytest.raises(ValueError, match="does not record its model; pass --model \\(load_model's model=\\)"):
        prepare_evaluation(tmp_path / "ten.pth", data)
    with pytest.raises(ValueError, match="--data-dir .* does not exist"):
        prepare_evaluation(tmp_path / "ten.pth", tmp_path / "nope", "swinlite_pico_patch2_window4_32")
    with pytest.raises(ValueError, match=r"--data-dir .*ten.pth is a file; expected a folder holding val/<class>/\*"):
        prepare_evaluation(tmp_path / "ten.pth", tmp_path / "ten.pth", "swinlite_pico_patch2_window4_32")


def test_one_class_model_reports_top1_alone(tmp_path: Path, capsys):
    """A one-class model printed "top-1 100.00%  top-1 100.00%", and eval.json's top-k entry (k = 1) overwrote top1;
    top-k is reported for k > 1 only, as the training epoch line and metrics.csv do."""
    data = make_folder(tmp_path / "data", classes=1, per_class=2, splits=("val",))
    save_safetensors(tmp_path / "one.safetensors", timm.create_model(PICO, num_classes=1).state_dict(),
                     weights_metadata(PICO, {"num_classes": 1}, ["c0"], PRE))  # fmt: skip
    assert run_script("evaluate", ["--checkpoint", tmp_path / "one.safetensors", "--data-dir", data,
                                   "--num-workers", "0"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines()[1].startswith("top-1 100.00%  loss ")
    report = json.loads((tmp_path / "eval.json").read_text())
    assert [k for k in report if k.startswith("top")] == ["top1"] and report["top1"] == 100.0


def test_a_full_disk_leaves_no_lone_eval_json_and_overwrite_reruns(tmp_path: Path, monkeypatch, capsys):
    """eval.json was written first: a full disk before confusion_matrix.png left it alone, which refused every rerun,
    --overwrite's too ("holds eval.json beside none of classification's other outputs"). It is written last now."""
    data = make_folder(tmp_path / "data", classes=1, per_class=1, splits=("val",))
    save_safetensors(tmp_path / "one.safetensors", timm.create_model(PICO, num_classes=1).state_dict(),
                     weights_metadata(PICO, {"num_classes": 1}, ["c0"], PRE))  # fmt: skip
    argv = ["--checkpoint", tmp_path / "one.safetensors", "--data-dir", data, "--num-workers", "0"]
    with monkeypatch.context() as full:
        disk_full_after_first_file(full, tmp_path)
        assert run_script("evaluate", argv) == 2
    assert f"error: [Errno 28] No space left on device: '{tmp_path / 'eval.json'}'" in capsys.readouterr().err
    assert not (tmp_path / "eval.json").exists() and (tmp_path / "confusion_matrix.png").is_file()
    assert run_script("evaluate", [*argv, "--overwrite"]) == 0
    assert json.loads((tmp_path / "eval.json").read_text())["top1"] == 100.0


def test_a_save_for_hf_folders_class_names_map_the_class_folders(tmp_path: Path):
    """Its config.json's label_names were ignored: the class folders were scored in sorted order against outputs the
    file names otherwise (cat and dog swapped: 33 % where predict.py labelled every image right)."""
    data = make_folder(tmp_path / "data", classes=2, per_class=1, splits=("val",))  # c0, c1
    model = timm.create_model(PICO, num_classes=2)
    model.pretrained_cfg = {**model.pretrained_cfg, "label_names": ["c1", "c0"], "num_classes": 2}
    timm.models.save_for_hf(model, tmp_path / "shared", safe_serialization=True)
    setup = prepare_evaluation(tmp_path / "shared" / "model.safetensors", data, num_workers=0)
    assert setup.classes == ["c1", "c0"]
    assert {Path(path).parent.name: label for path, label in setup.loader.dataset.samples} == {"c1": 0, "c0": 1}
    with pytest.raises(ValueError, match="--class-order is for files that record no class names"):
        prepare_evaluation(tmp_path / "shared" / "model.safetensors", data, class_order="sorted")


def test_a_file_without_class_names_needs_the_class_order_where_the_orders_differ(tmp_path: Path, capsys):
    """Its outputs were mapped to the class folders sorted (torchvision's ImageFolder: c1, c10, c2) without a word,
    while timm's train.py orders them naturally (c1, c2, c10): the same weights scored 87.5 % or 45.8 %."""
    data = make_folder(tmp_path / "data", classes=3, per_class=1, splits=("val",))
    (data / "val" / "c0").rename(data / "val" / "c10")  # c1, c10, c2
    torch.save(timm.create_model(PICO, num_classes=3).state_dict(), tmp_path / "timm.pth")
    argv = ["--checkpoint", tmp_path / "timm.pth", "--model", PICO, "--data-dir", data, "--num-workers", "0"]
    assert run_script("evaluate", argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {tmp_path / 'timm.pth'} records no class names, and the class folders of")
    assert "(... c1, c10, c2 ..., torchvision's ImageFolder) than naturally (... c1, c2, c10 ..., timm's" in line
    assert line.endswith("pass --class-order sorted or --class-order natural, the order the model was trained with")
    for order, classes in (("sorted", ["c1", "c10", "c2"]), ("natural", ["c1", "c2", "c10"])):
        setup = prepare_evaluation(tmp_path / "timm.pth", data, PICO, num_workers=0, class_order=order)
        assert setup.classes == classes
        assert {Path(path).parent.name: label for path, label in setup.loader.dataset.samples} == {
            name: i for i, name in enumerate(classes)
        }  # each folder's images scored against its output
    assert run_script("evaluate", [*argv, "--class-order", "natural"]) == 0
    assert json.loads((tmp_path / "eval.json").read_text())["classes"] == ["c1", "c2", "c10"]
    save_safetensors(tmp_path / "named.safetensors", timm.create_model(PICO, num_classes=3).state_dict(),
                     weights_metadata(PICO, {"num_classes": 3}, ["c1", "c2", "c10"], PRE))  # fmt: skip
    capsys.readouterr()
    assert run_script("evaluate", ["--checkpoint", tmp_path / "named.safetensors", "--data-dir", data,
                                   "--class-order", "natural", "--output-dir", tmp_path / "named"]) == 2  # fmt: skip
    assert capsys.readouterr().err.strip() == (
        f"error: --class-order is for files that record no class names; {tmp_path / 'named.safetensors'} records "
        "its classes"
    )


def test_the_classes_of_a_file_without_class_names_are_the_training_folders_unread(tmp_path: Path):
    """The class folders of the training split were listed by a scan of every image's header: a broken training
    image was named ("skipping ...") by an evaluation of the val split, which reads none of them."""
    data = make_folder(tmp_path / "data", classes=3, per_class=1)
    (data / "train" / "c1" / "broken.png").write_bytes(b"not a png")
    torch.save(timm.create_model(PICO, num_classes=3).state_dict(), tmp_path / "timm.pth")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setup = prepare_evaluation(tmp_path / "timm.pth", data, PICO, num_workers=0)
    assert setup.classes == ["c0", "c1", "c2"] and len(setup.loader.dataset) == 3


@pytest.mark.parametrize("name", ["t.png", "t -> u.png"])
def test_the_scan_and_the_loader_name_an_unreadable_image_in_the_same_words(tmp_path: Path, name: str):
    """eval.json's "skipped" gave a file the scan dropped as "UnidentifiedImageError: cannot identify ...", one the
    loader dropped as "unreadable (OSError: image file is truncated ...)"; a link into the train split, skipped with a
    warning (and counted in training's data: line), was missing from it, then named by its warning read back (a link
    named ``t -> u.png`` cut to ``t``)."""
    data = make_folder(tmp_path / "data", classes=3, per_class=2)
    (garbage := data / "val" / "c1" / "garbage.png").write_bytes(b"not a png")
    (link := data / "val" / "c0" / name).symlink_to("../../train/c0/0.png")
    cut = data / "val" / "c2" / "0.png"
    cut.write_bytes(cut.read_bytes()[:100])  # the header reads: the loader finds it
    save_safetensors(tmp_path / "named.safetensors", timm.create_model(PICO, num_classes=3).state_dict(),
                     weights_metadata(PICO, {"num_classes": 3}, ["c0", "c1", "c2"], PRE))  # fmt: skip
    with pytest.warns(UserWarning, match=f"skipping {garbage}: unreadable"):
        setup = prepare_evaluation(tmp_path / "named.safetensors", data, num_workers=0)
    with pytest.warns(UserWarning, match=f"{cut} left out of the evaluation: unreadable"):
        result = run_evaluation(setup, torch.device("cpu"))
    (path, reason), into_train = setup.skipped
    assert path == str(garbage) and reason.startswith("unreadable (UnidentifiedImageError: cannot identify image")
    train = (data / "train").resolve()
    assert into_train == (str(link), f"linked file -> {train / 'c0' / '0.png'}: the folder {train}, listed apart")
    (item,) = result.left_out
    assert item.path == str(cut) and item.reason.startswith("unreadable (OSError: ")


def test_a_val_image_train_links_to_too_is_left_out_as_in_training(tmp_path: Path):
    """A store of images linked into both splits: evaluate.py scored a training image as val's (so did training's
    scan); it leaves it out, named in eval.json's "skipped", and reads train/ only where val links out of itself."""
    data = make_folder(tmp_path / "data", classes=3, per_class=2)
    store = make_folder(tmp_path / "store", classes=1, per_class=1, splits=("s",)) / "s" / "c0" / "0.png"
    (data / "train" / "c1" / "s.png").symlink_to(store)
    (link := data / "val" / "c2" / "s.png").symlink_to(store)
    save_safetensors(tmp_path / "named.safetensors", timm.create_model(PICO, num_classes=3).state_dict(),
                     weights_metadata(PICO, {"num_classes": 3}, ["c0", "c1", "c2"], PRE))  # fmt: skip
    why = f"the same file as {data / 'train' / 'c1' / 's.png'}, in the training split"
    with pytest.warns(UserWarning, match=f"skipping linked file {link} -> .*: {why}"):
        setup = prepare_evaluation(tmp_path / "named.safetensors", data, num_workers=0)
    assert setup.skipped == [(str(link), f"linked file -> {os.path.realpath(store)}: {why}")]
    assert len(setup.loader.dataset) == 6


def test_equal_logits_score_the_class_predict_ranks_first():
    """A fresh or zeroed head ties every class: top-1 counts the lower class, as predict.py's top_k ranks it
    (logits.topk gave class 8 of 10 on the CPU, so evaluate and predict disagreed on the same images)."""
    loader = [(torch.zeros(2, 3, 8, 8), torch.tensor([0, 8]), [])]
    head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))
    torch.nn.init.zeros_(head[1].weight)
    torch.nn.init.zeros_(head[1].bias)
    result = evaluate(head, loader, 10, StepSettings(torch.device("cpu")))
    assert result.top1 == 50.0
    assert result.confusion[0, 0] == 1 and result.confusion[8, 0] == 1


def _ranked() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """(a head of 8 classes, 16 images [16, 3, 4, 4], their targets): image i's target is the class the head ranks
    (i mod 8)-th for it, so 2 of the 16 are ranked first and 10 in the first five."""
    torch.manual_seed(0)
    head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 8))
    images = torch.randn(16, 3, 4, 4)
    with torch.no_grad():
        logits = head(images)
    return head, images, logits.argsort(1, descending=True)[torch.arange(16), torch.arange(16) % 8]


def test_top1_and_top5_count_the_targets_a_naive_ranking_counts():
    """8 classes, random logits, each target the class ranked (i mod 8)-th for image i, in two batches: top-1 counts
    the 2 of 16 ranked first, top-5 the 10 ranked in the first five (top-6 would count 12), as timm's accuracy does."""
    head, images, targets = _ranked()
    with torch.no_grad():
        logits = head(images)
    loader = [(images[:8], targets[:8], []), (images[8:], targets[8:], [])]
    result = evaluate(head, loader, 8, StepSettings(torch.device("cpu")))
    top1, top5 = timm.utils.accuracy(logits, targets, topk=(1, 5))
    assert result.k == 5 and [result.top1, result.topk] == pytest.approx([top1.item(), top5.item()])
    assert (result.top1, result.topk) == (12.5, 62.5)


def _evaluating_rank(rank: int, port: int, reports: list[Path]) -> None:
    """One of two processes (gloo): evaluates its shard of :func:`_ranked`'s images, rank 0 the first 11 (2 batches)
    and rank 1 the other 5, and reports the result."""
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    head, images, targets = _ranked()
    shard = [slice(0, 6), slice(6, 11)] if rank == 0 else [slice(11, 16)]
    loader = [(images[part], targets[part], []) for part in shard]
    result = evaluate(head, loader, 8, StepSettings(torch.device("cpu")), DistInfo(rank, 2))
    report_and_exit(reports, rank, json.dumps([result.loss, result.top1, result.topk, result.confusion.tolist()]))


def test_two_processes_score_their_shards_as_one_process_scores_them_all(tmp_path: Path):
    """Each process's sums and counts are all-reduced before dividing (a count left per process scored 2 of 11 as
    top-1 18.2 % on rank 0, not 2 of 16 = 12.5 %); uneven shards, as the last batch of a split leaves them."""
    reports = [tmp_path / f"rank{r}.txt" for r in range(2)]
    forked_pair(_evaluating_rank, (reports,), timeout=30)
    head, images, targets = _ranked()
    one = evaluate(head, [(images, targets, [])], 8, StepSettings(torch.device("cpu")))
    for report in reports:
        loss, top1, topk, confusion = json.loads(report.read_text())
        assert loss == pytest.approx(one.loss, rel=1e-6) and (top1, topk) == (one.top1, one.topk) == (12.5, 62.5)
        assert confusion == one.confusion.tolist()
