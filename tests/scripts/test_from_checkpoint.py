"""Every script from a run's checkpoint alone (2- and 3-class runs), predict.py, EMA selection, user errors."""

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import timm
import torch
from scriptkit import SCRIPTS, script_env
from torch._dynamo.utils import counters
from trainkit import make_folder, tiny_config, train

from swinlite.features import load_embeddings
from swinlite.io import read_metadata, read_state_dict, save_safetensors
from swinlite.weights import load_model, read_info, weights_metadata


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[int, Path]:
    """A 2-class run (learns its colours) and a 3-class one barely trained (val top-1 far from 0 and 100 %)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for classes, extra in ((2, {}), (3, {"optim.lr": 3e-5, "train.epochs": 1})):
        data = make_folder(root / f"data{classes}", classes=classes, per_class=6)
        (data / "val" / "c0" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")  # skipped by the scan
        train(tiny_config(data, root / f"run{classes}", **{"train.epochs": 2, **extra}))
        out[classes] = root / f"run{classes}"
    torch.set_num_threads(threads)
    return out


def _val_top1(run: Path) -> float:
    """The run's own val top-1 of best.safetensors (metrics.csv holds it rounded)."""
    return read_info(run / "best.safetensors").extra["val_top1"]


def _accuracy(csv_path: Path) -> tuple[list[dict[str, str]], float]:
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    return rows, 100 * sum(r["class"] == Path(r["path"]).parent.name for r in rows) / len(rows)


