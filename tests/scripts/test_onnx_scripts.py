"""scripts/predict.py --onnx and scripts/export_onnx.py: the torch-free path writes the PyTorch path's CSV, bad input
is one line and exit code 2, the export script's own check and INT8 option."""

import csv
import json
import re

import onnx
from onnxkit import CLASSES, PREPROCESSING, run_without_torch, write_images
from onnxmany import run_many_without_torch
from PIL import Image
from scriptkit import load_script, run_script

from swinlite.metadata import PREPROCESSING_KEYS

SIZES = [(32, 32), (45, 31), (200, 120), (17, 90)]


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_predict_onnx_writes_the_pytorch_csv_without_torch(onnx_classifier, tmp_path, capsys):
    """Both paths skip, in the same words, a broken file and an image too elongated for the centre crop's resize
    (--onnx stopped the run at the latter: exit 2, no CSV)."""
    checkpoint, model = onnx_classifier
    images = write_images(tmp_path / "images", SIZES)
    (images / "broken.png").write_bytes(b"not a png")
    Image.new("RGB", (210_000, 1)).save(images / "long.png")  # 36 x 7560000 pixels once resized for the 32x32 crop
    got = run_without_torch("predict.py", "--onnx", str(model), "--topk", "2", "--output", str(tmp_path / "o.csv"),
                            str(images))  # fmt: skip
    assert got.returncode == 0, got.stderr
    skipped = [line for line in got.stderr.splitlines() if line.startswith("warning: skipped ")]  # as detect.py
    assert len(skipped) == 2 and f"{images / 'broken.png'}: unreadable (UnidentifiedImageError" in skipped[0]
    assert skipped[1].startswith(f"warning: skipped {images / 'long.png'}: a 1x210000 (HxW) image is too elongated")
    assert f"{len(SIZES)} images labelled (top-2), 2 skipped" in got.stdout
    want = ["--checkpoint", checkpoint, "--topk", "2", "--no-progress", "--output", tmp_path / "t.csv", images]
    assert run_script("predict", want) == 0
    assert set(skipped) <= set(capsys.readouterr().err.splitlines())  # the same words with and without --onnx
    onnx_rows, torch_rows = _rows(tmp_path / "o.csv"), _rows(tmp_path / "t.csv")
    assert len(onnx_rows) == len(SIZES) + 1 and onnx_rows[0] == ["path", "class", "prob", "class_2", "prob_2"]
    for a, b in zip(onnx_rows[1:], torch_rows[1:], strict=True):
        assert a[0] == b[0] and a[1] == b[1] and a[3] == b[3]  # same files, same top-2 classes
        assert abs(float(a[2]) - float(b[2])) <= 2e-6 and abs(float(a[4]) - float(b[4])) <= 2e-6


def _strip_metadata(source, target, shape=None):
    """``source`` without its metadata, as another exporter's file; with ``shape`` its input's dims fixed to it (0:
    left open)."""
    proto = onnx.load(source)
    del proto.metadata_props[:]
    if shape is not None:
        for dim, size in zip(proto.graph.input[0].type.tensor_type.shape.dim, shape, strict=True):
            if size:
                dim.dim_value = size
    onnx.save(proto, target)
    return target


