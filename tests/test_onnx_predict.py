"""swinlite.onnx_predict against what the PyTorch path uses: timm's eval transform, torch's bilinear interpolate,
torchvision's box drawing, torch.topk; and its checks of a file and an input."""

import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from timm.data import create_transform
from torchvision.utils import draw_bounding_boxes

from swinlite import inference, onnx_predict, seg_views


def _image(height: int, width: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


CONFIGS = [
    {"input_size": (3, 224, 224), "interpolation": "bicubic", "crop_pct": 0.9, "crop_mode": "center"},
    {"input_size": (3, 32, 32), "interpolation": "bilinear", "crop_pct": 1.0},
    {"input_size": (3, 48, 64), "interpolation": "bicubic", "crop_pct": 0.875, "crop_mode": "center"},
    {"input_size": (3, 40, 40), "interpolation": "lanczos", "crop_pct": 0.8, "crop_mode": "squash"},
    {"input_size": (3, 36, 50), "interpolation": "nearest", "crop_pct": 0.95, "crop_mode": "border"},
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c['input_size'][1]}x{c['input_size'][2]}")
@pytest.mark.parametrize("size", [(333, 250), (31, 97), (224, 224), (20, 20), (300, 401)])
def test_preprocess_equals_timms_eval_transform(config, size):
    """(300, 401): centre crops whose margins end in .5 px (224 of 331 px wide: 53.5), which torchvision rounds."""
    config = config | {"mean": (0.5, 0.4, 0.3), "std": (0.2, 0.25, 0.3)}
    image = _image(*size)
    want = create_transform(**config, is_training=False)(image).numpy()
    got = onnx_predict.preprocess(image, config)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_an_image_the_centre_crop_resize_would_blow_up_is_refused():
    """1x1200000 resized to a shorter side of 256 would take 256x307200000 pixels; in "squash" mode it is fine."""
    config = {"input_size": (3, 224, 224), "interpolation": "bilinear", "crop_pct": 0.875}
    needle = Image.new("RGB", (1_200_000, 1))
    with pytest.raises(ValueError, match=r"a 1x1200000 \(HxW\) image is too elongated: resizing its shorter side"):
        onnx_predict.preprocess(needle, config)
    assert onnx_predict.preprocess(needle, config | {"crop_mode": "squash"}).shape == (3, 224, 224)


@pytest.mark.parametrize("size,new", [((300, 170), (113, 64)), ((37, 123), (64, 212)), ((64, 80), (64, 80))])
def test_bilinear_resize_equals_torch(size, new):
    image = np.random.default_rng(0).random((3, *size), dtype=np.float32)
    want = F.interpolate(torch.from_numpy(image)[None], size=new, mode="bilinear", align_corners=False)[0].numpy()
    np.testing.assert_allclose(onnx_predict.bilinear_resize(image, new), want, rtol=0, atol=3e-7)


@pytest.mark.parametrize(
    "size,new", [((300, 170), (113, 64)), ((512, 683), (384, 512)), ((37, 40), (64, 77)), ((9, 200), (20, 3))]
)
def test_antialiased_resize_equals_torch(size, new):
    """Shrinking (the filter stretched), enlarging, both at once; 512 -> 384 rounds its centres in float32."""
    image = np.random.default_rng(0).standard_normal((3, *size), dtype=np.float32)
    want = F.interpolate(torch.from_numpy(image)[None], size=new, mode="bilinear", antialias=True)[0].numpy()
    np.testing.assert_allclose(onnx_predict.antialiased_resize(image, new), want, rtol=0, atol=1e-6)


def test_draw_labels_equals_torchvision_masks():
    from swinlite.segmentation.predictor import overlay

    image = _image(30, 41)
    labels = np.random.default_rng(1).integers(0, 3, (30, 41))
    labels[:, :10] = 0  # a class over a whole region, and class 3 of the palette absent
    palette = [(250, 10, 10), (10, 250, 10), (10, 10, 250), (1, 2, 3)]
    want = overlay(torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1), torch.from_numpy(labels), palette, 0.3)
    got = np.asarray(onnx_predict.draw_labels(image, labels, palette, 0.3))
    np.testing.assert_array_equal(got, want.permute(1, 2, 0).numpy())


def test_draw_boxes_equals_torchvision():
    image = _image(60, 80)
    boxes = np.array([[3.7, 5.2, 40.9, 30.0], [10.0, 20.5, 79.0, 59.0]], dtype=np.float32)
    texts = ["cat 0.93", "éclair 0.51"]
    want = draw_bounding_boxes(torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1), torch.from_numpy(boxes),
                               texts, colors="red", width=2)  # fmt: skip
    got = np.asarray(onnx_predict.draw_boxes(image, boxes, texts))
    np.testing.assert_array_equal(got, want.permute(1, 2, 0).numpy())