def test_train_writes_self_describing_weights(runs):
    info = read_info(runs[3] / "best.safetensors")
    assert (info.model, info.model_args, info.classes) == ("swinlite_pico_patch2_window4_32", {"num_classes": 3},
                                                           ["c0", "c1", "c2"])  # fmt: skip
    assert info.preprocessing == {
        "input_size": [3, 16, 16],
        "interpolation": "bicubic",
        "crop_pct": 1.0,
        "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225],
        "crop_mode": "center",
    }
    with open(runs[3] / "metrics.csv") as f:
        best = max(float(row["val_top1"]) for row in csv.DictReader(f))
    assert info.weights == "raw" and info.extra["val_top1"] == pytest.approx(best, abs=1e-3)
    umask = os.umask(0)
    os.umask(umask)
    assert (runs[3] / "best.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask  # 0644 under umask 022


def test_predict_and_evaluate_reproduce_the_run_top1(runs, load_script, tmp_path, capsys):
    run, data = runs[3], runs[3].parent / "data3"
    (tmp_path / "notes.txt").write_text("not an image")
    argv = ["--checkpoint", str(run / "best.safetensors"), "--topk", "5", "--output", str(tmp_path / "p.csv")]
    load_script("predict").main([*argv, "--no-progress", str(data / "val"), str(tmp_path / "notes.txt")])
    err = capsys.readouterr().err
    assert "writing the top-3" in err and f"warning: skipped {tmp_path / 'notes.txt'}" in err and "broken.png" in err
    rows, top1 = _accuracy(tmp_path / "p.csv")
    assert list(rows[0]) == ["path", "class", "prob", "class_2", "prob_2", "class_3", "prob_3"]
    assert len(rows) == 18 and all(float(r["prob"]) >= float(r["prob_2"]) >= float(r["prob_3"]) for r in rows)
    assert 0 < top1 < 100 and top1 == pytest.approx(_val_top1(run), abs=1e-9)  # the run's own evaluation

    load_script("evaluate").main(["--checkpoint", str(run / "best.safetensors"), "--data-dir", str(data),
                                  "--num-workers", "0", "--output-dir", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert "top-3" in out and "top-5" not in out
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["top1"] == pytest.approx(top1, abs=1e-9) and report["weights"] == "raw"


def test_an_image_that_does_not_decode_is_left_out_of_the_evaluation(runs, load_script, tmp_path):
    """A val image whose header reads (the scan passes) but whose pixels do not: the scores of the others, as if
    the folder held only those (not the next image counted twice in its place), and eval.json's ``skipped`` names it
    after the scan's skips, with loader workers too (their warnings never reach the main process)."""
    for folder in ("broken", "without"):
        shutil.copytree(runs[3].parent / "data3", tmp_path / folder)
    victim = sorted((tmp_path / "broken" / "val" / "c1").glob("*.png"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    (tmp_path / "without" / victim.relative_to(tmp_path / "broken")).unlink()

    def evaluate(folder: str, workers: int = 0) -> dict:
        argv = ["--checkpoint", str(runs[3] / "best.safetensors"), "--data-dir", str(tmp_path / folder),
                "--num-workers", str(workers), "--output-dir", str(tmp_path / f"{folder}_{workers}")]  # fmt: skip
        assert load_script("evaluate").main(argv) == 0
        report = json.loads((tmp_path / f"{folder}_{workers}" / "eval.json").read_text())
        root = tmp_path / folder  # paths relative to it, in the reasons too
        report["skipped"] = [(str(Path(s["path"]).relative_to(root)), s["reason"].replace(f"{root}/", ""))
                             for s in report["skipped"]]  # fmt: skip
        return report

    with pytest.warns(UserWarning, match=f"{victim} left out of the evaluation: unreadable"):
        broken = evaluate("broken")
    without = evaluate("without")
    assert [path for path, _ in without["skipped"]] == ["val/c0/broken.png"]  # the scan's skip, in each
    assert broken["skipped"][0] == without["skipped"][0] and len(broken["skipped"]) == 2
    path, reason = broken["skipped"][1]
    assert path == str(victim.relative_to(tmp_path / "broken")) and reason.startswith("unreadable")
    assert {**broken, "skipped": None, "data_dir": None} == {**without, "skipped": None, "data_dir": None}
    assert broken["images"] == 17 and evaluate("broken", workers=2) == broken
    # what was evaluated: they recorded neither the data folder nor the split nor --amp
    assert (broken["data_dir"], broken["split"], broken["amp"]) == (str(tmp_path / "broken"), "val", "none")


def test_an_evaluation_whose_every_image_fails_to_decode_is_an_error(runs, load_script, tmp_path):
    """It reported loss 0 and top-1 0 % from no image (exit 0; training kept its best weights by it), where detection
    and segmentation refuse."""
    shutil.copytree(runs[3].parent / "data3", tmp_path / "cut")
    for image in (tmp_path / "cut" / "val").rglob("*.png"):
        image.write_bytes(image.read_bytes()[:100])
    argv = ["--checkpoint", str(runs[3] / "best.safetensors"), "--data-dir", str(tmp_path / "cut"),
            "--output-dir", str(tmp_path / "out")]  # fmt: skip
    with pytest.warns(UserWarning), pytest.raises(ValueError, match=r"no val image could be scored: all 18 were"):
        load_script("evaluate").main(argv)
    assert not (tmp_path / "out" / "eval.json").exists()


def test_predict_compiled_writes_the_eager_csv(runs, load_script, tmp_path, capsys):
    """--compile, batches of 4 of 19 files (broken.png left out of one, last one of 3): padded, equal to eager."""
    data, info = runs[3].parent / "data3", read_info(runs[3] / "best.safetensors")
    args = {"num_classes": 3, "depths": [1], "num_heads": [1]}  # one block (a shifted one compiled: test_optimize.py)
    torch.manual_seed(1)  # a seed whose c0 probabilities span near 0 to near 1
    model = timm.create_model(info.model, **args)
    with torch.no_grad():
        model.head.fc.weight.mul_(300)  # logits far apart: probabilities from near 0 to near 1
    ckpt = tmp_path / "one_stage.safetensors"
    save_safetensors(ckpt, model.state_dict(), weights_metadata(info.model, args, info.classes, info.preprocessing))
    argv = ["--checkpoint", str(ckpt), "--topk", "3", "--batch-size", "4", "--no-progress", str(data / "val")]
    probs = {}
    for flags in ([], ["--compile"]):
        load_script("predict").main([*argv, *flags, "--output", str(tmp_path / "p.csv")])
        assert ("--compile: built for batches of 4 in " in capsys.readouterr().err) == bool(flags)
        with open(tmp_path / "p.csv") as f:
            probs[bool(flags)] = [{r[f"class{k}"]: float(r[f"prob{k}"]) for k in ("", "_2", "_3")} | {"path": r["path"]}
                                  for r in csv.DictReader(f)]  # fmt: skip
    assert len(probs[True]) == len(probs[False]) == 18
    assert min(p["c0"] for p in probs[False]) < 0.1 < 0.9 < max(p["c0"] for p in probs[False])
    for eager, compiled in zip(probs[False], probs[True], strict=True):
        assert compiled.pop("path") == eager.pop("path")
        assert compiled == pytest.approx(eager, abs=1e-4)


def _counted_compile(module, **kwargs):
    """torch.compile's stand-in: the module itself, each call counted as dynamo counts a compiled graph."""

    def run(*args):
        counters["stats"]["unique_graphs"] += 1
        return module(*args)

    return run


def test_evaluate_and_extract_compiled_report_it_and_write_what_eager_writes(
    runs, load_script, tmp_path, capsys, monkeypatch
):
    """--compile of evaluate.py and extract_features.py goes through FixedBatch (batches of 4 of 6 images: the last
    padded) and says what serves and how long it took; torch.compile is a stand-in here (the predict test above and
    tests/test_optimize.py compile for real)."""
    ckpt, data = str(runs[2] / "best.safetensors"), runs[2].parent / "data2"
    monkeypatch.setattr(torch, "compile", _counted_compile)
    monkeypatch.setattr("swinlite.optimize.fastest_now", lambda candidates, *args, **kwargs: "compiled")
    results = {}
    for flags in ([], ["--compile"]):
        out = tmp_path / f"out{len(flags)}"
        load_script("evaluate").main(["--checkpoint", ckpt, "--data-dir", str(data), "--num-workers", "0",
                                      "--batch-size", "4", "--output-dir", str(out), *flags])  # fmt: skip
        extract = ["--checkpoint", ckpt, "--input", str(data / "val"), "--output", str(out / "feats")]
        load_script("extract_features").main([*extract, "--batch-size", "4", "--no-progress", *flags])
        err = capsys.readouterr().err
        assert err.count("--compile: built for batches of 4 in ") == (2 if flags else 0)
        assert ("the compiled graph serves" in err) == bool(flags)
        embeddings = load_embeddings(out / "feats" / "embeddings.safetensors")[0]
        report = json.loads((out / "eval.json").read_text())
        assert (report["amp"], report["compile"]) == ("none", bool(flags))  # how it ran: it recorded --amp alone
        results[bool(flags)] = report["per_class_top1"], embeddings
    assert results[True][0] == results[False][0]
    torch.testing.assert_close(results[True][1], results[False][1])


def test_ema_weights_are_read_from_the_file_or_selected(runs, load_script, tmp_path, capsys):
    run, data = runs[3], runs[3].parent / "data3"
    info = read_info(run / "best.safetensors")
    state = read_state_dict(run / "best.safetensors")
    state["head.fc.bias"] = state["head.fc.bias"] + torch.tensor([0.0, 0.0, 5.0])  # EMA weights that differ
    meta = {"task": info.task, "model": info.model, "model_args": info.model_args, "classes": info.classes}
    save_safetensors(
        run / "best_ema.safetensors", state, meta | {"preprocessing": info.preprocessing, "weights": "ema"}
    )
    csv_path = tmp_path / "ema.csv"
    load_script("predict").main(["--checkpoint", str(run / "best.safetensors"), "--ema", "--output", str(csv_path),
                                 "--no-progress", str(data / "val")])  # fmt: skip
    assert f"EMA weights: {run / 'best_ema.safetensors'}" in capsys.readouterr().err
    rows, top1 = _accuracy(csv_path)
    assert {r["class"] for r in rows} == {"c2"} and top1 == pytest.approx(100 / 3)
    load_script("evaluate").main(["--checkpoint", str(run / "best.safetensors"), "--ema", "--data-dir", str(data),
                                  "--num-workers", "0", "--output-dir", str(tmp_path)])  # fmt: skip
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["top1"] == pytest.approx(top1) and report["checkpoint"] == str(run / "best_ema.safetensors")
    assert report["weights"] == "ema"  # the kind evaluated, which eval.json did not record
    feats = ["--input", str(data / "val" / "c0"), "--output", str(tmp_path / "feats"), "--no-progress"]
    load_script("extract_features").main(["--checkpoint", str(run / "best.safetensors"), "--ema", *feats])
    ema_sha256 = hashlib.sha256((run / "best_ema.safetensors").read_bytes()).hexdigest()
    assert json.loads((tmp_path / "feats" / "settings.json").read_text())["checkpoint_sha256"] == ema_sha256
    with pytest.raises(ValueError, match="no best_ema.safetensors beside it"):
        load_script("evaluate").main(["--checkpoint", str(runs[2] / "best.safetensors"), "--ema",
                                      "--data-dir", str(data)])  # fmt: skip
    # timm's train.py checkpoint holds both: --ema takes its EMA weights (it said the file held raw weights only)
    torch.save(
        {"state_dict": read_state_dict(run / "best.safetensors"), "state_dict_ema": state}, tmp_path / "t.pth.tar"
    )
    timm_csv = tmp_path / "timm_ema.csv"
    with pytest.warns(UserWarning, match="holds EMA weights"):
        load_script("predict").main(["--checkpoint", str(tmp_path / "t.pth.tar"), "--model", info.model, "--ema",
                                     "--output", str(timm_csv), "--no-progress", str(data / "val")])  # fmt: skip
    assert {r["class"] for r in _accuracy(timm_csv)[0]} == {"2"}  # the EMA head's (no names in a torch file)
    with pytest.warns(UserWarning, match="holds EMA weights"):  # eval.json named the file alone: the same either way
        load_script("evaluate").main(["--checkpoint", str(tmp_path / "t.pth.tar"), "--model", info.model, "--ema",
                                      "--data-dir", str(data), "--num-workers", "0", "--output-dir", str(tmp_path),
                                      "--overwrite"])  # fmt: skip
    assert json.loads((tmp_path / "eval.json").read_text())["weights"] == "ema"


def test_export_onnx_from_the_checkpoint_alone_quantized(runs, load_script, tmp_path, capsys):
    """The script's --fixed-size and --quantize paths (fp32 export at one size, dynamic INT8, check, the fp32 file
    removed) from the checkpoint alone: the 2-class run's file as train.py wrote it, its model one stage of one block
    (a short export; the fixed-size graph of the whole pico model against eager: tests/scripts/test_export_onnx.py);
    its any-size fp32 path exports the session's onnx_classifier (conftest.py)."""
    import onnxruntime as ort

    from swinlite.export import onnx_max_abs_error

    meta = read_metadata(runs[2] / "best.safetensors")
    meta["model_args"] |= {"depths": [1], "num_heads": [1]}
    torch.manual_seed(0)
    checkpoint = tmp_path / "run" / "best.safetensors"
    checkpoint.parent.mkdir()
    save_safetensors(checkpoint, timm.create_model(meta["model"], **meta["model_args"]).state_dict(), meta)
    path = tmp_path / "out" / "m.onnx"
    path.parent.mkdir()
    argv = ["--checkpoint", str(checkpoint), "--output", str(path), "--quantize", "dynamic"]
    error = load_script("export_onnx").main([*argv, "--fixed-size", "--size", "16", "16"])
    printed = capsys.readouterr().out
    assert "H=16, W=16" in printed and printed.count("ONNX Runtime vs PyTorch at batch") == 1
    assert 0 < error < 0.5  # INT8: close, not equal
    assert [p.name for p in path.parent.iterdir()] == ["m.onnx"]  # no fp32 file left beside it
    props = {p.key: json.loads(p.value) for p in onnx.load(path).metadata_props}
    assert props["classes"] == ["c0", "c1"] and props["weights"] == "raw" and props["quantization"] == "dynamic"
    assert props["preprocessing"]["input_size"] == [3, 16, 16] and props["preprocessing"]["crop_pct"] == 1.0
    assert props["input_sizes"] == {"height": [16, 16], "width": [16, 16]}
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.run(None, {"images": torch.randn(1, 3, 16, 16).numpy()})[0].shape == (1, 2)  # the run's classes
    broken = load_model(checkpoint)
    with torch.no_grad():
        broken.head.fc.bias[0] = float("nan")
    with pytest.raises(ValueError, match="PyTorch outputs hold NaN or inf"):  # NaN once passed `error > tol`
        onnx_max_abs_error(path, broken, torch.randn(2, 3, 16, 16))


def test_extract_and_visualize_from_the_checkpoint_alone(runs, load_script, tmp_path, capsys):
    ckpt, images = str(runs[2] / "best.safetensors"), str(runs[2].parent / "data2" / "val" / "c1")
    out = tmp_path / "feats"
    extract = load_script("extract_features").main
    extract(["--checkpoint", ckpt, "--input", images, "--output", str(out), "--no-progress"])
    settings = json.loads((out / "settings.json").read_text())
    assert settings["model"] == "swinlite_pico_patch2_window4_32" and settings["input_size"] == [16, 16]
    assert len(settings["checkpoint_sha256"]) == 64 and settings["dtype"] == "float32"
    (out / "features" / ".0.png.safetensors.tmp123").write_bytes(b"half")  # left by a killed run
    extract(["--checkpoint", ckpt, "--input", images, "--output", str(out), "--no-progress"])
    assert "written 0, skipped (already whole) 6" in capsys.readouterr().out
    assert not list(out.rglob(".*.tmp*"))
    for changed, what in [(["--size", "32", "32"], "input_size"), (["--dtype", "float16"], "dtype")]:
        with pytest.raises(ValueError, match=f"holds features made with other settings \\({what}"):
            extract(["--checkpoint", ckpt, "--input", images, "--output", str(out), *changed])
    other = str(runs[3] / "best.safetensors")
    with pytest.raises(ValueError, match="other settings \\(checkpoint_sha256"):
        extract(["--checkpoint", other, "--input", images, "--output", str(out)])
    paths = load_script("visualize").main(["--checkpoint", ckpt, "--output", str(tmp_path / "plots")])
    assert [p.name for p in paths] == [f"bias_stage{i}.png" for i in range(4)]


def test_contradicting_flags_are_errors(runs, load_script, tmp_path):
    ckpt, data = str(runs[2] / "best.safetensors"), str(runs[2].parent / "data2")
    with pytest.raises(ValueError, match="--model swinlite_nano_patch2_window4_64 contradicts"):
        load_script("evaluate").main(
            ["--checkpoint", ckpt, "--data-dir", data, "--model", "swinlite_nano_patch2_window4_64"]
        )
    with pytest.raises(ValueError, match="--img-size 32 contradicts"):
        load_script("evaluate").main(["--checkpoint", ckpt, "--data-dir", data, "--img-size", "32"])
    with pytest.raises(ValueError, match="--num-classes 10 contradicts"):
        load_script("export_onnx").main(["--checkpoint", ckpt, "--num-classes", "10", "--output", str(tmp_path / "x")])


def _one_line_exit_2(err: str, message: str) -> None:
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


def test_user_errors_are_one_line_and_exit_2(runs, load_script, tmp_path, capsys):
    """Each error as the scripts report it (``_cli.run`` around ``main``); two also from a fresh process."""
    import _cli

    (tmp_path / "empty.safetensors").write_bytes(b"")
    (tmp_path / "empty_dir").mkdir()
    ckpt = str(runs[2] / "best.safetensors")
    cases = [
        ("predict", ["x.png"], "the following arguments are required: --output"),
        ("predict", ["--model", "swinlite_tiny_patch4_windw7_224", "--output", "p.csv", ckpt],
         "did you mean swinlite_tiny_patch4_window7_224?"),
        ("evaluate", ["--checkpoint", str(tmp_path / "empty.safetensors"), "--data-dir", str(tmp_path)],
         "is empty (0 bytes)"),
        ("evaluate", ["--checkpoint", ckpt, "--data-dir", str(tmp_path), "--device", "cuda:7"],
         "--device cuda:7: CUDA is not available"),
        ("export_onnx", ["--checkpoint", str(tmp_path / "nope.pth"), "--output", "m.onnx"], "does not exist"),
        ("extract_features", ["--checkpoint", ckpt, "--input", str(tmp_path / "empty_dir"), "--output", "o"],
         "no image files"),
        ("visualize", ["--output", "o"], "pass --checkpoint"),
        ("convert_checkpoint", [str(tmp_path / "empty.safetensors"), "out.safetensors"], "is empty (0 bytes)"),
    ]  # fmt: skip
    for name, argv, message in cases:
        main = load_script(name).main
        with pytest.raises(SystemExit) as exit_info:
            _cli.run(main, argv)
        assert exit_info.value.code == 2, (name, argv)
        _one_line_exit_2(capsys.readouterr().err, message)
    fresh = [cases[0], cases[2]]  # an argparse error, a broken file
    env = script_env() | {"CUDA_VISIBLE_DEVICES": ""}
    procs = [
        subprocess.Popen([sys.executable, str(SCRIPTS / f"{name}.py"), *argv], stderr=subprocess.PIPE, text=True,
                         stdout=subprocess.DEVNULL, env=env, cwd=tmp_path)
        for name, argv, _ in fresh
    ]  # fmt: skip
    for proc, (_, _, message) in zip(procs, fresh, strict=True):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2
        _one_line_exit_2(err, message)


def test_predict_with_a_timm_model_name_uses_imagenet_names(runs, load_script, tmp_path):
    import timm
    from timm.data import ImageNetInfo

    from swinlite.weights import pretrained_model

    torch.manual_seed(0)
    torch.save(timm.create_model("swinlite_pico_patch2_window4_32", num_classes=1000).state_dict(), tmp_path / "in.pth")
    images = str(runs[2].parent / "data2" / "val" / "c1")
    argv = ["--model", "swinlite_pico_patch2_window4_32", "--checkpoint", str(tmp_path / "in.pth"), "--topk", "2"]
    load_script("predict").main([*argv, "--output", str(tmp_path / "p.csv"), "--no-progress", images])
    rows, _ = _accuracy(tmp_path / "p.csv")
    names = set(ImageNetInfo().label_descriptions())
    assert len(rows) == 6 and all(r["class"] in names and r["class_2"] in names for r in rows)
    with pytest.raises(ValueError, match="timm publishes no pretrained weights for swinlite_pico_patch2_window4_32"):
        pretrained_model("swinlite_pico_patch2_window4_32")  # none published: one clear error, not a traceback