BIG = json.dumps(PREPROCESSING | {"input_size": [3, 600, 600]})
GRAY = json.dumps(PREPROCESSING | {"input_size": [1, 32, 32], "mean": [0.5], "std": [0.2]})
GIVEN = ["--classes", "{r}/classes.txt", "--preprocessing", json.dumps(PREPROCESSING)]  # for a bare file
# case: (arguments after --onnx, with {m} the exported file and {r} the test's folder; the error line)
CASES = {
    "not_onnx": (["{r}/junk.onnx"], "is not an ONNX model, or is truncated"),
    "truncated": (["{r}/half.onnx"], "is not an ONNX model, or is truncated"),
    "no_metadata": (["{r}/bare.onnx"], "no swinlite metadata for its classes and preprocessing: pass --classes and "),
    "no_metadata_given_classes": (["{r}/bare.onnx", "--classes", "{r}/classes.txt"], "for its preprocessing: pass "),
    "no_metadata_static_size": (  # it advised --max-size, which --fixed-size refuses
        ["{r}/static.onnx", "--classes", "{r}/classes.txt", "--preprocessing", BIG],
        r"600x600 \(HxW\) is outside the sizes static.onnx was exported for: 16x16 only \(export a range of sizes: "
        r"scripts/export_onnx.py without --fixed-size\)$",
    ),
    "fixed_batch_other_batch_size": (  # ONNX Runtime's traceback at the first batch, the CSV not written
        ["{r}/batch1.onnx", *GIVEN, "--batch-size", "4"],
        r"--batch-size 4: .*batch1.onnx takes batches of 1 image only \(its input's batch is fixed\): drop ",
    ),
    "folder": (["{r}/images"], r"images is a folder, not an ONNX file$"),  # "does not exist"
    "duplicate_classes": (  # two outputs printed as one class
        ["{m}", "--classes", "{r}/twice.txt"],
        r"twice.txt names 'dog' more than once$",
    ),
    "outside_the_range": (["{m}", "--preprocessing", BIG], r"600x600 \(HxW\) is outside the sizes model.onnx was "),
    "wrong_channels": (["{m}", "--preprocessing", GRAY], r"input_size \[1, .*\]: the predictor feeds RGB"),
    "bad_json": (["{m}", "--preprocessing", "{input_size"], "--preprocessing must be a JSON object"),
    "unknown_key": (  # a typo was ignored: the file's crop_pct applied
        ["{m}", "--preprocessing", '{"crop_pc": 0.5}'],
        r"--preprocessing has unknown keys 'crop_pc' \(did you mean crop_pct\?\); known: input_size, ",
    ),
    "with_checkpoint": (["{m}", "--checkpoint", "{m}"], "--onnx runs the exported file alone: --checkpoint"),
    "with_device": (["{m}", "--device", "cuda"], "--onnx runs the exported file alone: --device does not apply"),
    "with_num_workers": (["{m}", "--num-workers", "4"], "--onnx runs the exported file alone: --num-workers does not "),
}


