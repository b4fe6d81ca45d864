"""``--model NAME`` without ``--checkpoint`` means NAME's published pretrained weights in every script that takes it
(predict.py, extract_features.py, visualize.py, export_onnx.py: swinlite.weights.pretrained_model); a name timm
publishes none for is one error in each. The weights come from an offline Hugging Face cache (tests/conftest.py's
``offline_hub``): random values under the hub's name."""

import hashlib
import json

import numpy as np
import pytest
from pico import PICO
from PIL import Image
from scriptkit import run_script

import swinlite.export
import swinlite.models.swin
import swinlite.visualize
from swinlite.features import load_embeddings
from swinlite.hub import cached_weights

TAG = "swinlite_tiny_patch4_window7_224.ms_in1k"

# script -> (its arguments but the model's, given the image folder and an output folder; what it wrote there)
RUNS = {
    "predict": (
        lambda images, out: ["--output", out / "p.csv", "--no-progress", images],
        lambda out: (out / "p.csv").read_text(),
    ),
    "extract_features": (
        lambda images, out: ["--input", images, "--output", out, "--no-progress"],
        lambda out: (
            load_embeddings(out / "embeddings.safetensors")[0].numpy().tobytes(),
            json.loads((out / "settings.json").read_text())["checkpoint_sha256"],  # a resume checks the weights
        ),
    ),
    "visualize": (lambda images, out: ["--output", out], lambda out: (out / "bias_stage0.png").read_bytes()),
    "export_onnx": (
        lambda images, out: ["--output", out / "m.onnx", "--fixed-size", "--size", 64, 64, "--no-check"],
        lambda out: (out / "m.onnx").read_text(),
    ),
}


def _digest(model) -> str:
    """A digest of the weights of ``model``."""
    return hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()


def _bias_pngs(model) -> dict[str, bytes]:
    """A stand-in for the bias maps (Swin-T's take seconds to draw): a digest of the weights they would show."""
    return {"bias_stage0.png": _digest(model).encode()}


def _write_onnx(program, path, names, metadata, quantize) -> None:
    """A stand-in for the ONNX file (Swin-T's export takes 20 s): its metadata and a digest of the weights exported
    (``program``: the model, as the stand-in export_program returns it)."""
    path.write_text(json.dumps({"metadata": metadata, "weights": _digest(program)}))


@pytest.fixture(scope="module")
def cached(offline_hub):
    """The weights of TAG in the module's offline hub cache (random values, Swin-T's shapes): their file."""
    offline_hub.add_timm("swin_tiny_patch4_window7_224.ms_in1k")
    return cached_weights(TAG)


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(folder / "a.png")
    return folder


@pytest.mark.parametrize("script", RUNS)
def test_a_pretrained_tag_alone_loads_its_weights(cached, images, tmp_path, monkeypatch, script):
    """visualize.py drew, extract_features.py extracted with, and export_onnx.py exported (its metadata naming
    ImageNet's classes) the random initial weights of a pretrained tag. Every Swin-T built here gets its weights
    loaded over it: the truncated-normal initialisation (~0.6 s a model) is left out, which leaves PyTorch's default
    random one, so weights that were not loaded still show."""
    monkeypatch.setattr(swinlite.models.swin, "_init_weights", lambda module: None)
    monkeypatch.setattr(swinlite.visualize, "bias_pngs", _bias_pngs)
    monkeypatch.setattr(swinlite.export, "export_program", lambda model, *args, **kwargs: model)
    monkeypatch.setattr(swinlite.export, "write_onnx", _write_onnx)
    argv, written = RUNS[script]
    assert run_script(script, ["--model", TAG, *argv(images, tmp_path / "alone")]) == 0
    checkpoint = ["--model", TAG, "--checkpoint", cached]  # the same weights, as a file
    assert run_script(script, [*checkpoint, *argv(images, tmp_path / "file")]) == 0
    assert written(tmp_path / "alone") == written(tmp_path / "file")


@pytest.mark.parametrize("script", RUNS)
def test_a_name_without_published_weights_alone_is_one_error(images, tmp_path, capsys, script):
    """predict.py refused it with timm's RuntimeError text; extract_features.py and export_onnx.py used random
    weights with a note and visualize.py without a word."""
    argv = RUNS[script][0](images, tmp_path / "out")
    assert run_script(script, ["--model", PICO, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: timm publishes no pretrained weights for {PICO}") and err.count("\n") == 1, err
    assert err.strip().endswith("or pass a local weights file: --model NAME --checkpoint FILE")
    assert not (tmp_path / "out").exists()
