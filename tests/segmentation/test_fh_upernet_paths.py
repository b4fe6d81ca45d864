"""build_upernet given a file as its model name, as a pathlib.Path or with a suffix in another case, a .tar or an
.onnx: one ValueError with the hint (was a TypeError of no hint, or timm's plain unknown-model error)."""

from pathlib import Path, PurePosixPath

import pytest
import timm

from swinlite.segmentation import build_upernet


@pytest.fixture(autouse=True)
def _no_build(monkeypatch):
    def refuse_any_build(*args, **kwargs):
        raise AssertionError("build_upernet built a model before refusing the file")

    monkeypatch.setattr(timm, "create_model", refuse_any_build)


@pytest.mark.parametrize("name", [Path("best.safetensors"), Path("runs/seg/best.safetensors"), PurePosixPath("w")])
def test_a_path_object_gets_the_file_hint(name):
    with pytest.raises(ValueError, match=rf"^build_upernet: '{name}' is a file's path, not a model name; .*"
                       rf"pretrained='{name}'\), 3\)"):  # fmt: skip
        build_upernet(name, 3)


@pytest.mark.parametrize(
    "name", ["x.SAFETENSORS", "model.pth.tar", "Last.PTH", "w.Bin", "model.tar.gz", "weights.npz", ".safetensors"]
)
def test_weights_suffixes_in_any_case_and_tar_are_files(name):
    with pytest.raises(ValueError, match=rf"^build_upernet: '{name}' is a file's path, not a model name"):
        build_upernet(name, 3)


@pytest.mark.parametrize(
    "name",
    [
        "swinlite_tiny_patch4_window7_224.ms_in1k_typo",
        "swinlite_tiny_patch4_window7_224.foo",
        "swin_tiny_patch4_window7_224.foo",  # timm's model: a swinlite one is suggested
    ],
)
def test_a_mistyped_tag_of_a_model_is_no_file(name):  # was "'...' is a file's path" (since 41f733d)
    with pytest.raises(ValueError, match=rf"^unknown model .*'{name}'; did you mean swinlite_tiny_patch4_window7_224"):
        build_upernet(name, 3)


def test_a_pretrained_tag_is_no_suffix():  # built (refused by the fixture only), not taken for a file
    with pytest.raises(AssertionError, match="built a model before refusing"):
        build_upernet("swinlite_tiny_patch4_window7_224.ms_in1k", 3)


@pytest.mark.parametrize("name", ["best.onnx", Path("export/best.ONNX")])
def test_an_onnx_file_is_said_to_be_no_weights_file(name):
    with pytest.raises(ValueError, match=r"is an ONNX file, an exported model, which build_upernet does not load"):
        build_upernet(name, 3)
