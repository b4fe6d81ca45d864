"""Bad input to the inference scripts: one ``error:`` line and exit 2, nothing lost; or, where the input is odd but
valid, a correct result. Each script runs in-process through ``_cli.run``, as ``python scripts/x.py`` runs it."""

import csv
import json
import math
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import _cli
import numpy as np
import pytest
import timm
import torch
from pico import PICO
from PIL import Image
from safetensors.torch import save_file
from scriptkit import SCRIPTS

from swinlite.weights import weights_metadata

PRE = {"input_size": [3, 16, 16], "interpolation": "bicubic", "mean": [0.5] * 3, "std": [0.25] * 3}
PRE |= {"crop_pct": 1.0, "crop_mode": "center"}


def _save(path: Path, state: dict[str, torch.Tensor], meta: dict[str, object], raw: dict[str, str] = {}) -> Path:  # noqa: B006
    """A safetensors file whose metadata holds ``meta`` JSON-encoded, and ``raw`` strings as they are."""
    save_file({k: v.contiguous() for k, v in state.items()}, path, {k: json.dumps(v) for k, v in meta.items()} | raw)
    return path


@pytest.fixture(scope="module")
def f(tmp_path_factory) -> SimpleNamespace:
    """A 2-class pico checkpoint (self-describing), a val folder of 16 px images, and broken variants of both."""
    root = tmp_path_factory.mktemp("bad_input")
    torch.manual_seed(0)
    state = timm.create_model(PICO, num_classes=2).state_dict()
    meta = weights_metadata(PICO, {"num_classes": 2}, ["a", "b"], PRE)
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        (root / "data" / "val" / name).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(
                root / "data" / "val" / name / f"{i}.png"
            )
    ns = SimpleNamespace(root=root, data=root / "data", images=root / "data" / "val", meta=meta, state=state)
    ns.ckpt = _save(root / "best.safetensors", state, meta)
    whole = ns.ckpt.read_bytes()
    (root / "truncated.safetensors").write_bytes(whole[: len(whole) // 2])
    torch.save(state, root / "raw.pth")
    save_file({k: v for k, v in state.items() if not k.startswith("head.fc.")}, root / "headless.safetensors")
    (root / "truncated.pth").write_bytes((root / "raw.pth").read_bytes()[:3000])
    nan = dict(state) | {
        "layers.1.blocks.0.mlp.fc1.weight": torch.full_like(state["layers.1.blocks.0.mlp.fc1.weight"], torch.nan)
    }
    _save(root / "nan.safetensors", nan, meta)
    ints = dict(state) | {"head.fc.weight": state["head.fc.weight"].long()}
    _save(root / "int64.safetensors", ints, meta)
    _save(root / "classes_3.safetensors", state, meta | {"classes": ["a", "b", "c"], "model_args": {"num_classes": 3}})
    _save(root / "classes_len.safetensors", state, meta | {"classes": ["a", "b", "c"]})
    _save(root / "classes_ac.safetensors", state, meta | {"classes": ["a", "c"]})
    _save(
        root / "classes_str.safetensors", state, {k: v for k, v in meta.items() if k != "classes"}, {"classes": "a,b"}
    )
    _save(root / "classes_int.safetensors", state, meta | {"classes": [0, 1]})
    _save(root / "crop0.safetensors", state, meta | {"preprocessing": PRE | {"crop_pct": 0}})
    _save(root / "unknown_model.safetensors", state, meta | {"model": "swinlite_pico_patch2_windw4_32"})
    _save(root / "bad_args.safetensors", state, meta | {"model_args": {"num_classes": 2, "windw_size": 4}})
    detection = {"task": "detection", "classes": ["a"], "category_ids": [1], "detector": {"kind": "faster_rcnn"}}
    _save(root / "detector.safetensors", {"backbone.body.x": torch.zeros(1)}, detection)
    (root / "a_file").write_text("not a folder")
    (root / "v").mkdir()  # visualize.py's folder: a bias_stage0.png would refuse the evaluations there
    Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(root / "v" / "bias_stage0.png")
    os.symlink(ns.ckpt, root / "link.csv")
    (root / "folder.csv").mkdir()
    return ns


def _run(load_script, capsys, name: str, argv: list[str]) -> tuple[int, str]:
    main = load_script(name).main
    with pytest.raises(SystemExit) as exit_info:
        _cli.run(main, argv)
    return exit_info.value.code, capsys.readouterr().err


# (script, arguments with {r}: the fixture's folder, {ckpt}, {data}, {images}; words the error line must hold)
CASES = {
    # a CSV written under any name: preds.json held CSV (the checkpoint and an image: refused by their names too)
    "predict_output_json": ("predict", "--checkpoint {ckpt} --output {r}/p.json {images}",
                            "--output must end in .csv (predict.py writes CSV), got"),
    "predict_output_is_the_checkpoint": ("predict", "--checkpoint {ckpt} --output {ckpt} {images}", "end in .csv"),
    "predict_output_is_a_link_to_it": (
        "predict", "--checkpoint {ckpt} --output {r}/link.csv {images}", "would replace the input"),
    "predict_output_replaces_an_image": ("predict", "--checkpoint {ckpt} --output {images}/a/0.png {images}",
                                         "end in .csv (predict.py writes CSV), got "),
    "predict_output_in_the_image_folder": ("predict", "--checkpoint {ckpt} --output {images}/p.csv {images}",
                                           "lies inside the input folder"),
    "predict_output_is_a_folder": ("predict", "--checkpoint {ckpt} --output {r}/folder.csv {images}", "is a folder"),
    "predict_output_under_a_file": ("predict", "--checkpoint {ckpt} --output {r}/a_file/p.csv {images}", "is a file"),
    "export_output_is_the_checkpoint": ("export_onnx", "--checkpoint {ckpt} --output {ckpt}", "would replace"),
    "export_max_size_0": ("export_onnx", "--checkpoint {ckpt} --output {r}/m.onnx --max-size 0",  # read as 2048
                          "--max-size must be positive, got 0"),
    "export_min_size_above_the_default_max": (  # failed as the export began: "got 3000..2048"
        "export_onnx", "--checkpoint {ckpt} --output {r}/m.onnx --min-size 3000",
        "--min-size 3000 is not below the largest size this export serves by default (2048, --max-size's default): "
        "pass a --max-size above it"),
    "convert_output_is_the_input": ("convert_checkpoint", "{ckpt} {ckpt}", "would replace the input"),
    "extract_output_is_a_file": ("extract_features", "--checkpoint {ckpt} --input {images} --output {r}/a_file",
                                 "is a file; expected a folder"),
    "extract_output_in_the_image_folder": ("extract_features", "--checkpoint {ckpt} --input {images} --output "
                                           "{images}/feats", "lies inside the input folder"),
    "extract_size_below_one_patch": ("extract_features", "--checkpoint {ckpt} --input {images} --output {r}/o "
                                     "--size 1 1", f"--size 1 1 is smaller than one patch of {PICO}: expected H >= 2"),
    "visualize_output_is_a_file": ("visualize", "--checkpoint {ckpt} --output {r}/a_file", "expected a folder"),
    "visualize_writes_over_its_image": ("visualize", "--checkpoint {ckpt} --image {r}/v/bias_stage0.png --output {r}/v",
                                        "would replace the input"),
    "evaluate_output_dir_is_a_file": ("evaluate", "--checkpoint {ckpt} --data-dir {data} --output-dir {r}/a_file",
                                      "is a file; expected a folder"),
    "evaluate_output_dir_in_the_data": ("evaluate", "--checkpoint {ckpt} --data-dir {data} --output-dir {images}/a",
                                        "inside the input folder"),
    "predict_device_gpu0": ("predict", "--checkpoint {ckpt} --device gpu0 --output {r}/p.csv {images}",
                            "'gpu0' is not a device; valid here: auto, cpu"),
    # --device "$DEV" with DEV unset ran on the auto device, where evaluate.py refused it
    "predict_device_empty": ("predict", "--checkpoint {ckpt} --device '' --output {r}/p.csv {images}",
                             "--device '' is not a device; valid here: auto, cpu"),
    "evaluate_device_gpu0": ("evaluate", "--checkpoint {ckpt} --data-dir {data} --device gpu0", "valid here"),
    "extract_device_gpu0": ("extract_features", "--checkpoint {ckpt} --input {images} --output {r}/o --device gpu0",
                            "valid here"),
    "truncated_safetensors": ("predict", "--checkpoint {r}/truncated.safetensors --output {r}/p.csv {images}",
                              "truncated.safetensors' is a damaged (truncated?) safetensors file"),
    "truncated_torch_file": ("export_onnx", f"--model {PICO} --checkpoint {{r}}/truncated.pth --output {{r}}/m.onnx",
                             "truncated.pth' is not a weights file"),
    "nan_weights": ("predict", "--checkpoint {r}/nan.safetensors --output {r}/p.csv {images}",
                    "nan.safetensors holds NaN or infinite values in 1 weights (a diverged run?): layers.1.blocks.0"),
    "int64_weights": ("evaluate", "--checkpoint {r}/int64.safetensors --data-dir {data} --num-workers 0",
                      "not floating point: head.fc.weight (torch.int64)"),
    "classes_of_another_run": ("evaluate", "--checkpoint {r}/classes_3.safetensors --data-dir {data}",
                               "classes_3.safetensors does not fit"),
    "val_class_the_checkpoint_lacks": ("evaluate", "--checkpoint {r}/classes_ac.safetensors --data-dir {data}",
                                       "classes_ac.safetensors does not have: b"),
    "classes_of_wrong_length": ("predict", "--checkpoint {r}/classes_len.safetensors --output {r}/p.csv {images}",
                                "names 3 classes for a classifier of 2 outputs"),
    "classes_not_json": ("predict", "--checkpoint {r}/classes_str.safetensors --output {r}/p.csv {images}",
                         "classes must be a JSON list of names, got the string 'a,b'"),
    "classes_not_strings": ("export_onnx", "--checkpoint {r}/classes_int.safetensors --output {r}/m.onnx",
                            "classes must be a non-empty JSON list of strings"),
    "crop_pct_0": ("predict", "--checkpoint {r}/crop0.safetensors --output {r}/p.csv {images}",
                   "crop0.safetensors: preprocessing crop_pct must be a number in (0, 1]"),
    "unknown_model_in_metadata": ("visualize", "--checkpoint {r}/unknown_model.safetensors --output {r}/plots",
                                  "unknown_model.safetensors records unknown timm model"),
    "bad_model_args_in_metadata": ("extract_features", "--checkpoint {r}/bad_args.safetensors --input {images} "
                                   "--output {r}/o2", f"bad_args.safetensors: {PICO} cannot be built"),
    # weights without a classifier: predict.py wrote a CSV of paths without labels, export_onnx.py "logits" that
    # were the pooled features, with classes []
    "headless_to_predict": ("predict", f"--model {PICO} --checkpoint {{r}}/headless.safetensors --output {{r}}/p.csv "
                            "{images}", "has no classifier (num_classes=0: its weights hold none)"),
    "headless_to_export": ("export_onnx", f"--model {PICO} --checkpoint {{r}}/headless.safetensors --output "
                           "{r}/m.onnx", "no classes to label; for its features use scripts/extract_features.py"),
    "detection_checkpoint_to_predict": ("predict", "--checkpoint {r}/detector.safetensors --output {r}/p.csv {images}",
                                        "is a detection checkpoint, not a classifier's; use scripts/detect.py"),
    # '' is an empty argument (--output-dir "$OUT", OUT unset): the current folder before, as for --output-dir .
    "evaluate_output_dir_empty": ("evaluate", "--checkpoint {ckpt} --data-dir {data} --output-dir ''",
                                  "argument --output-dir: empty; expected a folder for the outputs"),
    "predict_image_path_empty": ("predict", "--checkpoint {ckpt} --output {r}/p.csv ''",
                                 "argument PATH: empty; expected an image or a folder of images"),
    "convert_output_empty": ("convert_checkpoint", "{ckpt} ''", "argument output: empty; expected a .safetensors file"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_error_line_and_exit_2(f, load_script, capsys, case):
    name, argv, message = CASES[case]
    before = {p: p.read_bytes() for p in f.root.rglob("*") if p.is_file() and not p.is_symlink()}
    words = {"r": f.root, "ckpt": f.ckpt, "data": f.data, "images": f.images}
    code, err = _run(load_script, capsys, name, ["" if a == "''" else a for a in argv.format(**words).split()])
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err and message in err, err
    after = {p: p.read_bytes() for p in f.root.rglob("*") if p.is_file() and not p.is_symlink()}
    assert after == before  # nothing written, nothing replaced


# Every script's path options as --option=~/NAME, where the shell leaves the ~ (after a =; a quoted argument too)
TILDE = {
    "evaluate": ["--checkpoint=~/c", "--data-dir=~/d", "--output-dir=~/o"],
    "evaluate_detection": ["--checkpoint=~/c", "--ann=~/a", "--images=~/i", "--output-dir=~/o"],
    "evaluate_segmentation": ["--checkpoint=~/c", "--images=~/i", "--masks=~/m", "--output-dir=~/o"],
    "predict": ["--onnx=~/n", "--classes=~/k", "--output=~/o.csv", "~/i"],
    "detect": ["--checkpoint=~/c", "--input", "~/i", "--output-dir=~/o"],
    "segment": ["--onnx=~/n", "--input", "~/i", "--output-dir=~/o"],
    "extract_features": ["--checkpoint=~/c", "--input=~/i", "--output=~/o"],
    "visualize": ["--checkpoint=~/c", "--image=~/i", "--output=~/o"],
    "export_onnx": ["--checkpoint=~/c", "--output=~/o"],
    "convert_checkpoint": ["~/c", "~/o.safetensors"],
    "benchmark": ["--json=~/o"],
    **{
        script: ["--config=~/c", "--data-dir=~/d", "--output-dir=~/o"]
        for script in ("train", "train_detection", "train_segmentation")
    },
}


@pytest.mark.parametrize("script", TILDE)
def test_a_leading_tilde_is_the_home_folder(script, load_script, monkeypatch, tmp_path):
    """``--output-dir=~/x`` made ./~/x/ (a later ``rm -r ~...`` to clean it up is dangerous), ``train.py
    --config=~/c.yaml`` said the file does not exist; an empty path is refused (CASES)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "i").touch()  # visualize.py's --image must be a file
    args = vars(load_script(script).parse_args(TILDE[script]))
    values = [v for value in args.values() for v in (value if isinstance(value, list) else [value])]
    names = sorted(argument.split("~/")[1] for argument in TILDE[script] if "~/" in argument)
    assert sorted(v for v in values if isinstance(v, Path)) == [tmp_path / name for name in names]


def test_pretrained_weights_behind_an_unreachable_hub_fail_fast(load_script, capsys, monkeypatch, tmp_path):
    """No HF_HUB_OFFLINE, no network, nothing cached: one line naming the repo and the script's way, in seconds
    (huggingface_hub's retries took about a minute)."""
    import time

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    start = time.monotonic()
    argv = ["--model", "swinlite_tiny_patch4_window7_224", "--output", str(tmp_path / "p.csv"), str(tmp_path / "x.png")]
    Image.new("RGB", (8, 8)).save(tmp_path / "x.png")
    code, err = _run(load_script, capsys, "predict", argv)
    assert time.monotonic() - start < 20
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert (
        "timm/swin_tiny_patch4_window7_224.ms_in1k" in err and "--checkpoint FILE" in err and "HF_HUB_OFFLINE=1" in err
    )


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as fh:  # valid UTF-8 for any reader
        return list(csv.DictReader(fh))


def test_non_utf8_file_names_are_written_escaped(f, load_script, tmp_path, capsys):
    """A file name that is not UTF-8 once failed the CSV write after every prediction was computed."""
    folder = tmp_path / "photos"
    folder.mkdir()
    odd = os.fsdecode(b"caf\xe9.png")  # Latin-1 bytes: not UTF-8
    Image.fromarray(np.full((16, 16, 3), 120, np.uint8)).save(folder / odd)
    Image.fromarray(np.full((16, 16, 3), 30, np.uint8)).save(folder / "plain.png")
    (folder / os.fsdecode(b"broken\xff.png")).write_bytes(b"not an image")
    load_script("predict").main(["--checkpoint", str(f.ckpt), "--output", str(tmp_path / "p.csv"), "--no-progress",
                                 str(folder)])  # fmt: skip
    rows = _rows(tmp_path / "p.csv")
    assert [r["path"] for r in rows] == [str(folder / "caf\\xe9.png"), str(folder / "plain.png")]
    assert "broken\\xff.png" in capsys.readouterr().err
    out = tmp_path / "feats"
    load_script("extract_features").main(["--checkpoint", str(f.ckpt), "--input", str(folder), "--output", str(out),
                                          "--no-progress"])  # fmt: skip
    assert (out / "failures.txt").read_text(encoding="utf-8").startswith(str(folder / "broken\\xff.png"))
    assert (out / "features" / "caf\\xe9.png.safetensors").is_file()  # a UTF-8 name, as safetensors needs


def test_names_that_printed_alike_are_written_apart(f, load_script, tmp_path, capsys):
    """The bytes x, 0xff, .png and the name x\\xff.png (a backslash in it) were both written .../x\\xff.png: in
    predict.py's CSV, and in the skip warnings and extract_features.py's failures.txt for undecodable ones. A backslash
    is now escaped as \\x5c (the rule of feature file names); other names are kept."""
    folder = tmp_path / "photos"
    folder.mkdir()
    for value, name in enumerate([os.fsdecode(b"x\xff.png"), "x\\xff.png", "plain.png"]):
        Image.fromarray(np.full((16, 16, 3), 60 * value, np.uint8)).save(folder / name)
    for name in (os.fsdecode(b"y\xff.png"), "y\\xff.png"):
        (folder / name).write_bytes(b"not an image")
    load_script("predict").main(["--checkpoint", str(f.ckpt), "--output", str(tmp_path / "p.csv"), "--no-progress",
                                 str(folder)])  # fmt: skip
    printed = [str(folder / name) for name in ("plain.png", "x\\x5cxff.png", "x\\xff.png")]
    assert sorted(r["path"] for r in _rows(tmp_path / "p.csv")) == printed  # three rows, three paths
    err = capsys.readouterr().err
    assert f"{folder / 'y'}\\xff.png" in err and f"{folder / 'y'}\\x5cxff.png" in err
    out = tmp_path / "feats"
    load_script("extract_features").main(["--checkpoint", str(f.ckpt), "--input", str(folder), "--output", str(out),
                                          "--no-progress"])  # fmt: skip
    failed = (out / "failures.txt").read_text(encoding="utf-8").splitlines()
    assert sorted(line.split("\t")[0] for line in failed) == [str(folder / "y\\x5cxff.png"), str(folder / "y\\xff.png")]


def test_images_of_1x4000_and_4000x1(f, load_script, tmp_path, capsys, monkeypatch):
    """Predicted; an image whose centre-crop resize would exceed the pixel budget (1x1200000: over 300 M pixels
    once its shorter side is 16 or more) is skipped, named with the reason, instead of taking all the memory. (The
    bias maps visualize.py draws besides the image's features do not depend on the image: a stand-in here.)"""
    import swinlite.visualize

    monkeypatch.setattr(swinlite.visualize, "bias_pngs", lambda model: {"bias_stage0.png": b"not drawn"})
    folder = tmp_path / "images"
    folder.mkdir()
    for name, shape in (("wide.png", (1, 4000, 3)), ("tall.png", (4000, 1, 3)), ("needle.png", (1, 1_200_000, 3))):
        Image.fromarray(np.random.default_rng(0).integers(0, 255, shape, dtype=np.uint8)).save(folder / name)
    load_script("predict").main(["--checkpoint", str(f.ckpt), "--output", str(tmp_path / "p.csv"), "--no-progress",
                                 *(str(folder / n) for n in ("wide.png", "tall.png", "needle.png"))])  # fmt: skip
    rows = _rows(tmp_path / "p.csv")
    assert [Path(r["path"]).name for r in rows] == ["wide.png", "tall.png"]
    assert "needle.png: a 1x1200000 (HxW) image is too elongated" in capsys.readouterr().err
    assert all(math.isfinite(float(r["prob"])) for r in rows)
    load_script("extract_features").main(["--checkpoint", str(f.ckpt), "--input", str(folder), "--output",
                                          str(tmp_path / "feats"), "--no-progress"])  # fmt: skip
    assert (tmp_path / "feats" / "features" / "wide.png.safetensors").is_file()
    paths = load_script("visualize").main(["--checkpoint", str(f.ckpt), "--image", str(folder / "tall.png"),
                                           "--output", str(tmp_path / "plots")])  # fmt: skip
    assert paths[-1].name == "features.png"


def test_evaluate_skips_and_names_a_val_image_too_elongated_for_its_resize(f, load_script, tmp_path, capsys):
    """Found by the scan before any image is decoded, instead of a resize taking all the memory in a worker."""
    shutil.copytree(f.data, tmp_path / "data")
    needle = tmp_path / "data" / "val" / "a" / "needle.png"
    Image.fromarray(np.zeros((1, 1_200_000, 3), dtype=np.uint8)).save(needle)
    with pytest.warns(
        UserWarning, match=f"skipping {re.escape(str(needle))}: a 1x1200000 \\(HxW\\) image is too elongated"
    ):
        load_script("evaluate").main(["--checkpoint", str(f.ckpt), "--data-dir", str(tmp_path / "data"),
                                      "--num-workers", "0", "--output-dir", str(tmp_path / "ev")])  # fmt: skip
    assert re.search(r"^  a +[\d.]+%  \(2 images\)$", capsys.readouterr().out, re.MULTILINE)  # the needle left out
    summary = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert summary["images"] == 4 and [s["path"] for s in summary["skipped"]] == [str(needle)]


def test_eval_json_is_valid_json_when_the_loss_overflows(f, load_script, tmp_path):
    """Finite weights whose logits overflow to inf: the loss is NaN, which eval.json once held as a bare NaN."""
    state = dict(f.state) | {"head.fc.weight": torch.full_like(f.state["head.fc.weight"], 3e38)}
    ckpt = _save(tmp_path / "huge.safetensors", state, f.meta)
    load_script("evaluate").main(["--checkpoint", str(ckpt), "--data-dir", str(f.data), "--num-workers", "0"])
    summary = json.loads((tmp_path / "eval.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert summary["loss"] is None and summary["top1"] == 50.0


def test_the_optional_packages_are_pyprojects_extras():
    """``_cli.OPTIONAL`` names, for each package of an extra, that extra (so the hint installs what is missing)."""
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((SCRIPTS.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    import_names = {"scikit-learn": "sklearn", "PyYAML": "yaml", "onnx-ir": "onnx_ir"}
    listed = {}
    for extra in ("train", "detection", "export"):
        for requirement in extras[extra]:
            name = requirement.split(">")[0].split("=")[0].split("[")[0]
            if name != "swinlite":
                listed[import_names.get(name, name)] = extra
    assert _cli.OPTIONAL == listed