@pytest.mark.parametrize(
    "logits",
    [
        [[40.0, -75.0, -76.0, -77.0, -78.0, -79.0]],  # confident: the fp32 softmax rounds every runner-up to 0
        [[0.5, 2.0, 2.0, 0.5], [1.0, 1.0, 1.0, 1.0], [-0.0, 0.0, 3.0, -1.0]],  # equal logits
        [[0.0] * 5 + [1.0] + [0.0] * 34],  # 39 tied: an unstable sort's order shows from about 40 classes on
        [[1000.0, 0.0, -1000.0, 0.0]],  # exp overflows without the max taken out first
    ],
)
def test_both_paths_rank_by_the_logits_ties_to_the_lower_index(logits):
    """The PyTorch path ranked the probabilities with topk (0, 4, 3, 5 for the first row: its runner-up lost), the
    ONNX path with a stable sort (0, 1, 2, 3), whose docstring said "as torch.topk"; torch orders ties arbitrarily."""
    logits = np.array(logits, dtype=np.float32)
    want = [sorted(range(len(row)), key=lambda i, row=row: (-row[i], i))[:4] for row in logits.tolist()]
    onnx_indices, onnx_probs = onnx_predict.top_k(logits, 4)
    torch_indices, torch_probs = inference.top_k(torch.from_numpy(logits), 4)
    assert onnx_indices.tolist() == torch_indices.tolist() == want
    reference = torch.from_numpy(logits).softmax(dim=1).gather(1, torch.tensor(want))
    np.testing.assert_allclose(onnx_probs, reference.numpy(), rtol=0, atol=1e-7)
    np.testing.assert_allclose(torch_probs.numpy(), reference.numpy(), rtol=0, atol=1e-7)


@pytest.mark.parametrize(
    "content,error",
    [(b"", "not an ONNX model, or is truncated"), (b"\x08\x07garbage" * 9, "not an ONNX model, or is truncated")],
    ids=["empty", "not_onnx"],
)
def test_open_model_refuses_a_file_that_is_not_onnx(tmp_path, content, error):
    path = tmp_path / "m.onnx"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=error):
        onnx_predict.open_model(path)
    with pytest.raises(ValueError, match="does not exist"):
        onnx_predict.open_model(tmp_path / "missing.onnx")


def test_open_model_without_onnx_runtime_names_the_extra(tmp_path, monkeypatch):
    """A Python user's call was a bare "No module named 'onnxruntime'"; the scripts alone named the extra."""
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    with pytest.raises(ModuleNotFoundError, match=r"^swinlite\.onnx_predict\.open_model needs the optional package "
                                                  r"'onnxruntime': pip install -e \"\.\[") as caught:  # fmt: skip
        onnx_predict.open_model(tmp_path / "m.onnx")
    assert caught.value.name == "onnxruntime"  # what the scripts name the extra by


def test_inputs_outside_the_file_are_refused(onnx_classifier):
    model = onnx_predict.open_model(onnx_classifier[1])
    assert onnx_predict.size_problem(model, 512, 2) is None
    assert "height 2..512, width 2..512" in onnx_predict.size_problem(model, 513, 40)
    assert onnx_predict.size_problem(model, 513, 40).endswith("export_onnx.py --max-size)")  # the flag that helps
    with pytest.raises(ValueError, match="outside the sizes model.onnx was exported for"):
        onnx_predict.classify(model, np.zeros((1, 3, 600, 32), np.float32))


