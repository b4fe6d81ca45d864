"""The three segmentation scripts on bad input: exit code 2, one ``error:`` line, no traceback, nothing written.
Pairs that do not fit (a missing mask, a mask of another size) are skipped and named instead."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file
from scriptkit import run_script
from segkit import make_seg_folder, scene, tiny_overrides

from swinlite import seg_views
from swinlite.files import list_images
from swinlite.segmentation import inference
from swinlite.segmentation.data import check_labelled, labels_of, scan_split, split_folders, without_thin_pairs
from swinlite.segmentation.inference import InferenceSettings, thin_check
from swinlite.segmentation.models import build_upernet
from swinlite.segmentation.task import SegmentationTask


def _run(name: str, argv: list[object], monkeypatch, capsys) -> tuple[int, str]:
    """(exit code, stderr) of ``python scripts/<name>.py ARGV``, in this process."""
    return run_script(name, argv), capsys.readouterr().err


def _mask(s: SimpleNamespace, split: str = "training", n: int = 0) -> Path:
    return s.data / "annotations" / split / f"{n:02d}.png"


def _rgb_mask(s: SimpleNamespace) -> None:
    Image.open(_mask(s)).convert("RGB").save(_mask(s))


def _no_masks(s: SimpleNamespace) -> None:
    for path in (s.data / "annotations" / "training").iterdir():
        path.unlink()


def _all_ignored(s: SimpleNamespace) -> None:
    for path in (s.data / "annotations" / "validation").iterdir():
        Image.fromarray(np.full((40, 48), 255, dtype=np.uint8), mode="L").save(path)


def _cut_val_images(s: SimpleNamespace) -> None:
    """Every val image cut off behind its header (a broken download): the scan reads its size, its pixels fail."""
    for path in (s.data / "images" / "validation").iterdir():
        path.write_bytes(path.read_bytes()[:100])


def _label(value: int) -> Callable[[SimpleNamespace], None]:
    def write(s: SimpleNamespace) -> None:
        Image.fromarray(np.full((40, 48), value, dtype=np.uint8), mode="L").save(_mask(s, "validation"))

    return write


def _label_map_as(mode: str) -> Callable[[SimpleNamespace], None]:
    """The first train mask's label values saved in ``mode``: a grayscale image stored as RGB, or with alpha (LA)."""

    def save(s: SimpleNamespace) -> None:
        Image.fromarray(np.asarray(Image.open(_mask(s))), mode="L").convert(mode).save(_mask(s))

    return save


def _binary_as_rgb(s: SimpleNamespace) -> None:
    """The first train mask as a black and white RGB image: 0 and 255 (a binary mask's object as 255)."""
    labels = np.asarray(Image.open(_mask(s)))
    Image.fromarray(np.where(labels > 0, 255, 0).astype(np.uint8), mode="L").convert("RGB").save(_mask(s))


def _mask_saved_as(suffix: str, mode: str = "L", **options: object) -> Callable[[SimpleNamespace], None]:
    def save(s: SimpleNamespace) -> None:
        Image.open(_mask(s)).convert("L").convert(mode).save(_mask(s).with_suffix(suffix), **options)
        _mask(s).unlink()

    return save


def _metadata(**changes: object) -> Callable[[SimpleNamespace], None]:
    def change(s: SimpleNamespace) -> None:
        with safe_open(str(s.ckpt), framework="pt") as f:
            meta = f.metadata() | {k: json.dumps(v) for k, v in changes.items()}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        s.ckpt = s.tmp / "edited.safetensors"
        save_file(tensors, str(s.ckpt), metadata=meta)

    return change


def _truncated(s: SimpleNamespace) -> None:
    (s.tmp / "cut.safetensors").write_bytes(s.ckpt.read_bytes()[:1000])
    s.ckpt = s.tmp / "cut.safetensors"


def _broken_images(s: SimpleNamespace) -> None:
    (s.tmp / "broken").mkdir()
    (s.tmp / "broken" / "x.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")


