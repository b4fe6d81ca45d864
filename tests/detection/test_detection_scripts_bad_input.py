"""scripts/detect.py and scripts/evaluate_detection.py on bad input: one ``error:`` line and exit 2 (nothing
written), or a correct result; --help before torch loads. Run in-process through the scripts' ``run(main)``."""

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from detkit import edit_coco, read_metadata, rewrite_checkpoint
from PIL import Image
from scriptkit import run_script
from torchvision.models.detection.transform import GeneralizedRCNNTransform

from swinlite.detection.predictor import unprocessable

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the file's quirks warn; test_data checks those


def _run(name: str, argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python scripts/<name>.py ARGV``, in this process."""
    code = run_script(name, argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def setup(trained, tmp_path: Path) -> SimpleNamespace:
    """A copy of the trained run's data, its checkpoint, and an output folder, in this test's folder."""
    coco, run = trained
    shutil.copytree(coco, tmp_path / "coco")
    return SimpleNamespace(coco=tmp_path / "coco", ckpt=run / "best.safetensors", out=tmp_path / "out", tmp=tmp_path)


def _evaluate(s: SimpleNamespace, *extra: object) -> list[object]:
    return ["--checkpoint", s.ckpt, "--data-dir", s.coco, "--output-dir", s.out, "--num-workers", "0", *extra]


def _detect(s: SimpleNamespace, *extra: object) -> list[object]:
    return ["--checkpoint", s.ckpt, "--input", s.coco / "val2017", "--output-dir", s.out, *extra]


def _checkpoint(edit: Callable[[dict], object] = dict, **metadata) -> Callable[[SimpleNamespace], None]:
    """A setup step: the checkpoint replaced by a copy with edited tensors / metadata."""

    def change(s: SimpleNamespace) -> None:
        s.ckpt = rewrite_checkpoint(s.ckpt, s.tmp / "edited.safetensors", edit, **metadata)

    return change


def _truncate(s: SimpleNamespace) -> None:
    data = s.ckpt.read_bytes()
    (s.tmp / "cut.safetensors").write_bytes(data[: len(data) // 2])
    s.ckpt = s.tmp / "cut.safetensors"


def _detector(**changes) -> Callable[[SimpleNamespace], None]:
    def change(s: SimpleNamespace) -> None:
        _checkpoint(detector=read_metadata(s.ckpt)["detector"] | changes)(s)

    return change


def _val(edit: Callable[[dict], object]) -> Callable[[SimpleNamespace], None]:
    return lambda s: edit_coco(s.coco, "val", edit)


def _thin_images(s: SimpleNamespace) -> None:
    """Every val image 4000 x 1 (its file and its record)."""
    for path in (s.coco / "val2017").glob("*.png"):
        Image.fromarray(np.zeros((1, 4000, 3), np.uint8)).save(path)
    edit_coco(s.coco, "val", lambda d: [image.update(width=4000, height=1) for image in d["images"]])


def _cut_off(s: SimpleNamespace) -> None:
    """Every val image cut off as 06.png is (a broken download: the header reads, the pixels do not)."""
    for path in (s.coco / "val2017").glob("*.png"):
        path.write_bytes(path.read_bytes()[:100])


def _nothing(s: SimpleNamespace) -> None:
    pass


def _nan_weight(tensors: dict) -> None:
    tensors[next(iter(tensors))][0] = float("nan")


E, D = "evaluate_detection", "detect"
CASES = {  # test id: (script, setup, argv, message in the error line)
    "E-gpu0": (E, _nothing, lambda s: _evaluate(s, "--device", "gpu0"), "--device 'gpu0' is not a device"),
    "D-gpu0": (D, _nothing, lambda s: _detect(s, "--device", "gpu0"), "--device 'gpu0' is not a device"),
    "E-output-dir-is-a-file": (E, lambda s: s.out.write_text(""), _evaluate, "out is a file"),
    "D-output-dir-is-a-file": (D, lambda s: s.out.write_text(""), _detect, "out is a file"),
    "E-truncated-checkpoint": (E, _truncate, _evaluate, "cut.safetensors is not a detection checkpoint"),
    "D-truncated-checkpoint": (D, _truncate, _detect, "cut.safetensors is not a detection checkpoint"),
    "E-classification-checkpoint": (
        E,
        _checkpoint(task="classification"),
        _evaluate,
        "(its metadata says task 'classification'); use scripts/predict.py or scripts/evaluate.py",
    ),
    "E-metadata-says-retinanet": (
        E,
        _detector(detector="retinanet"),
        _evaluate,
        "does not fit SwinRetinaNet exactly",
    ),
    "D-unknown-detector": (
        D,
        _detector(detector="yolo"),
        _detect,
        "does not describe a detector: ValueError: model.detector must be",
    ),
    "D-non-integer-fpn-channels": (
        D,
        _detector(fpn_channels="wide"),
        _detect,
        "does not describe a detector: TypeError",
    ),
    "D-more-class-names-than-ids": (
        D,
        _checkpoint(classes=["square", "bar", "cat"]),
        _detect,
        "2 category_ids for 3 classes",
    ),
    "D-classes-not-json": (
        D,
        _checkpoint(classes="square,bar"),
        _detect,
        "'classes' is square,bar, not a list of names",
    ),
    "D-non-string-class-names": (D, _checkpoint(classes=[1, 2]), _detect, "'classes' is [1, 2], not a list of names"),
    "D-three-classes-for-two-class-weights": (
        D,
        _checkpoint(classes=["a", "b", "c"], category_ids=[3, 7, 9]),
        _detect,
        "does not fit SwinMaskRCNN exactly; shape (file vs model): roi_heads.box_predictor.cls_score",
    ),
    "D-data-metadata-incomplete": (
        D,
        _checkpoint(data={"test_size": 48}),
        _detect,
        "not test_size, max_size, mean and std",
    ),
    "D-data-metadata-nan-mean": (
        D,
        _checkpoint(data={"test_size": 48, "max_size": 64, "mean": [float("nan"), 0.5, 0.5], "std": [0.2] * 3}),
        _detect,
        "not test_size, max_size, mean and std",
    ),
    "D-nan-weight": (
        D,
        _checkpoint(_nan_weight),
        _detect,
        "holds NaN or infinite values in 1 weights (a diverged run?): backbone.",
    ),
    "E-annotation-without-bbox": (
        E,
        _val(lambda d: d["annotations"][0].pop("bbox")),
        _evaluate,
        "annotation 1: bbox None is not [x, y, width",
    ),
    "E-box-of-strings": (
        E,
        _val(lambda d: d["annotations"][0].update(bbox=["1", 2, 3, 4])),
        _evaluate,
        "bbox ['1', 2, 3, 4] is not",
    ),
    "E-box-null": (
        E,
        _val(lambda d: d["annotations"][0].update(bbox=None)),
        _evaluate,
        "annotation 1: bbox None is not",
    ),
    "E-image-without-file-name": (
        E,
        _val(lambda d: d["images"][0].pop("file_name")),
        _evaluate,
        "image 1: file_name None",
    ),
    "E-image-without-width": (E, _val(lambda d: d["images"][0].pop("width")), _evaluate, "image 1: width None"),
    "E-category-without-name": (E, _val(lambda d: d["categories"][0].pop("name")), _evaluate, "category 3: name None"),
    "E-image-id-a-string": (E, _val(lambda d: d["images"][2].update(id="3")), _evaluate, "image 2: id '3'"),
    "E-annotations-not-utf8": (
        E,
        lambda s: (s.coco / "annotations" / "instances_val2017.json").write_bytes(b"\xff{"),
        _evaluate,
        "not a COCO",
    ),
    "E-every-image-4000x1": (E, _thin_images, _evaluate, "the detector can resize no image of"),
    "E-every-image-cut-off": (  # "bbox (0 images): no detections", all-null AP and exit 0 before
        E,
        _cut_off,
        _evaluate,
        "no val image could be scored: all 5 were left out as they were read, e.g. ",
    ),
    "D-every-image-4000x1": (D, _thin_images, _detect, "none of the 5 images could be used"),
    "D-input-missing": (
        D,
        _nothing,
        lambda s: _detect(s)[:3] + [s.tmp / "nowhere"] + _detect(s)[4:],
        "does not exist (expected an image file or a folder of images)",
    ),
    "E-no-data": (E, _nothing, lambda s: _evaluate(s)[:2], "give --data-dir, or both --ann and --images"),
    # the train split's annotations paired by file name with the val images: 5 "missing" images, and an mAP
    "E-data-dir-and-images": (
        E,
        _nothing,
        lambda s: _evaluate(s, "--split", "train", "--images", s.coco / "val2017"),
        "--data-dir and --images were given: --ann and --images replace the --data-dir layout",
    ),
    "E-data-dir-and-ann": (
        E,
        _nothing,
        lambda s: _evaluate(s, "--ann", s.coco / "annotations" / "instances_val2017.json"),
        "--data-dir and --ann were given: ",
    ),
    # an empty argument (--output-dir "$OUT", OUT unset): the current folder before
    "E-empty-output-dir": (E, _nothing, lambda s: _evaluate(s, "--output-dir", ""), "argument --output-dir: empty"),
    "D-empty-output-dir": (D, _nothing, lambda s: _detect(s, "--output-dir", ""), "argument --output-dir: empty"),
    "E-unknown-split": (
        E,
        _nothing,
        lambda s: _evaluate(s, "--split", "test"),
        "argument --split: invalid choice: 'test'",
    ),
    "D-unknown-option": (
        D,
        _nothing,
        lambda s: _detect(s, "--bogus"),
        "unrecognized arguments: --bogus",
    ),
    "E-batch-size-0": (E, _nothing, lambda s: _evaluate(s, "--batch-size", "0"), "--batch-size must be at least 1"),
    "E-fp16-on-cpu": (E, _nothing, lambda s: _evaluate(s, "--amp", "fp16"), "--amp fp16 needs CUDA"),
    "D-score-thresh-2": (D, _nothing, lambda s: _detect(s, "--score-thresh", "2"), "--score-thresh must be in 0..1"),
    "E-output-replaces-annotation-file": (
        E,
        lambda s: shutil.copy(s.coco / "annotations" / "instances_val2017.json", s.tmp / "detections.json"),
        lambda s: (
            _evaluate(s)[:2]
            + ["--ann", s.tmp / "detections.json", "--images", s.coco / "val2017", "--output-dir", s.tmp]
        ),
        "detections.json would replace the input",
    ),
}


@pytest.mark.parametrize(("script", "prepare", "argv", "message"), list(CASES.values()), ids=list(CASES))
def test_bad_input_is_one_error_line_and_exit_2(setup, script, prepare, argv, message, capsys):
    prepare(setup)
    before = sorted(setup.tmp.rglob("*"))
    code, _, err = _run(script, argv(setup), capsys)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and message in errors[0], err
    assert "Traceback" not in err
    assert sorted(setup.tmp.rglob("*")) == before  # nothing written


def test_evaluating_on_data_with_other_categories_is_an_error_naming_them(setup, capsys):
    """AP 0.08 and exit 0 before: the checkpoint's square and bar were scored against a cat and a dog."""

    def cats_and_dogs(data: dict) -> None:
        data["categories"] = [{"id": 3, "name": "cat"}, {"id": 8, "name": "dog"}]
        for ann in data["annotations"]:
            ann["category_id"] = 3 if ann["category_id"] == 3 else 8

    edit_coco(setup.coco, "val", cats_and_dogs)
    code, _, err = _run(E, _evaluate(setup), capsys)
    assert code == 2 and not setup.out.exists()
    assert err.strip().splitlines()[-1] == (
        f"error: {setup.coco / 'annotations' / 'instances_val2017.json'} has categories (id name) that checkpoint "
        f"{setup.ckpt} lacks: 3 'cat' (there 'square'), 8 'dog'; it has 3 'square', 7 'bar'"
    )


def test_mask_rcnn_on_box_only_data_gives_box_ap_with_a_note(setup, capsys):
    """A KeyError in COCOeval before."""
    edit_coco(setup.coco, "val", lambda d: [ann.pop("segmentation") for ann in d["annotations"]])
    code, out, err = _run(E, _evaluate(setup), capsys)
    assert code == 0, err
    assert "note: box AP only: 6 objects have no segmentation" in err and "segm (" not in out  # not 7's empty box
    report = json.loads((setup.out / "eval.json").read_text())
    assert "bbox" in report and "segm" not in report


def test_evaluation_leaves_out_an_image_too_thin_for_the_detector(setup, capsys):
    """A RuntimeError traceback from the resize before (a 4000 x 1 image becomes 96 x 0)."""
    Image.fromarray(np.zeros((1, 4000, 3), np.uint8)).save(setup.coco / "val2017" / "03.png")  # the negative image
    edit_coco(setup.coco, "val", lambda d: d["images"][2].update(width=4000, height=1))
    file = re.escape(str(setup.coco / "annotations" / "instances_val2017.json"))
    left_out = rf"1 images of {file} left out \(image id: reason\): 3: a 1x4000 \(HxW\) image would be resized"
    with pytest.warns(UserWarning, match=left_out + " to 0x96"):
        code, _, err = _run(E, _evaluate(setup), capsys)
    assert code == 0, err
    assert json.loads((setup.out / "eval.json").read_text())["images"] == 3  # nor 05.png (missing), 06.png (cut off)


def test_detect_with_every_input_unreadable_fails_and_writes_nothing(setup, capsys):
    """Exit 0 with "0 detections on 0 images" before."""
    folder = setup.tmp / "broken"
    folder.mkdir()
    for name in ("a.png", "b.jpg"):
        (folder / name).write_bytes(b"not an image")
    argv = ["--checkpoint", setup.ckpt, "--input", folder, "--output-dir", setup.out]
    code, _, err = _run(D, argv, capsys)
    assert code == 2 and not setup.out.exists()
    assert err.count("warning: skipped") == 2 and err.strip().splitlines()[-1] == (
        "error: none of the 2 images could be used (each is named above); nothing written"
    )


def test_detect_into_an_earlier_runs_folder_is_refused_unless_overwrite(setup, capsys):
    """Before, a second run over fewer images left the first run's drawings beside its own (a mixed folder)."""
    assert _run(D, _detect(setup), capsys)[0] == 0
    before = sorted(p.name for p in (setup.out / "images").iterdir())
    one = ["--checkpoint", setup.ckpt, "--input", setup.coco / "val2017" / "01.png", "--output-dir", setup.out]
    code, _, err = _run(D, one, capsys)
    assert code == 2 and err.strip() == (
        f"error: --output-dir {setup.out} holds an earlier run's detections.json, images, sources.json: pass "
        "--overwrite to replace them, or choose another folder"
    )
    assert sorted(p.name for p in (setup.out / "images").iterdir()) == before and len(before) > 1  # untouched
    assert _run(D, [*one, "--overwrite"], capsys)[0] == 0
    assert [p.name for p in (setup.out / "images").iterdir()] == ["00000_01.png"]
    assert {e["image"] for e in json.loads((setup.out / "detections.json").read_text())} <= {str(one[3])}


def test_the_output_dir_holds_one_runs_outputs_whichever_script_wrote_them(setup, capsys):
    """evaluate_detection.py --overwrite (of another checkpoint) into detect.py's folder replaced detections.json
    alone: the drawings and sources.json stayed beside the evaluation's eval.json; detect.py --overwrite after an
    evaluation kept its eval.json beside the new drawings."""
    one = ["--checkpoint", setup.ckpt, "--input", setup.coco / "val2017" / "01.png", "--output-dir", setup.out]
    assert _run(D, one, capsys)[0] == 0
    assert _run(E, _evaluate(setup, "--overwrite"), capsys)[0] == 0
    assert sorted(p.name for p in setup.out.iterdir()) == ["detections.json", "eval.json"]
    assert _run(D, [*one, "--overwrite"], capsys)[0] == 0
    assert sorted(p.name for p in setup.out.iterdir()) == ["detections.json", "images", "sources.json"]


def test_sources_json_names_the_image_of_each_drawing(setup, capsys):
    """a/01.png and b/01.png were drawn as images/00000_01.png and images/00001_01.png, and nothing said which was
    which; an image skipped (b/broken.png, unreadable) gets no entry."""
    images = [setup.tmp / "a" / "01.png", setup.tmp / "b" / "01.png", setup.tmp / "b" / "broken.png"]
    for image, source in zip(images, ["01.png", "02.png"], strict=False):
        image.parent.mkdir(exist_ok=True)
        shutil.copy(setup.coco / "val2017" / source, image)
    images[2].write_bytes(b"not an image")
    argv = ["--checkpoint", setup.ckpt, "--input", images[0], images[1].parent, "--output-dir", setup.out]
    assert _run(D, argv, capsys)[0] == 0
    sources = {"00000_01.png": str(images[0]), "00001_01.png": str(images[1])}
    assert json.loads((setup.out / "sources.json").read_text()) == sources
    assert sorted(p.name for p in (setup.out / "images").iterdir()) == list(sources)


def test_detect_with_its_output_inside_the_input_folder_is_refused_before_any_work(setup, capsys):
    """Before, a second run found the first run's drawings (OUT/images/*.png) among its inputs."""
    folder = setup.coco / "val2017"
    before = sorted(folder.rglob("*"))
    argv = ["--checkpoint", setup.ckpt, "--input", folder, "--output-dir", folder / "det", "--score-thresh", "0.3"]
    code, _, err = _run(D, argv, capsys)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "lies inside the input folder" in errors[0], err
    assert sorted(folder.rglob("*")) == before  # nothing written


def test_detect_keeps_file_names_that_are_not_utf8(setup, capsys):
    """Printing the output folder's name raised UnicodeEncodeError after all the work, with a strict stdout."""
    folder, out = setup.tmp / "pictures", setup.tmp / os.fsdecode(b"out\xff")
    folder.mkdir()
    name = os.fsdecode(b"caf\xe9.png")  # Latin-1, not UTF-8
    try:
        shutil.copy(setup.coco / "val2017" / "01.png", folder / name)
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system takes UTF-8 names only")
    argv = ["--checkpoint", setup.ckpt, "--input", folder, "--output-dir", out, "--score-thresh", "0"]
    code, printed, err = _run(D, argv, capsys)
    assert code == 0, err
    results = json.loads((out / "detections.json").read_text())
    assert {os.fsencode(r["image"]) for r in results} == {os.fsencode(folder / name)}  # the exact bytes back
    assert "out\\udcff" in printed  # shown escaped
    assert [os.fsencode(p.name) for p in (out / "images").iterdir()] == [b"00000_caf\xe9.png"]


def test_unprocessable_is_what_torchvisions_resize_refuses():
    transform = GeneralizedRCNNTransform(48, 96, [0.5] * 3, [0.2] * 3)
    for height, width in [(1, 4000), (1, 96), (1, 192), (1, 193), (2, 193), (41, 4000), (42, 4000), (3, 3), (500, 7)]:
        try:
            transform.resize(torch.zeros(3, height, width), None)
            refused = False
        except RuntimeError:
            refused = True
        assert (unprocessable(SimpleNamespace(transform=transform), height, width) is not None) == refused