@pytest.mark.parametrize(
    "task,smallest,low,size,problem",
    [
        ("classification", 2, 2, (40, 1),
         r"^40x1 \(HxW\) is smaller than any export of swinlite_pico_patch2_window4_32 takes \(2 pixels a side\)$"),
        ("classification", 2, 8, (40, 5),
         r"^40x5 \(HxW\) is outside .*: height 8\.\.512, width 8\.\.512 \(export again with scripts/export_onnx\.py "
         r"--min-size, which goes no lower than the model's minimum\)$"),
        ("classification", None, 8, (40, 1), r"\(export again with scripts/export_onnx\.py --min-size, which goes no "),
        ("segmentation", None, 17, (40, 9),
         r"^40x9 \(HxW\) is smaller than model\.onnx takes \(height from 17, width from 17; no segmenter export "
         r"takes less\)$"),
        # a segmenter exported with --min-size 40 said "no segmenter export takes less" of a 20-pixel side
        ("segmentation", 17, 40, (40, 20), r"\(export again with scripts/export_onnx\.py --min-size, which goes no "),
    ],
    ids=["below_one_patch", "above_one_patch", "not_recorded", "segmenter", "segmenter_min_size"],
)  # fmt: skip
def test_min_size_is_advised_only_where_an_export_serves_the_size(onnx_classifier, task, smallest, low, size, problem):
    """A 40x1 input to a file of a patch-2 model advised "export again with scripts/export_onnx.py --min-size", which
    refuses a --min-size below one patch. Where the file records the
    smallest size any export serves (export_onnx.py's files do), a size below it is named as such; where a re-export
    can serve it, or the file does not tell (an older one), --min-size is the advice."""
    model_file = onnx_predict.open_model(onnx_classifier[1])
    assert model_file.metadata["smallest_size"] == 2  # recorded: one patch of the pico model
    metadata = {k: v for k, v in model_file.metadata.items() if k != "smallest_size"} | {"task": task}
    metadata |= {"smallest_size": smallest} if smallest else {}
    model_file = dataclasses.replace(model_file, metadata=metadata, sizes=((low, 512), (low, 512)))
    got = onnx_predict.size_problem(model_file, *size)
    assert got is not None and re.search(problem, got), got


EXPECTED = r"^expected normalised float images \[B, 3, H, W\] \(e\.g\. preprocess\(\) outputs, stacked\), got "


@pytest.mark.parametrize(
    "images,error",
    [
        (np.zeros((1, 3, 32, 32), np.uint8), "dtype uint8$"),  # ran: raw 0..255 pixels, neither scaled nor normalised
        (np.zeros((2, 3, 32, 32), np.int64), "dtype int64$"),
        (np.zeros((1, 3, 32, 32), bool), "dtype bool$"),
        # "model.onnx takes 3-channel images; the predictor feeds 32 (RGB)" blamed the file for the array's layout
        (np.zeros((1, 32, 32, 3), np.float32), r"an array of shape \(1, 32, 32, 3\) \(channels last\? "),
        (np.zeros((1, 1, 32, 32), np.float32), r"an array of shape \(1, 1, 32, 32\)$"),
        (np.zeros((3, 32, 32), np.float32), r"an array of shape \(3, 32, 32\)$"),
    ],
    ids=["uint8", "int64", "bool", "channels_last", "one_channel", "one_image_unbatched"],
)
def test_classify_refuses_an_array_that_is_not_a_float_image_batch(onnx_classifier, images, error):
    """As the PyTorch model refuses a non-floating tensor ("expected a floating-point tensor of shape (B, 3, H, W)
    ..., got dtype torch.uint8"): uint8 pixels were cast to float and classified, probabilities wrong, no warning."""
    model = onnx_predict.open_model(onnx_classifier[1])
    with pytest.raises(ValueError, match=EXPECTED + error):
        onnx_predict.classify(model, images)


@pytest.mark.parametrize("batch", [None, 2], ids=["dynamic_batch", "fixed_batch"])
def test_classify_an_empty_batch_gives_no_rows(onnx_classifier, batch):
    """x[:0] raised ZeroDivisionError (integer modulo by zero) where ONNX Runtime and eager PyTorch give [0, classes];
    a graph of a fixed batch is fed at least one batch of zeros, its outputs dropped."""
    model = dataclasses.replace(onnx_predict.open_model(onnx_classifier[1]), batch=batch)
    images = np.random.default_rng(0).standard_normal((3, 3, 32, 32), dtype=np.float32)
    empty = onnx_predict.classify(model, images[:0])
    assert empty.shape == (0, 3) and empty.dtype == np.float32
    want = onnx_predict.classify(dataclasses.replace(model, batch=None), images)
    np.testing.assert_allclose(onnx_predict.classify(model, images), want, rtol=0, atol=1e-6)  # 3 = 2 + 1 padded