TRAIN, EVAL, SEGMENT = "train_segmentation", "evaluate_segmentation", "segment"
# (id, script, damage, extra arguments ({data}, {out}, {tmp}), message)
CASES = [
    ("no_data", TRAIN, None, ["data.data_dir={tmp}/nowhere"], "nowhere does not exist; expected a folder in ADE20K's"),
    ("no_classes", TRAIN, None, ["data.classes=[]"], "data.dataset=folder needs data.classes"),
    # said data.classes was missing
    ("one_class", TRAIN, None, ["data.classes=[a]"], "data.classes names 1 class (a); expected at least 2, the name of "
     "each label value: the background (label 0) counts as one: name it too, e.g. data.classes=[background,a]"),
    ("one_class_reduced", TRAIN, None, ["data.classes=[a]", "data.reduce_zero_label=true"],
     "expected at least 2, the name of each label value: with data.reduce_zero_label=true label 0 is ignored"),
    ("classes_of_ade20k", TRAIN, None, ["data.dataset=ade20k"], "data.classes is for data.dataset=folder"),
    # ignored, and config.yaml recorded it: the demo trained its background class, ADE20K reduced its labels anyway
    ("reduce_of_the_demo", TRAIN, None, ["data.dataset=shapes", "data.classes=[]", "data.reduce_zero_label=true"],
     "data.reduce_zero_label=true is for data.dataset=folder; shapes reads its labels its own way"),
    ("reduce_of_ade20k", TRAIN, None, ["data.dataset=ade20k", "data.classes=[]", "data.reduce_zero_label=false"],
     "data.reduce_zero_label=false is for data.dataset=folder; ade20k reads its labels its own way"),
    ("ignore_is_a_class", TRAIN, None, ["data.ignore_index=2"], "data.ignore_index=2 is a class label"),
    # void stored as 0 (ADE-style, Cityscapes' labelIds): refused without the setting that ignores it
    ("ignore_is_zero", TRAIN, None, ["data.ignore_index=0"], "expected 3 or more; to ignore the stored value 0, set "
     "data.reduce_zero_label=true (class i stored as i + 1)"),
    # the demo was written into data_dir, then these folders were read with its five shape classes
    ("own_folders_with_the_demo", TRAIN, None, ["data.dataset=shapes", "data.train_images={data}/images/training"],
     "data.train_images points at your own data, but data.dataset=shapes trains the built-in demo"),
    ("rgb_mask", TRAIN, _rgb_mask, [], "is a RGB image; a mask is a palette (P) or grayscale (L, I;16) image whose "
     "pixel values are the labels (convert colour-coded masks to label values first)"),
    # a label map saved as RGB (R=G=B) or with alpha (GIMP's exports), a WebP file (always decoded as RGB): each was
    # told to convert its colour-coded masks
    ("gray_rgb_mask", TRAIN, _label_map_as("RGB"), [], "is a grayscale (label) image stored as RGB (its R, G and B "
     "are equal everywhere); a mask is a palette (P) or grayscale (L, I;16) image whose pixel values are the labels: "
     'save it as an L PNG, e.g. Image.open(path).convert("L").save(...)'),
    ("binary_rgb_mask", TRAIN, _binary_as_rgb, [], 'Image.open(path).convert("L").save(...); its values are 0 and '
     "255: store the object as 1 (255 is the default ignore_index)"),  # convert("L") alone: the object ignored
    ("la_mask", TRAIN, _label_map_as("LA"), [], "is a grayscale (label) image with an alpha channel (LA); a mask is "
     'a palette (P) or grayscale (L, I;16) image whose pixel values are the labels: save it without its alpha channel '
     'as PNG, e.g. Image.open(path).convert("L").save(...)'),
    ("webp_mask", TRAIN, _mask_saved_as(".webp", lossless=True), [], "is a WebP file, which Pillow reads as RGB (a "
     "lossless grayscale one too), not as label values: WebP masks are not supported; save masks as PNG"),
    # its edges' compression noise was read as labels of other classes (15 % of a 10-class mask's pixels)
    ("jpeg_mask", TRAIN, _mask_saved_as(".jpg", quality=95), [], "is a JPEG file, whose lossy compression changes"),
    ("jpeg_tiff_mask", TRAIN, _mask_saved_as(".tif", compression="jpeg"), [],
     "is a TIFF file (JPEG-compressed), whose"),
    # a float TIFF (F) was told to convert its colour-coded masks
    ("float_mask", TRAIN, _mask_saved_as(".tif", "F"), [], "is a mask of floats (F); a mask is a palette (P) or "
     "grayscale (L, I;16) image whose pixel values are the labels: save integer label values, e.g. as an L or I;16 "
     "PNG"),
    # ignore_index applies to the labels after the zero label's reduction: 1 is class 1, stored 2
    ("ignore_is_a_reduced_class", TRAIN, None, ["data.reduce_zero_label=true", "data.ignore_index=1"],
     "data.ignore_index=1 is a class label (0..2, stored as 1..3 with data.reduce_zero_label=true); expected 3 or"),
    ("unknown_labels", TRAIN, None, ["data.classes=[background,red]"], "hold label values [2] that are neither"),
    ("no_masks", TRAIN, _no_masks, [], "has a usable mask"),
    ("val_all_ignored", TRAIN, _all_ignored, [], "hold no pixel of a class, only ignore_index 255"),
    ("ratio_range", TRAIN, None, ["data.ratio_range=[2,1]"], "data.ratio_range must be [low, high]"),
    ("batch_of_one", TRAIN, None, ["data.batch_size=1"], "the heads' BatchNorm needs at least 2 images"),
    ("not_swinlite", TRAIN, None, ["model.name=resnet18"], "must be a swinlite model"),
    ("stride_longer_than_crop", TRAIN, None, ["data.test_stride=[21,33]", "data.test_mode=slide"],  # crop 32: gaps
     "data.test_stride [21, 33] is longer than data.crop_size [32, 32]: the pixels between the sliding windows would "
     "get no prediction; expected data.test_stride <= data.crop_size in each dimension (height, width), e.g. [21, 21]"),
    # training images scored against the layout's val masks of the same names, eval.json recording split validation
    ("eval_images_and_data_dir", EVAL, None, ["--images", "{data}/images/training"],
     "--data-dir and --images were given: --images and --masks replace the --data-dir layout"),
    ("missing_checkpoint", EVAL, None, ["--checkpoint", "{tmp}/none.safetensors"], "none.safetensors' does not exist"),
    ("truncated_checkpoint", EVAL, _truncated, [], "damaged (truncated?) safetensors file"),
    (
        "other_task",
        EVAL,
        _metadata(task="classification"),
        [],
        "is not a segmentation checkpoint of scripts/train_segmentation.py (its metadata says task 'classification'); "
        "use scripts/predict.py or scripts/evaluate.py",
    ),
    ("bad_palette", EVAL, _metadata(palette=[[1, 2]]), [], "'palette' is [[1, 2]], not one [r, g, b]"),
    ("bad_test_mode", EVAL, _metadata(preprocessing={"mean": [0.5] * 3, "std": [0.2] * 3, "mode": "tiles"}), [],
     "test mode must be one of whole, slide"),
    ("output_in_input", EVAL, None, ["--output-dir", "{data}/images/validation/out"], "lies inside the input folder"),
    # an empty argument (--output-dir "$OUT", OUT unset): the current folder before
    *[(f"{script}_output_dir_empty", script, None, ["--output-dir", ""], "argument --output-dir: empty; expected a "
       "folder for the outputs") for script in (EVAL, SEGMENT)],
    ("eval_unknown_labels", EVAL, _label(7), [], "hold label values [7] that are neither"),
    # mIoU nan, an eval.json of nulls and exit 0 before, where training refused the same masks (val_all_ignored)
    ("eval_val_all_ignored", EVAL, _all_ignored, [],
     "annotations/validation) hold no pixel of a class, only ignore_index 255"),
    # every image rescaled to 1x1, thinner than the patch: 6 warnings, NaN and exit 0 before (training: a whole run of
    # NaN val mIoU, no best.safetensors)
    ("eval_every_image_too_thin", EVAL, None, ["--ratios", "0.01"], "the test settings can predict no image of "),
    ("every_val_image_too_thin", TRAIN, None, ["data.test_ratios=[0.01]"],
     "the test settings can predict no image of "),
    ("eval_nothing_decodes", EVAL, _cut_val_images, [],
     "no val image could be scored: all 6 were left out as they were read, e.g. "),
    ("train_nothing_decodes", TRAIN, _cut_val_images, [],
     "evaluation after training epoch 1/1 failed (ValueError: no val image could be scored: all 6 were left out"),
    ("segment_output_in_input", SEGMENT, None, ["--output-dir", "{data}/out"], "lies inside the input folder"),
    # a view of 38400x32000: --ratios 100 (3840x3200) was killed for memory (a traceback under a ulimit)
    *[(f"{script}_views_too_large", script, None, ["--ratios", "1000"], "00.png: a 40x48 (HxW) image would be rescaled "
       "to 32000x38400 (ratio 1000.0), whose prediction holds 59.5 GiB at that size (float32: the logits of 3 classes "
       "twice, the windows' count, the image and its mirror) and 0.0 GiB at the image's own size") for script in
      (EVAL, SEGMENT)],
    ("train_val_views_too_large", TRAIN, None, ["data.test_ratios=[1000]"],
     "(ratio 1000.0), whose prediction holds 59.5 GiB at that size (float32: the logits of 3 classes twice, the "
     "windows' count, the image and its mirror) and 0.0 GiB at the image's own size (the scores of 3 classes once, "
     "the image and its labels), more than the 4 GiB an image's prediction may take: lower data.test_ratios"),
    ("segment_nothing_readable", SEGMENT, _broken_images, ["--input", "{tmp}/broken"], "none of the 1 images"),
    ("segment_missing_input", SEGMENT, None, ["--input", "{tmp}/nowhere"], "nowhere' does not exist"),
    ("segment_slide_with_gaps", SEGMENT,  # a run's before data.test_stride was checked: 341 with crops of 32
     _metadata(preprocessing={"mean": [0.5] * 3, "std": [0.2] * 3, "crop_size": [32, 32], "stride": [341, 341]}),
     ["--mode", "slide"], "slide mode: stride [341, 341] is longer than crop_size [32, 32]"),
]  # fmt: skip