def test_predict_onnx_bad_input_is_one_line(onnx_classifier, tmp_path):
    """Each of CASES, run one after another in one torch-free interpreter (onnxmany): exit code 2, its error line
    alone on stderr, no CSV written."""
    model = str(onnx_classifier[1])
    (tmp_path / "junk.onnx").write_bytes(b"\x89PNG not onnx at all" * 10)
    (tmp_path / "half.onnx").write_bytes(onnx_classifier[1].read_bytes()[:5000])
    _strip_metadata(onnx_classifier[1], tmp_path / "bare.onnx")
    # as another exporter's fixed-size file (16x16), and one of a fixed batch, without swinlite metadata
    _strip_metadata(onnx_classifier[1], tmp_path / "static.onnx", (0, 0, 16, 16))
    _strip_metadata(onnx_classifier[1], tmp_path / "batch1.onnx", (1, 0, 32, 32))
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    (tmp_path / "twice.txt").write_text("cat\ndog\ndog\n")
    images = write_images(tmp_path / "images", SIZES[:1])
    runs = []
    for args, _ in CASES.values():
        args = [a.replace("{m}", model).replace("{r}", str(tmp_path)) for a in args]
        runs.append(("predict.py", ["--onnx", *args, "--output", tmp_path / "o.csv", images]))
    results = run_many_without_torch(runs, tmp_path / "results.json")
    for (case, (_, error)), (code, err) in zip(CASES.items(), results, strict=True):
        assert code == 2, (case, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (case, err)
        assert re.search(error, lines[0]), (case, lines[0])
    assert not (tmp_path / "o.csv").exists()


def test_predict_onnx_of_a_bare_file_with_both_flags(onnx_classifier, tmp_path):
    """--classes written by Windows Notepad, with a byte order mark: it was read into the first class's name."""
    bare = _strip_metadata(onnx_classifier[1], tmp_path / "bare.onnx")
    (tmp_path / "classes.txt").write_text("\r\n".join(CLASSES) + "\r\n", encoding="utf-8-sig")
    images = write_images(tmp_path / "images", SIZES[:2])
    flags = ["--classes", str(tmp_path / "classes.txt"), "--preprocessing", json.dumps(PREPROCESSING)]
    result = run_without_torch("predict.py", "--onnx", str(bare), *flags, "--topk", "3", "--output",
                               str(tmp_path / "b.csv"), str(images))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert all(sorted(row[1::2]) == sorted(CLASSES) for row in _rows(tmp_path / "b.csv")[1:])


def test_predict_onnx_feeds_a_file_of_a_fixed_batch_that_many_images(onnx_classifier, tmp_path):
    """Another exporter's file of a fixed batch (torch.onnx.export without dynamic_axes: 1) failed with ONNX
    Runtime's traceback at its first batch of --batch-size images; now it is fed its batch, the last one padded (3
    images at 2 a time): the CSV of the file of a dynamic batch."""
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    images = write_images(tmp_path / "images", SIZES[:3])
    flags = ["--classes", str(tmp_path / "classes.txt"), "--preprocessing", json.dumps(PREPROCESSING), "--topk", "3"]
    runs = []
    for batch in (0, 1, 2):  # 0: left open
        path = _strip_metadata(onnx_classifier[1], tmp_path / f"{batch}.onnx", (batch, 0, 32, 32))
        runs.append(("predict.py", ["--onnx", path, *flags, "--output", tmp_path / f"p{batch}.csv", images]))
    for code, err in run_many_without_torch(runs, tmp_path / "results.json"):  # one torch-free interpreter
        assert code == 0, err
    rows = [_rows(tmp_path / f"p{batch}.csv") for batch in (0, 1, 2)]
    assert rows[1] == rows[0] and rows[2] == rows[0]


def test_the_help_example_of_preprocessing_names_every_key():
    """--help said a key not among "these six" is an error, and its example named five (crop_mode missing)."""
    doc = load_script("predict").__doc__
    example = json.loads(re.search(r"e\.g\. '(\{.*?\})'", doc, re.DOTALL).group(1))
    assert sorted(example) == sorted(PREPROCESSING_KEYS) and len(PREPROCESSING_KEYS) == 6


def test_detect_and_segment_onnx_refusals_are_one_line(onnx_classifier, tmp_path):
    """detect.py --onnx of a file that is not ONNX, and of a classifier's file: one line, exit 2. ONNX Runtime runs
    on the CPU here: a --device would be ignored, so detect.py and segment.py refuse it before anything is read. The
    four runs in one torch-free interpreter (onnxmany); no output folder written."""
    (tmp_path / "junk.onnx").write_bytes(b"nothing like onnx")
    images = write_images(tmp_path / "images", SIZES[:1])
    out = ["--input", images, "--output-dir", tmp_path / "out"]
    runs = [
        ("detect.py", ["--onnx", tmp_path / "junk.onnx", *out]),
        ("detect.py", ["--onnx", onnx_classifier[1], *out]),
        ("detect.py", ["--onnx", onnx_classifier[1], "--device", "cuda", *out]),
        ("segment.py", ["--onnx", onnx_classifier[1], "--device", "cuda", *out]),
    ]
    expected = ["is not an ONNX model", "is a classification model; export a detection", "--device does not apply",
                "--device does not apply"]  # fmt: skip
    results = run_many_without_torch(runs, tmp_path / "results.json")
    for (script, _), want, (code, err) in zip(runs, expected, results, strict=True):
        assert code == 2 and want in err, (script, err)
    for _, err in results[:2]:
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