def test_classify_refuses_a_file_of_another_task(onnx_classifier):
    """classify ran a segmenter's file and returned its [1, 5, 32, 32] logits "softmaxed" over the classes; a file
    that records no task is taken as a classifier's, as classifier_settings takes it. The refusal names the script
    that runs the file, as the PyTorch path does (it named a Python function: "segment_scores() runs it")."""
    model = onnx_predict.open_model(onnx_classifier[1])
    images = np.zeros((1, 3, 32, 32), np.float32)
    segmenter = dataclasses.replace(model, metadata=model.metadata | {"task": "segmentation"})
    with pytest.raises(
        ValueError, match=r"model\.onnx is a segmentation model, not a classifier; use scripts/segment\.py --onnx$"
    ):
        onnx_predict.classify(segmenter, images)
    detector = dataclasses.replace(model, metadata=model.metadata | {"task": "detection"})
    with pytest.raises(
        ValueError, match=r"model\.onnx is a detection model, not a classifier; use scripts/detect\.py --onnx$"
    ):
        onnx_predict.classify(detector, images)
    with pytest.raises(ValueError, match=r"model\.onnx is a segmentation model, not a classifier"):
        onnx_predict.classifier_settings(segmenter)
    unrecorded = dataclasses.replace(model, metadata={k: v for k, v in model.metadata.items() if k != "task"})
    assert onnx_predict.classify(unrecorded, images).shape == (1, 3)


def test_preprocessing_given_replaces_the_files_key_by_key(onnx_classifier):
    """--preprocessing '{"input_size": [3, 40, 40]}' replaced the file's whole config: its crop_pct, interpolation,
    mean and std fell back to timm's defaults, changing predictions without a word."""
    model = onnx_predict.open_model(onnx_classifier[1])
    recorded = model.metadata["preprocessing"]
    _, merged = onnx_predict.classifier_settings(model, preprocessing={"input_size": [3, 40, 40]})
    assert merged == onnx_predict.check_preprocessing(recorded | {"input_size": [3, 40, 40]}, "expected")
    assert (merged["crop_pct"], merged["interpolation"]) == (recorded["crop_pct"], recorded["interpolation"])


BAD_CROP = {"input_size": [3, 32, 32], "crop_pct": 2}


@pytest.mark.parametrize(
    "flag,metadata,error",
    [
        (BAD_CROP, None, r"^--preprocessing crop_pct must be a number in \(0, 1\]"),
        ([3, 32, 32], None, r"^--preprocessing must be a JSON object \(timm's data config\), got \[3, 32, 32\]"),
        ({"input_size": [3, 600, 32]}, None, r"^--preprocessing input_size: 600x32 \(HxW\) is outside the sizes"),
        (None, BAD_CROP, r"model\.onnx: metadata preprocessing crop_pct must be a number in \(0, 1\]"),
        # "model.onnx takes 3-channel images; the predictor feeds 1 (RGB)" blamed the file
        ({"input_size": [1, 32, 32]}, None, r"^--preprocessing input_size \[1, 32, 32\]: the predictor feeds RGB"),
    ],
    ids=["flag_crop_pct", "flag_not_an_object", "flag_input_size", "file_crop_pct", "flag_one_channel"],
)
def test_bad_preprocessing_names_where_it_came_from(onnx_classifier, flag, metadata, error):
    """predict.py --onnx --preprocessing with a bad value: the error blamed the file ("model.onnx: metadata
    preprocessing must be ...") though its metadata was fine; now it names the flag, and the file only for its own."""
    model = onnx_predict.open_model(onnx_classifier[1])
    if metadata is not None:
        model = dataclasses.replace(model, metadata=model.metadata | {"preprocessing": metadata})
    with pytest.raises(ValueError, match=error):
        onnx_predict.classifier_settings(model, preprocessing=flag)


@pytest.mark.parametrize("mode", ["whole", "slide"])
def test_a_view_too_large_for_memory_is_refused_in_either_mode(mode, monkeypatch):
    """--ratios 1000 on a 48x40 image: the PyTorch paths refused its 38400x32000 views for the memory they take, the
    --onnx path only checked what the graph is fed, so in slide mode (windows within the file's range) it went on to
    allocate the view's arrays; now both paths apply the one rule, before the model is read."""
    settings = onnx_predict.SegmenterSettings(
        classes=["a", "b", "c"], palette=[(0, 0, 0)] * 3, mean=(0.5,) * 3, std=(0.2,) * 3, img_scale=(64, 48),
        mode=mode, crop_size=(32, 32), stride=(21, 21), ratios=(1000.0,), flip=False,
    )  # fmt: skip
    monkeypatch.setattr(seg_views, "memory_budget", lambda: 4 * 2**30)  # the least on any machine: this message
    problem = onnx_predict.segment_problem(None, settings, 40, 48)  # no model: refused before it is asked
    assert problem.startswith("a 40x48 (HxW) image would be rescaled to 48000x57600 (ratio 1000.0)"), problem
    assert problem.endswith("more than the 4 GiB an image's prediction may take: lower --ratios"), problem