@pytest.fixture
def setup(trained, tmp_path: Path) -> SimpleNamespace:
    """A copy of the trained run's data, its checkpoint, an output folder in this test's folder."""
    data, run = trained
    return SimpleNamespace(data=shutil.copytree(data, tmp_path / "data"), ckpt=run / "best.safetensors",
                           out=tmp_path / "out", tmp=tmp_path)  # fmt: skip


def _argv(script: str, s: SimpleNamespace) -> list[object]:
    if script == TRAIN:
        (s.tmp / "defaults.yaml").write_text("{}\n")
        return ["--config", s.tmp / "defaults.yaml", *tiny_overrides(s.data, s.out)]
    if script == EVAL:
        return ["--checkpoint", s.ckpt, "--data-dir", s.data, "--output-dir", s.out, "--num-workers", "0"]
    return ["--checkpoint", s.ckpt, "--input", s.data, "--output-dir", s.out]


@pytest.mark.parametrize(("script", "damage", "extra", "message"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_one_error_line_exit_2_nothing_written(script, damage, extra, message, setup, monkeypatch, capsys):
    if damage is not None:
        damage(setup)
    monkeypatch.setattr(seg_views, "memory_budget", lambda: 4 * 2**30)  # any machine's (views_too_large's message)
    argv = _argv(script, setup) + [a.format(data=setup.data, out=setup.out, tmp=setup.tmp) for a in extra]
    code, err = _run(script, argv, monkeypatch, capsys)
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1 and message in errors[0], err
    assert err.rstrip().splitlines()[-1] == errors[0] and "Traceback" not in err
    assert not setup.out.exists() or not any(setup.out.rglob("*.safetensors")) and not any(setup.out.rglob("*.png"))


def test_eval_split_with_images_and_masks_is_refused_as_parsed(capsys):
    """--split training with --images and --masks was accepted and ignored: exit 0, eval.json recording split null
    (as --data-dir beside them is refused: eval_images_and_data_dir)."""
    argv = ["--checkpoint", "best.safetensors", "--images", "img", "--masks", "ann", "--split", "training"]
    assert run_script(EVAL, argv) == 2
    assert capsys.readouterr().err.startswith("error: --split training picks a split of the --data-dir layout, and "
                                              "--images and --masks name the folders themselves: drop --split, or "
                                              "give --data-dir (see ")  # fmt: skip


def test_stride_repairs_a_checkpoint_whose_slide_windows_leave_gaps(setup, monkeypatch, capsys):
    """A run's before data.test_stride was checked (341 with crops of 32): --mode slide refused above, --stride H W
    within the crop predicts (segment.py and evaluate_segmentation.py), a --stride longer than it is refused too."""
    pre = {"mean": [0.5] * 3, "std": [0.2] * 3, "img_scale": [48, 40], "crop_size": [32, 32], "stride": [341, 341]}
    _metadata(preprocessing=pre)(setup)
    argv = [*_argv(SEGMENT, setup), "--mode", "slide"]
    assert _run(SEGMENT, [*argv, "--stride", "16", "21"], monkeypatch, capsys)[0] == 0
    assert len(list((setup.out / "labels").iterdir())) == len(list_images([setup.data]))
    code, err = _run(SEGMENT, [*argv, "--stride", "16", "33", "--overwrite"], monkeypatch, capsys)
    assert code == 2 and "slide mode: stride [16, 33] is longer than crop_size [32, 32]" in err
    eval_argv = [*_argv(EVAL, setup), "--mode", "slide", "--stride", "32", "32", "--overwrite"]  # segment.py's folder
    assert _run(EVAL, eval_argv, monkeypatch, capsys)[0] == 0 and (setup.out / "eval.json").is_file()


DOCS_RATIOS = ["--ratios", "0.5", "0.75", "1.0", "1.25", "1.5", "1.75", "--flip"]  # docs/segmentation.md's ADE20K test


@pytest.mark.parametrize("script", (EVAL, SEGMENT))
def test_the_docs_multi_scale_test_at_ade20k_scale_is_not_refused(script, setup, monkeypatch, capsys):
    """A segmenter of data.img_scale=[2048,512] (ADE20K's) and a 120x48 image at the docs' ratios and flip: views up
    to 2240x896, which were refused as larger than the 2048 pixels of the ONNX export's range (the evaluation
    stopped); the PyTorch paths' rule is memory (these views' tensors take 2.3 GiB even for ADE20K's 150 classes).
    The prediction is stood in for (these 12 views take the pico segmenter 11 s on one thread)."""
    _metadata(preprocessing={"mean": [0.5] * 3, "std": [0.2] * 3, "img_scale": [2048, 512]})(setup)
    image, labels = scene(np.random.default_rng(0), (48, 120))
    for folder, array in (("images", image), ("masks", labels)):
        (setup.tmp / folder).mkdir()
        Image.fromarray(array).save(setup.tmp / folder / "wide.png")
    seen = []

    def scores(model, images, test):
        seen.append((tuple(images.shape[2:]), test.img_scale, test.ratios, test.flip))
        return images.new_zeros(len(images), model.num_classes, *images.shape[2:])

    monkeypatch.setattr(inference, "predict_scores", scores)
    data = ["--images", setup.tmp / "images", "--masks", setup.tmp / "masks", "--num-workers", "0"]
    argv = ["--checkpoint", setup.ckpt, "--output-dir", setup.out, *DOCS_RATIOS]
    argv += data if script == EVAL else ["--input", setup.tmp / "images" / "wide.png"]
    assert _run(script, argv, monkeypatch, capsys) == (0, "")
    assert seen == [((48, 120), (2048, 512), (0.5, 0.75, 1.0, 1.25, 1.5, 1.75), True)]


def test_segment_into_an_earlier_runs_folder_is_refused_unless_overwrite(setup, monkeypatch, capsys):
    """Before, a second run over fewer images left the first run's label maps beside its own (a mixed folder). Hidden
    names in the folders (.DS_Store, .ipynb_checkpoints/) are no one's files: --overwrite removes them with them."""
    images = setup.data / "images" / "validation"
    argv = ["--checkpoint", setup.ckpt, "--output-dir", setup.out, "--input"]
    assert _run("segment", [*argv, images], monkeypatch, capsys)[0] == 0
    before = sorted(p.name for p in (setup.out / "labels").iterdir())
    code, err = _run("segment", [*argv, images / "01.png"], monkeypatch, capsys)
    assert code == 2 and err.strip() == (
        f"error: --output-dir {setup.out} holds an earlier run's labels, overlays, classes.csv, sources.json: pass "
        "--overwrite to replace them, or choose another folder"
    )
    assert sorted(p.name for p in (setup.out / "labels").iterdir()) == before and len(before) == 6  # untouched
    (setup.out / "overlays" / ".DS_Store").write_bytes(b"")  # OS and tool metadata: --overwrite was refused, naming
    (setup.out / "labels" / ".ipynb_checkpoints").mkdir()  # them as files no run wrote; it removes them now
    assert _run("segment", [*argv, images / "01.png", "--overwrite"], monkeypatch, capsys)[0] == 0
    for folder in ("labels", "overlays"):
        assert [p.name for p in (setup.out / folder).iterdir()] == ["00000_01.png"]


def test_the_output_dir_holds_one_runs_outputs_whichever_script_wrote_them(setup, monkeypatch, capsys):
    """evaluate_segmentation.py --overwrite (of another checkpoint) into segment.py's folder left its label maps,
    overlays, classes.csv and sources.json beside the evaluation's files, and segment.py --overwrite after an
    evaluation its eval.json beside the new label maps."""
    argv = ["--checkpoint", setup.ckpt, "--output-dir", setup.out, "--input", setup.data / "images" / "validation"]
    assert _run(SEGMENT, [*argv[:-1], argv[-1] / "01.png"], monkeypatch, capsys)[0] == 0
    assert _run(EVAL, [*_argv(EVAL, setup), "--overwrite"], monkeypatch, capsys)[0] == 0
    assert sorted(p.name for p in setup.out.iterdir()) == ["eval.json", "per_class_iou.csv"]
    assert _run(SEGMENT, [*argv[:-1], argv[-1] / "01.png", "--overwrite"], monkeypatch, capsys)[0] == 0
    assert sorted(p.name for p in setup.out.iterdir()) == ["classes.csv", "labels", "overlays", "sources.json"]


def test_sources_json_names_the_image_of_each_label_map(setup, monkeypatch, capsys):
    """a/00.png and b/00.png were written as labels/ and overlays/ 00000_00.png and 00001_00.png, and nothing said
    which was which; an image skipped (b/broken.png, unreadable) gets no entry."""
    images = [setup.tmp / "a" / "00.png", setup.tmp / "b" / "00.png", setup.tmp / "b" / "broken.png"]
    for image, source in zip(images, ["00.png", "01.png"], strict=False):
        image.parent.mkdir(exist_ok=True)
        shutil.copy(setup.data / "images" / "validation" / source, image)
    images[2].write_bytes(b"not an image")
    argv = ["--checkpoint", setup.ckpt, "--input", images[0], images[1].parent, "--output-dir", setup.out]
    assert _run("segment", argv, monkeypatch, capsys)[0] == 0
    sources = {"00000_00.png": str(images[0]), "00001_00.png": str(images[1])}
    assert json.loads((setup.out / "sources.json").read_text()) == sources
    for folder in ("labels", "overlays"):
        assert sorted(p.name for p in (setup.out / folder).iterdir()) == list(sources)


def test_pairs_that_do_not_fit_are_skipped_and_named(tmp_path: Path):
    data = make_seg_folder(tmp_path / "data")
    gone = _mask(SimpleNamespace(data=data), n=1)  # an image without its mask: saved as GIF, which is not read
    Image.open(gone).save(gone.with_suffix(".gif"))
    gone.unlink()
    Image.fromarray(np.zeros((20, 20), dtype=np.uint8)).save(_mask(SimpleNamespace(data=data), n=2))  # another size
    (data / "annotations" / "training" / "extra.png").write_bytes(_mask(SimpleNamespace(data=data), n=3).read_bytes())
    cfg = SegmentationTask.load_config(None, tiny_overrides(data, tmp_path / "run"))
    split = scan_split(*split_folders(cfg.data, "train"), labels_of(cfg.data))
    assert [p.image.name for p in split.pairs] == ["00.png", "03.png", "04.png", "05.png"]
    reasons = dict(split.skipped)
    said = f"no mask 01.png in {data / 'annotations' / 'training'} (01.gif is there: masks are read from .jpg, "
    assert reasons[str(data / "images" / "training" / "01.png")].startswith(said)  # it named no 01.gif
    assert reasons[str(data / "images" / "training" / "02.png")].endswith("is 20x20, the image 48x40")
    from swinlite.engine import run

    with pytest.warns(UserWarning, match=r"2 train images skipped: .*01.png: no mask .*02.png: mask .* is 20x20"):
        run(SegmentationTask, cfg)


def test_thin_val_images_are_left_out_before_the_loaders_and_their_labels_no_longer_count(tmp_path: Path):
    """Training left a too-thin val image out image by image as each evaluation read it (a warning each, and a val
    split whose only labelled pixels lay in thin images scored NaN every epoch); now the split is judged once."""
    data = make_seg_folder(tmp_path / "data", count=3)
    cfg = SegmentationTask.load_config(None, tiny_overrides(data, tmp_path / "run"))
    labels = labels_of(cfg.data)
    images, masks = split_folders(cfg.data, "val")
    Image.new("RGB", (600, 1)).save(images / "thin.png")
    Image.fromarray(np.ones((1, 600), np.uint8), mode="L").save(masks / "thin.png")
    split = scan_split(images, masks, labels)
    thin = {path.name: path for path in images.iterdir()}["thin.png"]
    too_thin = thin_check(build_upernet(cfg.model, len(labels.classes)), InferenceSettings.of(cfg.data))
    with pytest.warns(UserWarning, match=r"^1 images of .*validation too thin for the test settings skipped: .*thin"):
        kept = without_thin_pairs(split, too_thin, images, "raise data.test_ratios")
    assert [p.image.name for p in kept.pairs] == ["00.png", "01.png", "02.png"]
    assert kept.skipped == [(str(thin), "a 1x600 (HxW) image would be rescaled to 1x64 (ratio 1.0), thinner than the "
                                        "backbone's 2-pixel patch: too thin")]  # fmt: skip
    assert too_thin(2, 64) is None  # rescaled to 2x64: exactly one patch thin, which the backbone takes
    assert kept.labelled == split.labelled - 600
    for path in (masks / f"{n:02d}.png" for n in range(3)):  # the thin image's mask holds the only class pixels
        Image.fromarray(np.full((40, 48), 255, np.uint8), mode="L").save(path)
    split = scan_split(images, masks, labels)
    check_labelled(split, "val", masks, labels)  # its thin image's pixels count before it is left out
    with pytest.warns(UserWarning, match="too thin"):
        kept = without_thin_pairs(split, too_thin, images, "raise data.test_ratios")
    with pytest.raises(ValueError, match=r"^the val masks \(.*\) \(the pairs kept\) hold no pixel of a class"):
        check_labelled(kept, "val", masks, labels)
    # with reduce_zero_label the stored 0 is ignored too: "only ignore_index 255" of masks of 0s pointed elsewhere
    reduced = dataclasses.replace(labels, reduce_zero_label=True)
    with pytest.raises(ValueError, match=r"only stored values \[0, 255, 256\], which data.reduce_zero_label=true "):
        check_labelled(dataclasses.replace(kept, labelled=0), "val", masks, reduced)