SEGMENTER = onnx_predict.SegmenterSettings(
    classes=["a", "b"], palette=[(0, 0, 0)] * 2, mean=(0.5,) * 3, std=(0.2,) * 3, img_scale=(64, 48), mode="whole",
    crop_size=(32, 32), stride=(21, 21), ratios=(1.0,), flip=False,
)  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "fed"), [("whole", "rescaled to 16x48"), ("slide", "rescaled and cut into windows, one of 16x32")]
)
def test_an_image_too_thin_for_the_file_names_what_the_graph_is_fed(mode, fed):
    """A 30x90 image at ratio 0.75 is rescaled to 16x48, cut in slide mode into 16x32 windows: the skip named the
    window as the image's rescaled size."""
    settings = dataclasses.replace(SEGMENTER, img_scale=(64, 32), mode=mode, ratios=(0.75,))
    model = type("Model", (), {"sizes": ((17, 256), (17, 256)), "metadata": {"smallest_size": 17}})()
    model.task, model.path = "segmentation", Path("seg.onnx")
    problem = onnx_predict.segment_too_thin(model, settings, 30, 90)
    assert problem.startswith(f"a 30x90 (HxW) image would be {fed}, thinner than seg.onnx takes"), problem


def test_a_photo_too_large_for_its_classes_at_full_size_is_refused(monkeypatch):
    """A 6000x8000 photo at one 48x64 view passed the views' check, then its 150 classes' scores at the photo's size
    took 27 GiB: the rule counts them too, as the PyTorch path's does (one function), against the same budget."""
    monkeypatch.setattr(seg_views, "memory_budget", lambda: 16 * 2**30)  # a 32 GiB machine's
    settings = dataclasses.replace(SEGMENTER, classes=[str(k) for k in range(150)], palette=[(0, 0, 0)] * 150)
    problem = onnx_predict.segment_problem(None, settings, 6000, 8000)  # no model: refused before it is asked
    assert problem.startswith("a 6000x8000 (HxW) image's prediction holds 27.7 GiB at the image's own size"), problem
    limit = "more than the 16 GiB an image's prediction may take here (half this machine's memory)"
    assert f"{limit}, whatever --ratios: the image is too large for 150 classes at full resolution; " in problem
    assert "the image is too large for 150 classes at full resolution; downscale the image to at most" in problem


DETECTOR = onnx_predict.DetectorSettings(category_ids=[1, 2], names=["a", "b"], test_size=128, max_size=128)
TAKES_RGB = {  # no model: the image is refused before it is asked
    "preprocess": lambda image: onnx_predict.preprocess(image, {"input_size": (3, 32, 32)}),
    "segment_scores": lambda image: onnx_predict.segment_scores(None, SEGMENTER, image),
    "detect": lambda image: onnx_predict.detect(None, DETECTOR, image),
}


@pytest.mark.parametrize("mode", ["L", "RGBA", "I;16", "P", "CMYK", "F"])
@pytest.mark.parametrize("function", TAKES_RGB)
def test_an_image_that_is_not_rgb_is_refused_naming_its_mode(function, mode):
    """Each failed with numpy's or ONNX Runtime's words ("operands could not be broadcast together with shapes
    (32,32) (3,)", "axes don't match array", "Got: 4 Expected: 3"); not converted: 16-bit and float pixels need
    load_rgb's scaling, which convert("RGB") does not apply."""
    error = rf"^expected an RGB image, got a 16x20 \(HxW\) image of mode {mode}: read files with swinlite\.files\.load"
    with pytest.raises(ValueError, match=error):
        TAKES_RGB[function](Image.new(mode, (20, 16)))
    with pytest.raises(ValueError, match=r"^expected an RGB PIL image .*, got ndarray$"):
        TAKES_RGB[function](np.zeros((16, 20, 3), np.uint8))


def test_detect_names_a_thin_image_in_one_order():
    """It said "resized to 12x128 (HxW): a 200x20 image would be resized to 128x12": H x W, then W x H, in one
    sentence; then W x H where every other message gives H x W. The thin problem alone, as detect.py --onnx names a
    skipped image: H x W throughout."""
    model = onnx_predict.OnnxModel(Path("d.onnx"), None, {"task": "detection"}, "image", 3, ((33, 128), (33, 128)))
    with pytest.raises(ValueError) as refused:
        onnx_predict.detect(model, DETECTOR, _image(20, 200))
    assert str(refused.value) == (
        "a 20x200 (HxW) image would be resized to 12x128, thinner than d.onnx takes (height from 33, width from 33; no "
        "detector export takes less): too thin"
    )
